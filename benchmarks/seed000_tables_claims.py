"""The numbers behind docs/results/seed000-tables2-3.md's claim-by-claim reading of a Tables 2-3
study: per configuration the final-episode means, and paired t-tests (common random numbers:
replicate r of every configuration shares its population and seed) of the differences the seed's
claims are about.

    python benchmarks/seed000_tables_claims.py outputs/studies/tables2-3
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

REWARD = {"utilitarian": "UP", "social_welfare": "SW", "rawlsian": "RMM", "lagrangian:0.5": "FL"}


def finals(study: Path) -> pd.DataFrame:
    rows = []
    for run in json.loads((study / "manifest.json").read_text())["runs"]:
        folder = study / "runs" / run["run_id"]
        if not (folder / "summary.json").exists():
            continue
        last = pd.read_parquet(folder / "episodes.parquet").iloc[-1]
        side, reward = run["columns"]["objective"].split(":", 1)
        rows.append({"agent": run["run_id"].split("-")[0].upper(), "side": side.replace("two_sided(0.5)", "two-sided"),
                     "reward": REWARD[reward], "rep": run["replicate"], "gap": last["wealth_gap"],
                     "ratio": last["inequality_ratio"], "profit": last["cumulative_profit"],
                     "welfare": (last["social_welfare_M"] + last["social_welfare_F"]) / 2})
    return pd.DataFrame(rows)


def paired(f: pd.DataFrame, a: tuple, b: tuple, metric: str) -> str:
    x = f.set_index(["agent", "side", "reward", "rep"])[metric].sort_index()
    da, db = x.loc[a], x.loc[b]
    common = da.index.intersection(db.index)
    d = da.loc[common] - db.loc[common]
    p = stats.ttest_1samp(d, 0).pvalue if len(d) > 1 else float("nan")
    return f"{'/'.join(a)} - {'/'.join(b)} {metric} {d.mean():+.4g} (paired t p = {p:.2g}, {int((d > 0).sum())}/{len(d)})"


def main(study: Path) -> None:
    f = finals(study)
    f["absratio"] = (f.ratio - 1).abs()
    f["absgap"] = f.gap.abs()
    means = f.groupby(["agent", "side", "reward"])[["gap", "ratio", "profit", "welfare", "absgap", "absratio"]].mean()
    counts = f.groupby(["agent", "side", "reward"]).size()
    pd.set_option("display.width", 200)
    print(means.assign(runs=counts).round(4).to_string())
    print("\nhighest profit:", means.profit.idxmax(), " highest welfare:", means.welfare.idxmax(),
          " largest mean gap:", means.gap.idxmax())
    for agent in ("RL", "PERL"):
        m = means.loc[agent]
        print(f"{agent}: best profit {m.profit.idxmax()}, best welfare {m.welfare.idxmax()}, ratio nearest 1 "
              f"{m.absratio.idxmin()}, smallest |gap| {m.absgap.idxmin()}")
        for side in ("outcome", "dm", "two-sided"):
            s = m.loc[side]
            print(f"  {side}: best profit {s.profit.idxmax()}, best welfare {s.welfare.idxmax()}, smallest |gap| "
                  f"{s.absgap.idxmin()}, ratio nearest 1 {s.absratio.idxmin()}, range of mean gap {s.gap.max() - s.gap.min():.1f}")
            for r in ("RMM", "FL"):
                for metric in ("gap", "profit", "welfare"):
                    print("    " + paired(f, (agent, side, r), (agent, side, "UP"), metric))
    for side in ("outcome", "two-sided", "dm"):
        for r in ("UP", "RMM", "FL"):
            for metric in ("profit", "welfare", "absratio"):
                print(paired(f, ("PERL", side, r), ("RL", side, r), metric))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
