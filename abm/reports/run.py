"""A run folder's report: figures (PNG, SVG, PDF) and Markdown/CSV tables; ``to_markdown`` for every report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from abm.errors import UserError
from abm.inspect import load_run


def run_figures(run, facet: str | None = None) -> list:
    """A run's figure specs: one per metric over episodes (groups on one axis; ``facet="group"``: one
    panel per group), the per-group rates, with an event log each group's state (wealth, score ...)
    distribution over episodes, and for a deep lender what its training did (``training.png``)."""
    from abm.reports import figures

    family = run.summary.get("family")
    ep = run.episodes
    style = figures.Style([], [], figures.groups_in(ep.columns))
    specs: list = [figures.run_metric(ep, m, family, style) for m in figures.metrics_in(ep.columns)]
    if facet == "group":
        specs = [figures.facet_by_group(spec) for spec in specs]
    rates = figures.group_rates(ep, family, style)
    if rates is not None:
        specs.append(rates)
    dist = figures.distribution({run.folder.name: [run.folder]}, family, list(style.groups))
    if dist is not None:
        dist.panels[0].title = "applicants of this run"
        specs.append(dist)
    training = figures.training_curve(run.folder, family)  # a deep lender's policy/training.csv
    if training is not None:
        specs.append(training)
    return specs


def render_run(folder: str | Path, formats=("png",), dpi: int | None = None, facet: str | None = None) -> Path:
    """Write ``report/`` inside a run folder: one figure per metric (``mean_wealth.png``: every group on
    one axis), ``group_rates.png``, ``distribution.png``, each in every one of ``formats`` at ``dpi``
    (``figures.output_options``), summary.md and summary.csv."""
    from abm.reports import figures

    formats, dpi, facet = figures.output_options(formats, figures.DPI if dpi is None else dpi, facet)
    run = load_run(folder)
    ep = run.episodes
    out = Path(folder) / "report"
    out.mkdir(exist_ok=True)
    for spec in run_figures(run, facet):
        figures.save(spec, out, formats=formats, dpi=dpi)
    table = final_table(ep)
    table.to_csv(out / "summary.csv", index=False)
    (out / "summary.md").write_text(f"# {run.folder.name}\n\n" + to_markdown(table) + "\n")
    return out


def final_table(ep: pd.DataFrame) -> pd.DataFrame:
    """The last episode's metrics as a two-column table."""
    if ep.empty:
        raise UserError("run has no episodes")
    last = ep.iloc[-1]
    return pd.DataFrame({"metric": list(ep.columns), "value": [last[c] for c in ep.columns]})


def to_markdown(frame: pd.DataFrame, floatfmt: str = ".4g") -> str:
    """A GitHub Markdown table without the optional ``tabulate`` dependency."""
    def fmt(v):
        if isinstance(v, (float, np.floating)):
            return "NaN" if not np.isfinite(v) else format(float(v), floatfmt)
        return str(v)

    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def print_run_summary(folder: Path, console) -> None:
    """The run's per-group table and headline numbers: the lending stems (totals of counts) or, for
    a family without them, its own per-group metrics at the final episode."""
    from rich.table import Table

    from abm import registry
    from abm.reports import figures

    run = load_run(folder)
    ep = run.episodes
    last = ep.iloc[-1]
    scenario = registry.family_module(run.summary["family"]).Scenario if run.summary.get("family") else None
    groups = figures.groups_in(ep.columns)
    stems = ["mean_wealth", "social_welfare", "reach", "applications", "approvals", "defaults", "recall"]
    title = f"{run.summary.get('policy')} after {len(ep)} episodes"
    if not any(f"{stem}_{g}" in ep.columns for stem in stems for g in groups) and scenario is not None:
        stems = [k.removesuffix("_{g}") for k in scenario.metric_definitions if k.endswith("_{g}")]
        first = next((s for s in stems if any(c.startswith(f"{s}_") for c in ep.columns)), None)
        groups = [c.removeprefix(f"{first}_") for c in ep.columns if first and c.startswith(f"{first}_")]
        title += " (per group: the final episode)"
    table = Table(title=title)
    table.add_column("metric")
    for g in groups:
        table.add_column(g, justify="right")
    for stem in stems:
        cols = [f"{stem}_{g}" for g in groups]
        if all(c in ep.columns for c in cols):
            total = stem in ("applications", "approvals", "defaults")
            vals = [ep[c].sum() if total else last[c] for c in cols]
            table.add_row(stem + (" (total)" if total else ""), *[f"{float(v):.4g}" for v in vals])
    console.print(table)
    headline = tuple(getattr(scenario, "benchmark", ()))
    extras = [f"{k} = {float(last[k]):.4g}" for k in dict.fromkeys(
        ("wealth_gap", "inequality_ratio", "cumulative_profit", "credit_gap", "recall_gap", *headline))
        if k in ep.columns and pd.notna(last[k])]
    console.print("; ".join(extras))
