"""Seed 002's result tables (Tables 1, 2 and 5) from a finished study: mean ± 95% CI per method.

Each run contributes its final-episode row (seed 002: "evaluated at the end of the training";
Avg. Return is the run's cumulative return over its whole evaluation horizon). The interval is
the Student-t 95% interval of the mean over the study's seeded replicates. The table form is
chosen from the metrics the family reports: lending (credit gap and recalls), admissions
(social burden and recalls), more than two groups (recall mean, SD and gap).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats


def mean_ci(values) -> tuple[float, float]:
    """Mean and the half-width of its Student-t 95% confidence interval."""
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if len(x) == 0:
        return float("nan"), float("nan")
    if len(x) == 1:
        return float(x[0]), float("nan")
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(x.mean()), float(half)


def _fmt(mean: float, half: float) -> str:
    if not np.isfinite(mean):
        return "n/a"
    return f"{mean:.2f} ± {half:.2f}" if np.isfinite(half) else f"{mean:.2f}"


def table_columns(final: pd.DataFrame) -> list[tuple[str, pd.Series]]:
    """(header, per-run values) in the seed's column order for this family's metrics."""
    recalls = sorted(c for c in final.columns if c.startswith("recall_") and c != "recall_gap")
    ret = final["cumulative_return"] if "cumulative_return" in final else final.get("cumulative_profit")
    cols: list[tuple[str, pd.Series]] = [("Avg. Return", ret)]
    if len(recalls) > 2:  # Table 5: many groups
        r = final[recalls].astype(float)
        return cols + [("Recall Mean", r.mean(axis=1)), ("Recall SD", r.std(axis=1, ddof=0)),
                       ("Recall Gap", final["recall_gap"])]
    burdens = sorted(c for c in final.columns if c.startswith("social_burden_"))
    if burdens:  # Table 2: admissions
        cols += [(f"Soc. Bdn. ({c.removeprefix('social_burden_')})", final[c]) for c in burdens]
    elif "credit_gap" in final:  # Table 1: lending
        cols.append(("Credit Gap", final["credit_gap"]))
    cols += [(f"Recall ({c.removeprefix('recall_')})", final[c]) for c in recalls]
    if "recall_gap" in final:
        cols.append(("Recall Gap", final["recall_gap"]))
    return cols


def seed_tables(study: pd.DataFrame) -> str:
    """Markdown: one table per study group, one row per configuration (method)."""
    if study.empty or "recall_gap" not in study.columns:
        return ""
    last = study.groupby("run_id", sort=False)["episode"].transform("max")
    final = study[study["episode"] == last]
    lines = ["# Seed 002 tables", "",
             "Final episode of every run; mean ± 95% CI (Student t) over the seeded replicates.", ""]
    for group, part in final.groupby("group", sort=False):
        cols = table_columns(part)
        header = ["Method", "Runs", *[h for h, _ in cols]]
        lines += [f"## {group}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for config, rows in part.groupby("config", sort=False):
            cells = [str(config), str(len(rows))]
            for _, series in cols:
                cells.append(_fmt(*mean_ci(series.loc[rows.index].astype(float))))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def write_seed_tables(folder: str | Path, out: str | Path) -> Path | None:
    """Write ``seed_tables.md`` beside a study report when the runs carry recall metrics."""
    path = Path(folder) / "study.parquet"
    if not path.is_file():
        return None
    text = seed_tables(pd.read_parquet(path))
    if not text:
        return None
    target = Path(out) / "seed_tables.md"
    target.write_text(text)
    return target
