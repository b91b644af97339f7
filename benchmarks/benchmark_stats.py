"""The benchmark across environments (docs/results/benchmark.md) from its ledger: per environment,
each method's reward and fairness gap (the family's ``Scenario.benchmark``) as mean ± 95% CI over
the seeds, its share of candidates approved, and each method against approve-all on both.

    python benchmarks/benchmark_stats.py docs/results/benchmark.csv scenarios/studies/benchmark.yaml

The study file names each run's environment (its group), family and method (its label, else its
policy). Against approve-all: the difference of the means, a two-sided Welch test per method and
metric, Holm-adjusted over the environment's tests (both metrics); two constant samples (every
seed the same value) differ exactly or not at all, without a test. Bad input exits 2 with one line.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from oneline import OneLineParser, fail
from seed002_budget_stats import Sample, holm, welch
from study_ledger import read_ledger

REFERENCE = "approve_all"


def runs_of(study: str) -> pd.DataFrame:
    """run_id -> environment, family, method: from the study file."""
    from abm.errors import UserError
    from abm.study.spec import load_study

    try:
        spec = load_study(study)
    except (UserError, OSError, ValueError) as exc:
        fail(f"{study}: {str(exc).splitlines()[0] if str(exc) else 'cannot be read'}")
    return pd.DataFrame([{"run_id": r.run_id, "study_seed": r.seed, "environment": r.groups[0],
                          "family": r.scenario["family"], "method": r.columns.get("label") or r.columns["policy"]}
                         for r in spec.runs])


def frame(ledger: str, study: str) -> pd.DataFrame:
    """The ledger's rows of the study's runs, with environment, family and method."""
    rows = read_ledger(Path(ledger))
    runs = runs_of(study)  # in the study file's order: environments, then methods, then seeds
    out = runs.merge(rows.drop(columns=[c for c in runs if c in rows and c != "run_id"]), on="run_id").copy()
    if out.empty:
        fail(f"{ledger}: none of its runs is a run of {study}")
    other = out[out["seed"].astype(int) != out["study_seed"]]
    if len(other):
        fail(f"{ledger}: run {other['run_id'].iloc[0]} has seed {int(other['seed'].iloc[0])}, {study} gives it "
             f"{int(other['study_seed'].iloc[0])}: the ledger is of another study")
    return out


def approved_share(part: pd.DataFrame) -> pd.Series:
    """Per run: approvals / applications summed over the groups (the final row), NaN where the family
    logs none."""
    apps = [c for c in part.columns if c.startswith("applications_") and part[c].notna().any()]
    if not apps:
        return pd.Series(np.nan, index=part.index)
    approvals = part[[c.replace("applications_", "approvals_") for c in apps]].astype(float).sum(axis=1)
    return approvals / part[apps].astype(float).sum(axis=1).replace(0, np.nan)


def cell(values) -> str:
    """mean ± 95% half-width, as the study report's benchmark table writes it."""
    from abm.reports.benchmark import cell as text
    from abm.reports.seed002 import mean_ci

    return text(*mean_ci(values))


def pvalue(p: float) -> str:
    return "< 1e-4" if p < 1e-4 else f"{p:.2g}"


def against(part: pd.DataFrame, metrics: tuple[str, str]) -> list[dict]:
    """Each method against approve-all on both metrics; Holm over the environment's tests."""
    ref = part[part["method"] == REFERENCE]
    out = []
    for method, runs in part.groupby("method", sort=False):
        if method == REFERENCE:
            continue
        for metric in metrics:
            a = runs[metric].astype(float).dropna().to_numpy()
            b = ref[metric].astype(float).dropna().to_numpy()
            row = {"method": method, "metric": metric, "n": (len(a), len(b)), "p": np.nan,
                   "diff": float(a.mean() - b.mean()) if len(a) and len(b) else np.nan}
            if len(a) < 2 or len(b) < 2:
                row["note"] = "too few seeds with a value"
            elif np.ptp(a) == 0 and np.ptp(b) == 0:
                row["note"] = "identical in every seed" if a[0] == b[0] else "exact (deterministic)"
            else:
                row["p"] = welch(Sample.of(a), Sample.of(b))[2]
            out.append(row)
    tested = [r for r in out if not np.isnan(r["p"])]
    for r, adjusted in zip(tested, holm([r["p"] for r in tested])):
        r["holm"] = float(adjusted)
    return out


def markdown(data: pd.DataFrame) -> str:
    from abm.reports.benchmark import headline

    lines = []
    for env, part in data.groupby("environment", sort=False):
        family = part["family"].iloc[0]
        reward, gap = headline(family)
        missing = [m for m in (reward, gap) if m not in part]
        if missing:
            fail(f"the ledger has no column {missing[0]!r}, the headline of {family} (its rows were computed "
                 "before the family reported it: run the study again)")
        part = part.assign(approved=approved_share(part))
        lines += [f"### {env} ({family})", "", f"| method | {reward} | {gap} | approved share | seeds |",
                  "|---|---|---|---|---|"]
        for method, runs in part.groupby("method", sort=False):
            lines.append(f"| {method} | {cell(runs[reward])} | {cell(runs[gap])} | {cell(runs['approved'])} | "
                         f"{len(runs)} |")
        tests = against(part, (reward, gap))
        lines += ["", f"**{env}: against {REFERENCE}** (Welch, Holm over the environment's "
                      f"{sum(1 for r in tests if 'holm' in r)} tests)", "",
                  "| method | metric | difference | Welch p | Holm p |", "|---|---|---|---|---|"]
        for r in tests:
            if "note" in r:
                lines.append(f"| {r['method']} | {r['metric']} | {r['diff']:+.3g} | {r['note']} | - |")
            else:
                lines.append(f"| {r['method']} | {r['metric']} | {r['diff']:+.3g} | {pvalue(r['p'])} | "
                             f"{pvalue(r['holm'])} |")
        lines.append("")
    return "\n".join(lines + cost(data))


def cost(data: pd.DataFrame) -> list[str]:
    """CPU seconds per run (the ledger's ``cpu_s``: training, the run and its evaluation episodes),
    mean over the seeds, one column per environment; the study's total last."""
    if "cpu_s" not in data:
        return []
    table = data.pivot_table(index="method", columns="environment", values="cpu_s", aggfunc="mean", sort=False)
    envs = list(dict.fromkeys(data["environment"]))
    lines = ["### cost: CPU seconds per run (mean over seeds)", "", "| method | " + " | ".join(envs) + " |",
             "|---|" + "---|" * len(envs)]
    for method, row in table.iterrows():
        lines.append(f"| {method} | " + " | ".join("-" if pd.isna(row.get(e)) else f"{row[e]:.0f}" for e in envs)
                     + " |")
    return lines + ["", f"All {len(data)} runs: {data['cpu_s'].sum():,.0f} CPU seconds.", ""]


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("ledger", help="the benchmark's ledger (benchmarks/study_ledger.py)")
    parser.add_argument("study", help="the study file that names its runs' environments and methods")
    args = parser.parse_args(argv)
    sys.stdout.write(markdown(frame(args.ledger, args.study)))


if __name__ == "__main__":
    main()
