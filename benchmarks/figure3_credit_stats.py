"""Paired PERL - RL and discounted - episode statistics of outputs/studies/figure3-credit (docs/results/seed000-figure3.md,
"PERL vs RL at full size under both credits"). Run after: abm study scenarios/studies/figure3-credit.yaml.

    python benchmarks/figure3_credit_stats.py [STUDY_FOLDER]    # default outputs/studies/figure3-credit

A folder without study.parquet exits 2 with one line."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from oneline import OneLineParser


def main() -> int:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default="outputs/studies/figure3-credit")
    args = ap.parse_args()
    path = Path(args.folder) / "study.parquet"
    if not path.is_file():
        print(f"{path}: no such file (run abm study scenarios/studies/figure3-credit.yaml first)", file=sys.stderr)
        return 2
    d = pd.read_parquet(path)
    d["social_welfare"] = d[["social_welfare_M", "social_welfare_F"]].mean(axis=1)
    d["credit"] = np.where(d["policy"].str.contains("discounted"), "discounted", "episode")
    d["agent"] = np.where(d["policy"].str.startswith("perl"), "PERL", "RL")
    for credit in ("episode", "discounted"):
        x = d[d.credit == credit]
        w = x.pivot_table(index=["replicate", "episode"], columns="agent", values="social_welfare")
        diff = (w["PERL"] - w["RL"]).unstack("replicate")  # episode x replicate
        means = diff.mean(axis=1)
        above = int((means > 0).sum())
        last = diff.loc[diff.index.max()]
        t = stats.ttest_1samp(last, 0)
        avg = diff.mean(axis=0)  # per replicate: mean over all episodes
        t2 = stats.ttest_1samp(avg, 0)
        seeds_pos = int((last > 0).sum())
        print(f"{credit}: PERL mean welfare above RL's in {above}/{len(means)} episodes; "
              f"episode {diff.index.max()}: PERL-RL {last.mean():+.5f} (sd {last.std(ddof=1):.5f}, p={t.pvalue:.3f}, {seeds_pos}/10 seeds); "
              f"mean over episodes per seed: {avg.mean():+.5f} (p={t2.pvalue:.3f}, {(avg>0).sum()}/10)")
        for m in ("wealth_gap", "cumulative_profit", "inequality_ratio"):
            w = x.pivot_table(index=["replicate", "episode"], columns="agent", values=m)
            dd = (w["PERL"] - w["RL"]).unstack("replicate").loc[diff.index.max()]
            print(f"   {m}: PERL-RL at last {dd.mean():+.4g} (p={stats.ttest_1samp(dd,0).pvalue:.3f})")
    # credit effect within agent
    for agent in ("RL","PERL"):
        x = d[d.agent==agent]
        for m in ("social_welfare","wealth_gap","cumulative_profit"):
            w = x.pivot_table(index=["replicate","episode"], columns="credit", values=m)
            dd = (w["discounted"]-w["episode"]).unstack("replicate").iloc[-1]
            print(f"{agent} discounted-episode {m} at last: {dd.mean():+.4g} (p={stats.ttest_1samp(dd,0).pvalue:.3f}, {(dd>0).sum()}/10 >0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
