"""The Figure-1 table of seed 001 from a finished `scenarios/studies/fig1.yaml` study.

    python -m policies.fair_mdp.fig1_study outputs/studies/fig1

For each gamma and constraint (DP, EO): the exact reward <Lambda, R> and constraint value
|gap| of race-blind, optimistic, Algorithm 2, Algorithm 1 and conservative (final episode of
each run: the exact values of the policy used), the simulated counterparts pooled over the
run's cohorts (+- 1.96 standard errors), and which of the seed's orderings hold
(`figure1.orderings`).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from .figure1 import orderings

ROWS = (("race-blind", "race_blind", None), ("optimistic (LP)", "optimistic", "{c}"),
        ("Algorithm 2 (CCE)", "fair_cce", "{c}"), ("Algorithm 1 (LP)", "fair_lp", "{c}"),
        ("conservative (one q)", "conservative", "{c}"))


def _label(name: str, constraint: str | None) -> str:
    return name if constraint is None else f"{name}(constraint={constraint})"


def final_rows(folder: str | Path) -> pd.DataFrame:
    """One row per run: its last episode (exact values and pooled simulated estimates)."""
    study = pd.read_parquet(Path(folder) / "study.parquet")
    return study.loc[study.groupby("run_id")["episode"].idxmax()].reset_index(drop=True)


def tables(folder: str | Path, epsilon: float = 0.1) -> str:
    final = final_rows(folder)
    out = []
    gamma_col = "bank.gamma" if "bank.gamma" in final.columns else None
    gammas = sorted(final[gamma_col].unique()) if gamma_col else [None]
    for gamma in gammas:
        part = final if gamma is None else final[final[gamma_col] == gamma]
        for constraint in ("dp", "eo"):
            gap, se = f"exact_{constraint}_gap", f"sim_{constraint}_gap"
            out.append(f"**gamma = {gamma}, {'demographic parity' if constraint == 'dp' else 'equal opportunity'}**\n")
            out.append("| policy | reward <Lambda,R> (exact) | simulated reward | constraint value (exact) "
                       "| simulated abs(gap) |")
            out.append("|---|---:|---:|---:|---:|")
            rows = {}
            for title, name, params in ROWS:
                match = part[part["policy"] == _label(name, None if params is None else constraint)]
                if match.empty:
                    continue
                r = match.iloc[0]
                rows[title] = (float(r["exact_reward"]), float(r["exact_discounted_return"]), abs(float(r[gap])))
                out.append(f"| {title} | {r['exact_reward']:.6f} | {r['sim_reward']:.4f} ± "
                           f"{1.96 * r['sim_reward_se']:.4f} | {abs(r[gap]):.4f} | {abs(r[se]):.3f} ± "
                           f"{1.96 * r[se + '_se']:.3f} |")
            out.append("")
            if len(rows) == len(ROWS):
                out += [f"- {line}" for line in orderings(rows, epsilon)]
                out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m policies.fair_mdp.fig1_study STUDY_FOLDER", file=sys.stderr)
        return 2
    print(tables(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
