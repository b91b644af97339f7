"""The Bisimulator's dynamics phases with helper processes (``ABM_PHASE_WORKERS``): the same
training with W = 1, 2, ... processes per phase, its phases' wall time, how many candidates the
helpers scored and how many of those the search used, and whether omega and J_dyn are the same
(they must be: docs/MODEL.md, "Helper processes").

    python benchmarks/phase_helpers.py                      # the bench's bisim_ppo figure, W = 1, 2
    python benchmarks/phase_helpers.py --workers 1,2,4 --steps 10240 --seed 3
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from oneline import OneLineParser, positive

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def workers_list(text: str) -> list[int]:
    """Comma-separated process counts, each 1 to 64 (argparse type)."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(1 <= v <= 64 for v in values):
        raise argparse.ArgumentTypeError(f"comma-separated whole numbers from 1 to 64, got {text!r}")
    return values


def train(workers: int, steps: int, seed: int) -> dict:
    from abm.bench import train_lender

    sim, wall, _ = train_lender("bisim_ppo", steps, ("policy.backend=lean",), seed,
                                env={"ABM_PHASE_WORKERS": str(workers)})
    trainer = sim.policy.bisimulator
    return {"workers": workers, "wall_s": round(wall, 2),
            "phase_s": [round(x, 2) for x in trainer.phase_seconds],
            "helper_scores_used": [u for u, _ in trainer.from_helpers],
            "helper_scores_made": [m for _, m in trainer.from_helpers],
            "omega": trainer.bisim.omega.tolist(), "j_dyn": trainer.bisim.last_j_dyn}


def main() -> None:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=workers_list, default=[1, 2], help="processes per phase to compare (comma-separated)")
    ap.add_argument("--steps", type=positive, default=5_120, help="training decisions (5,120: one phase)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    counts = args.workers
    rows = [train(w, args.steps, args.seed) for w in counts]
    for row in rows:
        print(json.dumps(row))
    same = all(r["omega"] == rows[0]["omega"] and r["j_dyn"] == rows[0]["j_dyn"] for r in rows)
    print(f"omega and J_dyn {'identical' if same else 'DIFFER'} across W = {','.join(map(str, counts))}; load average "
          f"{os.getloadavg()[0]:.2f}")
    raise SystemExit(0 if same else 1)


if __name__ == "__main__":
    main()
