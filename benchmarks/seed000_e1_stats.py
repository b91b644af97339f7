"""The tests behind docs/results/seed000-e1.md's readings of an E.1 study (seeds keyed by each
configuration, so comparisons are unpaired: Welch's t-test over the 3 seeds; a count or a value
fixed by the rules is exact).

    python benchmarks/seed000_e1_stats.py outputs/studies/e1-heuristics
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
from scipy import stats


def finals(study: Path) -> pd.DataFrame:
    rows = []
    for run in json.loads((study / "manifest.json").read_text())["runs"]:
        ep = pd.read_parquet(study / "runs" / run["run_id"] / "episodes.parquet")
        last = ep.iloc[-1]
        rows.append({"regime": run["columns"]["population.regime"], "policy": run["columns"]["policy"],
                     "profit": last["cumulative_profit"], "ratio": last["inequality_ratio"], "gap": last["wealth_gap"],
                     "loans": int((ep["approvals_M"] + ep["approvals_F"]).sum()),
                     "loans_last50": int((ep["approvals_M"] + ep["approvals_F"]).iloc[-50:].sum())})
    return pd.DataFrame(rows)


def main(study: Path) -> None:
    f = finals(study)
    short = {p: p.split("(")[0] for p in f.policy.unique()}
    f["policy"] = f.policy.map(short)
    for regime, part in f.groupby("regime"):
        by = {p: g for p, g in part.groupby("policy")}
        print(f"== {regime}")
        best = by["oracle"].profit
        for other in sorted(by):
            if other != "oracle":
                t = stats.ttest_ind(best, by[other].profit, equal_var=False)
                print(f"  profit oracle - {other}: {best.mean() - by[other].profit.mean():+,.0f} (Welch p = {t.pvalue:.2g})")
        a = by["approve_all"].profit
        print(f"  approve_all profit {a.mean():+,.0f} (one-sample t vs 0: p = {stats.ttest_1samp(a, 0).pvalue:.2g})")
        for rule in ("wealth_threshold", "equal_opportunity", "score_threshold"):
            t = stats.ttest_ind(by[rule].ratio, by["approve_all"].ratio, equal_var=False)
            print(f"  ratio {rule} - approve_all: {by[rule].ratio.mean() - by['approve_all'].ratio.mean():+.2f} "
                  f"(Welch p = {t.pvalue:.2g})")
        for p in ("one_step", "score_threshold", "reject_all"):
            print(f"  {p}: loans per seed {list(by[p].loans)}, in the last 50 episodes {list(by[p].loans_last50)}, "
                  f"profit per seed {[round(x) for x in by[p].profit]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
