"""Where a full Bisimulator run's CPU time goes, block by block (docs/results/seed002-table1.md, "What a full
DQN Bisimulator run costs, block by block"): trains ``bisim_dqn`` (or ``bisim_ppo``) on lending-credit.yaml as
``abm bench``'s training figure does, and prints per ``--block`` decisions the CPU seconds of the
block, of its gradient steps (lean DQN's ``train``) and of its dynamics phases, and the size of
the replay buffer's table of distinct observations (None: past its 4,096 rows).

    python benchmarks/bisim_cost_blocks.py --policy bisim_dqn --decisions 400000 --stop-after 163840

``--stop-after`` ends the measurement early (the schedules still follow ``--decisions``);
``--set`` passes scenario overrides. Bad values exit 2 with one line.
"""
from __future__ import annotations

import sys
import time

from oneline import OneLineParser


class Stop(Exception):
    pass


def main() -> None:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="bisim_dqn", choices=("bisim_dqn", "bisim_ppo"))
    ap.add_argument("--decisions", type=int, default=400_000)
    ap.add_argument("--block", type=int, default=5_120)
    ap.add_argument("--stop-after", type=int, default=None)
    ap.add_argument("--set", action="append", default=[], dest="sets")
    args = ap.parse_args()
    for name in ("decisions", "block", "stop_after"):
        value = getattr(args, name)
        if value is not None and value < 1:
            print(f"--{name.replace('_', '-')}: must be a positive whole number, got {value}", file=sys.stderr)
            raise SystemExit(2)

    from abm.bench import lender_training
    from abm.errors import UserError
    from policies.deep import bisimulator as B
    from policies.deep import lean_dqn as L

    clock = {"train": 0.0, "phase": 0.0}

    def timed(cls, name, key):
        original = getattr(cls, name)

        def wrapper(*a, **k):
            t = time.process_time()
            try:
                return original(*a, **k)
            finally:
                clock[key] += time.process_time() - t
        setattr(cls, name, wrapper)

    timed(L.LeanDQNLearner, "train", "train")
    timed(B.Bisimulator, "dynamics_phase", "phase")
    mark = {"cpu": time.process_time(), "train": 0.0, "phase": 0.0, "n": 0}
    on_step = B.BisimTrainer.on_step

    def counting(self, records):
        on_step(self, records)
        mark["n"] += len(records)
        if mark["n"] % args.block == 0:
            now = time.process_time()
            buf = getattr(self.learner, "buffer", None)
            table = None if buf is None or buf.ids is None else len(buf.ids)
            print(f"{mark['n']:>8} decisions: block {now - mark['cpu']:6.1f} CPU-s, gradient steps "
                  f"{clock['train'] - mark['train']:5.1f}, dynamics phase {clock['phase'] - mark['phase']:5.1f}, "
                  f"distinct observations {table}", flush=True)
            mark.update(cpu=now, train=clock["train"], phase=clock["phase"])
            if args.stop_after is not None and mark["n"] >= args.stop_after:
                raise Stop
    B.BisimTrainer.on_step = counting
    try:
        lender_training(args.policy, args.decisions, ("policy.backend=lean", "policy.variant=full", *args.sets))
    except Stop:
        pass
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
