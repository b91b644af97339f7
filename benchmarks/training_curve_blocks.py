"""A deep lender's training curve in blocks (docs/results/seed002-table2.md, the 3-seed session studies): per run
folder, the training policy's approval rate per group (approvals over applications) and the mean
return per training episode, in blocks of its ``policy/training.csv`` by share of training.

    python benchmarks/training_curve_blocks.py RUN_FOLDER [RUN_FOLDER ...] [--edges 0,0.01,0.05,0.1,0.25,0.5,1]

A folder without ``policy/training.csv`` (not a deep lender, or trained before the curve was
kept) exits 2 with one line naming it.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from abm.reports.figures import groups_in

from oneline import OneLineParser


def blocks(folder: str, edges: list[float]) -> pd.DataFrame:
    path = Path(folder) / "policy" / "training.csv"
    try:
        rows = pd.read_csv(path)
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        print(f"{path}: no training curve to read ({type(exc).__name__})", file=sys.stderr)
        raise SystemExit(2) from None
    groups = groups_in(rows.columns)
    n = len(rows)
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        part = rows.iloc[int(round(lo * n)):int(round(hi * n))]
        line = {"block": f"{lo:.0%}-{hi:.0%}", "episodes": len(part), "return": part["return"].mean()}
        for g in groups:
            line[f"approve_{g}"] = part[f"approvals_{g}"].sum() / max(part[f"applications_{g}"].sum(), 1)
        out.append(line)
    return pd.DataFrame(out)


def main() -> None:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--edges", default="0,0.01,0.05,0.1,0.25,0.5,1", help="block edges as shares of training")
    args = ap.parse_args()
    try:
        edges = [float(x) for x in args.edges.split(",")]
    except ValueError:
        print(f"--edges: comma-separated numbers from 0 to 1, got {args.edges!r}", file=sys.stderr)
        raise SystemExit(2) from None
    if len(edges) < 2 or edges != sorted(edges) or edges[0] < 0 or edges[-1] > 1:
        print(f"--edges: at least two increasing numbers from 0 to 1, got {args.edges!r}", file=sys.stderr)
        raise SystemExit(2)
    for folder in args.folders:
        print(f"{folder}:")
        print(blocks(folder, edges).to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
