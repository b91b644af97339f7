"""Reports: PNG plots and Markdown/CSV tables for a run folder (studies: ``abm.study``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from abm.errors import UserError

RUN_PLOTS = (
    ("mean_wealth", "group mean wealth ($K)", "mean_wealth_{g}"),
    ("wealth_gap", "wealth gap ($K)", "wealth_gap"),
    ("cumulative_profit", "cumulative profit ($K)", "cumulative_profit"),
    ("reach", "reach rate", "reach_{g}"),
    # score families (credit_score, fico, admissions)
    ("credit_gap", "credit gap (1-Wasserstein)", "credit_gap"),
    ("recall", "recall tp/(tp+fn), cumulative", "recall_{g}"),
    ("recall_gap", "recall gap", "recall_gap"),
    ("cumulative_loans", "cumulative loans", "cumulative_loans_{g}"),
    ("social_burden", "social burden (mean cost paid by the admitted)", "social_burden_{g}"),
    ("cumulative_return", "cumulative return", "cumulative_return"),
)


def render(folder: str | Path) -> Path:
    folder = Path(folder)
    if (folder / "study.yaml").is_file() or (folder / "runs").is_dir():
        from abm import study

        return study.render_report(folder)
    return render_run(folder)


def _groups(episodes: pd.DataFrame) -> list[str]:
    return [c.removeprefix("mean_wealth_") for c in episodes.columns if c.startswith("mean_wealth_")] or \
        [c.removeprefix("applications_") for c in episodes.columns if c.startswith("applications_")]


def render_run(folder: str | Path) -> Path:
    """Write ``report/`` inside a run folder: one PNG per metric, summary.md and summary.csv."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from abm.inspect import load_run

    run = load_run(folder)
    ep = run.episodes
    out = Path(folder) / "report"
    out.mkdir(exist_ok=True)
    groups = _groups(ep)
    for stem, title, pattern in RUN_PLOTS:
        cols = [pattern.format(g=g) for g in groups] if "{g}" in pattern else [pattern]
        cols = [c for c in cols if c in ep.columns]
        if not cols:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for c in cols:
            ax.plot(ep["episode"], ep[c], label=c.rsplit("_", 1)[-1] if "{g}" in pattern else None)
        ax.set_xlabel("episode")
        ax.set_title(title)
        if "{g}" in pattern:
            ax.legend(title="group")
        fig.tight_layout()
        fig.savefig(out / f"{stem}.png", dpi=110)
        plt.close(fig)
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
    from rich.table import Table

    from abm.inspect import load_run

    run = load_run(folder)
    ep = run.episodes
    last = ep.iloc[-1]
    groups = _groups(ep)
    table = Table(title=f"{run.summary.get('policy')} after {len(ep)} episodes")
    table.add_column("metric")
    for g in groups:
        table.add_column(g, justify="right")
    for stem in ("mean_wealth", "social_welfare", "reach", "applications", "approvals", "defaults", "recall"):
        cols = [f"{stem}_{g}" for g in groups]
        if all(c in ep.columns for c in cols):
            total = stem in ("applications", "approvals", "defaults")
            vals = [ep[c].sum() if total else last[c] for c in cols]
            table.add_row(stem + (" (total)" if total else ""), *[f"{float(v):.4g}" for v in vals])
    console.print(table)
    extras = [f"{k} = {float(last[k]):.4g}" for k in ("wealth_gap", "inequality_ratio", "cumulative_profit",
                                                       "credit_gap", "recall_gap") if k in ep.columns]
    console.print("; ".join(extras))
