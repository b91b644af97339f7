"""A study across environments (its groups name bases of different families, e.g.
``scenarios/studies/benchmark.yaml``): one table per environment, one row per method, the
family's reward and fairness gap (its ``Scenario.benchmark``) as mean ± 95% CI over the seeded
runs, and one figure of the methods' fairness-reward frontier per environment.

Each run contributes its final episode's row, averaged with its further evaluation episodes where
the policy ran some (as seed 002's tables: ``seed002.final_rows``); a family whose headline reads
the whole run names run-level metrics there (``cumulative_profit``, ``average_return``). Written as
``report/benchmark.md``, ``benchmark.csv`` and ``benchmark_frontier.png``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from abm import registry
from abm.errors import UserError
from abm.reports import figures as fig
from abm.reports.seed002 import final_rows, mean_ci, study_frame, study_group_column
from abm.reports.study import environments as study_environments, group_families
from abm.study.aggregate import read_manifest


CAPTION = ("Each run's final row, the mean over its evaluation episodes as in the tables (run-level metrics: "
           "the whole run). Points: mean over seeded runs; whiskers: "
           "95% confidence intervals (Student t, n - 1 d.f.) on both axes; n (runs per point): the table's seeds "
           "column. Ringed: Pareto-optimal in its panel (no other configuration has a smaller |gap| and a larger "
           "reward).")


def environments(folder: str | Path) -> dict[str, str]:
    """Study group -> the family its runs simulate (from the manifest's resolved scenarios)."""
    return group_families(read_manifest(Path(folder)))


def headline(family: str) -> tuple[str, str]:
    """The family's (reward, fairness gap) metric names: its ``Scenario.benchmark``."""
    return tuple(registry.family_module(family).Scenario.benchmark)


def _across(folder: str | Path) -> dict[str, str]:
    """``environments`` of a finished study across more than one family, else {} (not a study of
    ours: no runs, no or a damaged manifest, one family)."""
    if not (Path(folder) / "study.parquet").is_file():
        return {}
    try:
        envs = study_environments(read_manifest(Path(folder)))
    except (OSError, ValueError, KeyError, UserError):
        return {}
    return {} if None in envs else envs


def applies(folder: str | Path) -> bool:
    """Whether the study compares methods on more than one family."""
    return bool(_across(folder))


def table(folder: str | Path, envs: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per environment and method: reward and gap, mean and 95% half-width, seeds."""
    final = final_rows(study_frame(folder), folder)
    column = study_group_column(final)
    rows = []
    for env, family in (envs or environments(folder)).items():
        reward, gap = headline(family)
        part = final[final[column].astype(str) == env]
        for config, runs in part.groupby("config", sort=False):
            r, rh = mean_ci(runs[reward]) if reward in runs else (float("nan"),) * 2
            g, gh = mean_ci(runs[gap]) if gap in runs else (float("nan"),) * 2
            rows.append({"environment": env, "family": family, "method": str(config), "reward_metric": reward,
                         "reward": r, "reward_ci": rh, "gap_metric": gap, "gap": g, "gap_ci": gh,
                         "seeds": len(runs)})
    return pd.DataFrame(rows)


def cell(mean: float, half: float) -> str:
    """mean ± 95% half-width (3 and 2 significant digits), n/a without a mean."""
    if pd.isna(mean):
        return "n/a"
    return f"{mean:.3g} ± {half:.2g}" if pd.notna(half) else f"{mean:.3g}"


def markdown(frame: pd.DataFrame) -> str:
    lines = ["# Benchmark across environments", "",
             "Each run's final row (the mean over its evaluation episodes where it ran several; run-level metrics "
             "such as cumulative_profit or average_return read the whole run); mean ± half-width of the 95% CI "
             "(Student t, n - 1 d.f.) over the seeded runs.", ""]
    for env, part in frame.groupby("environment", sort=False):
        reward, gap = part["reward_metric"].iloc[0], part["gap_metric"].iloc[0]
        lines += [f"## {env} ({part['family'].iloc[0]})", "", f"| method | {reward} | {gap} | seeds |", "|---|---|---|---|"]
        lines += [f"| {r.method} | {cell(r.reward, r.reward_ci)} | {cell(r.gap, r.gap_ci)} | {r.seeds} |"
                  for r in part.itertuples()]
        lines.append("")
    return "\n".join(lines)


def write(folder: str | Path, out: str | Path) -> list[Path]:
    envs = _across(folder)
    if not envs:
        return []
    frame = table(folder, envs)
    if frame.empty:
        return []
    out = Path(out)
    frame.to_csv(out / "benchmark.csv", index=False)
    (out / "benchmark.md").write_text(markdown(frame))
    return [out / "benchmark.csv", out / "benchmark.md"]


def figures(folder: str | Path) -> list:
    """One frontier panel per environment: the family's gap (x) against its reward (y)."""
    envs = _across(folder)
    if not envs:
        return []
    study = study_frame(folder)
    final = final_rows(study, folder)  # the tables' values: each run's mean over its evaluation episodes
    column = study_group_column(final)
    style = fig.Style.of(study)  # one colour per method in every panel
    panels = []
    for env, family in envs.items():
        reward, gap = headline(family)
        part = final[final[column].astype(str) == env]
        if part.empty or reward not in part or gap not in part:
            continue
        spec = fig.frontier(part, gap, reward, family=family, style=style)
        spec.title = f"{env}: {spec.title}"
        panels.append(spec)
    if not panels:
        return []
    return [fig.Panels("benchmark_frontier", "Fairness-reward frontier per environment", panels,
                       ncols=min(2, len(panels)), caption=CAPTION, legend_by_config=True)]
