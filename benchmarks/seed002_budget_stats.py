"""Welch t-tests between methods of a seed 002 study at its budget (docs/results/seed002-table{1,2,5}.md): each run's final episode, averaged over its evaluation episodes as in
report/seed_tables.md; two-sided p for the difference of two methods' means over their seeds.

    python benchmarks/seed002_budget_stats.py outputs/studies/table5-budget-session \
        ppo,bisim_ppo ppo,elbert_po --metrics cumulative_return,recall_gap,recall_mean,recall_sd

(``recall_mean`` / ``recall_sd``: over the groups' recalls, with more than two groups, as Table 5.)

``--label PARAM,...`` tells apart configurations of one method that differ in a policy parameter:
a run whose policy sets PARAM is the method ``name[PARAM=value]`` (``elbert_po[alpha=20000]``;
a run at the default keeps the plain name).

``--pool FOLDER`` adds the runs of another study of the same scenario and budget (e.g. a
session study holding only the methods the first one left out) to the first folder's. A ledger
of runs (``benchmarks/study_ledger.py``, a .csv) stands wherever a study folder does. A run in
more than one of them (the same ``run_id``: a ledger that copied another's rows) counts once; two
copies whose episodes digests differ are two computations of one run and are refused.
"""
from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import pandas as pd
from scipy import stats

from abm.reports.seed002 import final_rows

from oneline import OneLineParser


def finals(folder: str) -> pd.DataFrame:
    if folder.endswith(".csv"):  # a ledger: its rows are the runs' final rows already
        from study_ledger import read_ledger

        out = read_ledger(Path(folder))
    else:
        table = Path(folder) / "study.parquet"
        if not table.is_file():
            print(f"{folder}: no study.parquet (render it with: abm report {folder})", file=sys.stderr)
            raise SystemExit(2)
        out = final_rows(pd.read_parquet(table), folder).rename(columns={"study_group": "group"})  # as a ledger
    out = out.copy()  # one block: a wide ledger (10 groups) read column by column warns "fragmented"
    out["method"] = out["policy"].str.extract(r"^([a-z_]+)", expand=False) + \
        out["policy"].str.contains("variant=full").map({True: "_full", False: ""})
    return out


def once_per_run(final: pd.DataFrame) -> pd.DataFrame:
    """Each run once: a run in several pooled sources (the same ``run_id``) would otherwise count as
    that many seeds. Copies whose ``episodes_sha256`` differ (where both have one) are refused."""
    if "run_id" not in final:
        return final
    if "episodes_sha256" in final:
        digests = final.dropna(subset=["episodes_sha256"]).groupby("run_id")["episodes_sha256"].nunique()
        clash = digests[digests > 1]
        if len(clash):
            print(f"--pool: run {clash.index[0]} is in more than one source with different episodes digests "
                  "(two computations of one run); pool sources that agree", file=sys.stderr)
            raise SystemExit(2)
    return final.drop_duplicates("run_id", keep="first").reset_index(drop=True)


def label(out: pd.DataFrame, params: list[str]) -> pd.DataFrame:
    """Append ``[PARAM=value]`` to the method of each run whose policy label sets PARAM."""
    for param in params:
        values = out["policy"].str.extract(rf"[(,]{param}=([^,)]+)", expand=False)
        if values.isna().all():
            print(f"--label {param}: no run's policy sets {param} (policies: "
                  f"{', '.join(sorted(out['policy'].unique()))})", file=sys.stderr)
            raise SystemExit(2)
        out["method"] = out["method"].where(values.isna(), out["method"] + "[" + param + "=" + values + "]")
    return out


def recall_columns(out: pd.DataFrame) -> pd.DataFrame:
    recalls = [c for c in out.columns if c.startswith("recall_G")]
    if len(recalls) > 2:  # Table 5's columns, as report/seed_tables.md computes them
        out["recall_mean"] = out[recalls].astype(float).mean(axis=1)
        out["recall_sd"] = out[recalls].astype(float).std(axis=1, ddof=0)
    return out


def main() -> None:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("pairs", nargs="+", help="method_a,method_b (policy names; bisim_ppo_full for the full variant)")
    ap.add_argument("--metrics", default="cumulative_return,recall_gap,credit_gap")
    ap.add_argument("--pool", action="append", default=[], metavar="FOLDER",
                    help="another study of the same scenario and budget whose runs join the first folder's")
    ap.add_argument("--label", default="", metavar="PARAM,...",
                    help="policy parameters whose values join the method name (elbert_po[alpha=20000])")
    args = ap.parse_args()
    params = [p for p in args.label.split(",") if p]
    bad = [p for p in params if not re.fullmatch(r"[a-z_][a-z0-9_]*", p)]
    if bad:
        ap.error(f"argument --label: {bad[0]!r} is not a policy parameter name")
    final = finals(args.folder)
    if args.pool:
        group = final["group"].iloc[0]
        final = once_per_run(pd.concat([final, *(finals(f).assign(group=group) for f in args.pool)],
                                       ignore_index=True))
    final = recall_columns(label(final, params))
    for group, part in final.groupby("group", sort=False):
        print(f"## {group}: methods {sorted(part['method'].unique())}")
        for pair in args.pairs:
            a, b = pair.split(",")
            for m in args.metrics.split(","):
                if m not in part:
                    continue
                x, y = part.loc[part.method == a, m].astype(float), part.loc[part.method == b, m].astype(float)
                if len(x) < 2 or len(y) < 2:
                    continue
                with warnings.catch_warnings():  # two constant samples: scipy warns, p is nan (said below)
                    warnings.simplefilter("ignore", RuntimeWarning)
                    t = stats.ttest_ind(x, y, equal_var=False)
                print(f"  {m}: {a} {x.mean():.4g} (n={len(x)}) - {b} {y.mean():.4g} (n={len(y)}) = "
                      f"{x.mean() - y.mean():+.4g}, Welch p = {t.pvalue:.3f}{' (both samples constant)' if x.std() == y.std() == 0 else ''}; per seed {a} {x.round(3).tolist()}, "
                      f"{b} {y.round(3).tolist()}")


if __name__ == "__main__":
    main()
