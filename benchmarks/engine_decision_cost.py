"""CPU time of one gym decision of the engine (benchmarks/RESULTS.md, "Training speed of the deep
lenders"): K worlds of a scenario behind ``abm.vector.AbmVectorEnv`` without decision records
(the lean learners' step), uniformly random actions; the best of ``--repeats`` rounds of
``--decisions`` decisions, in microseconds per decision, and the CPU time of one fresh
simulation (``AbmEnv.reset``: what every Bisimulator probe pays), in milliseconds.

    python benchmarks/engine_decision_cost.py [--scenarios lending-credit,admissions] [--worlds 16]

To compare two trees, run it under each one's ``PYTHONPATH`` in turn (interleaved, so both see
the same load); it prints one JSON line.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from oneline import OneLineParser, positive

ROOT = Path(__file__).resolve().parents[1]


def decision_us(path: Path, worlds: int, decisions: int, repeats: int) -> float:
    from abm.config import load_scenario
    from abm.vector import make_vector_env

    venv = make_vector_env(load_scenario(path, []), worlds)
    venv.records = False
    venv.reset(seed=0)
    steps = max(1, decisions // worlds)
    actions = np.random.default_rng(0).integers(0, 2, (steps, worlds))
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for row in actions:
            venv.step(row)
        best = min(best, (time.process_time() - start) / (steps * worlds) * 1e6)
    return best


def reset_ms(path: Path, resets: int, repeats: int) -> float:
    from abm.config import load_scenario
    from abm.gym import AbmEnv

    env = AbmEnv(load_scenario(path, []), sim_episodes=10**6)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for seed in range(resets):
            env.reset(seed=seed)
        best = min(best, (time.process_time() - start) / resets * 1e3)
    return best


def main() -> None:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="lending-credit,lending-conscientiousness,admissions",
                    help="scenario files under scenarios/ (names without .yaml), comma-separated")
    ap.add_argument("--worlds", type=positive, default=16, help="K worlds side by side (1-256)")
    ap.add_argument("--decisions", type=positive, default=10_240, help="decisions per round")
    ap.add_argument("--repeats", type=positive, default=5, help="rounds; the best is reported")
    ap.add_argument("--resets", type=positive, default=100, help="fresh simulations per round of the reset figure")
    args = ap.parse_args()
    from abm.errors import UserError
    from abm.vector import check_n_envs

    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    paths = [ROOT / "scenarios" / f"{n}.yaml" for n in names]
    missing = [str(p) for p in paths if not p.is_file()]
    if not names or missing:
        print(f"--scenarios: no scenario file {', '.join(missing) or '(none given)'}", file=sys.stderr)
        raise SystemExit(2)
    try:
        check_n_envs(args.worlds, "--worlds")
        out = {f"{n}_decision_us": round(decision_us(p, args.worlds, args.decisions, args.repeats), 2)
               for n, p in zip(names, paths)}
        out[f"{names[0]}_reset_ms"] = round(reset_ms(paths[0], args.resets, args.repeats), 3)
    except UserError as exc:
        print(str(exc), file=sys.stderr)
        raise SystemExit(2) from None
    print(json.dumps(out))


if __name__ == "__main__":
    main()
