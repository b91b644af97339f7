"""Seed 002's result tables (Tables 1, 2 and 5) from a finished study: mean ± 95% CI per method.

Each run contributes its final-episode row (seed 002: "evaluated at the end of the training";
Avg. Return is the run's cumulative return over its whole evaluation horizon), averaged with the
final rows of its further evaluation episodes where the policy ran some (``eval_episodes``:
``runs/<run>/policy/evaluations.json``; seed 002: "10 seeds and 5 evaluation episodes per
seed"). The interval is the Student-t 95% interval of the mean over the study's seeded
replicates (one value per seed: the mean over its evaluation episodes). The table form is
chosen from the metrics the family reports: lending (credit gap and recalls), admissions
(social burden and recalls), more than two groups (recall mean, SD and gap). ``abm report`` writes
them as ``report/seed_tables.md`` for every study whose runs carry a recall gap; ``figures`` gives
the figure of the same form over the evaluation (mean and 95% Student-t band over the replicates, not
smoothed; one row of panels per study group): lending, Figure 1 (``seed002_figure1.png``:
return, recall of each group, credit gap); admissions, Figure 10 (``seed002_figure10.png``:
return, recall gap, social burden of each group); more than two groups, Figure 11
(``seed002_figure11.png``: return, recall gap, recall mean and SD over groups).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def mean_ci(values) -> tuple[float, float]:
    """Mean and the half-width of its Student-t 95% confidence interval (``figures.mean_half``)."""
    from abm.reports.figures import mean_half

    mean, half, _ = mean_half(values)
    return mean, half


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
        if "credit_gap_w2" in final and final["credit_gap_w2"].notna().any():  # metrics.credit_gap_w2
            cols.append(("Credit Gap (W2²)", final["credit_gap_w2"]))
    cols += [(f"Recall ({c.removeprefix('recall_')})", final[c]) for c in recalls]
    if "recall_gap" in final:
        cols.append(("Recall Gap", final["recall_gap"]))
    return cols


EVALUATIONS = Path("policy") / "evaluations.json"


def evaluation_rows(folder: str | Path | None, run_id: str) -> list[dict]:
    """The final rows of a run's further evaluation episodes (none when it ran only its own)."""
    if folder is None:
        return []
    path = Path(folder) / "runs" / str(run_id) / EVALUATIONS
    if not path.is_file():
        return []
    import json

    from abm.errors import UserError, read_user_file

    try:
        rows = json.loads(read_user_file(path))  # bounded: a run folder may come from someone else
    except (UserError, ValueError):
        return []
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def with_evaluations(final: pd.DataFrame, folder: str | Path | None) -> pd.DataFrame:
    """``final`` (one row per run) with every numeric metric replaced by its mean over the run's
    evaluation episodes (its own final row and those of ``evaluations.json``) and a column
    ``eval_episodes`` counting them."""
    out = final.copy()
    out["eval_episodes"] = 1
    numeric = [c for c in final.columns if pd.api.types.is_numeric_dtype(final[c]) and not pd.api.types.is_bool_dtype(final[c])
               and c not in ("episode", "seed")]
    out[numeric] = out[numeric].astype(float)
    for index, row in final.iterrows():
        extra = evaluation_rows(folder, row["run_id"]) if "run_id" in final.columns else []
        if not extra:
            continue
        frame = pd.DataFrame([row[numeric].to_dict()] + [{c: r.get(c) for c in numeric} for r in extra])
        out.loc[index, numeric] = frame.apply(pd.to_numeric, errors="coerce").mean(skipna=True)
        out.loc[index, "eval_episodes"] = len(frame)
    return out


def final_rows(study: pd.DataFrame, folder: str | Path | None = None) -> pd.DataFrame:
    """One row per run: its final episode, each numeric metric the mean over its evaluation
    episodes where the study's ``folder`` holds them (``with_evaluations``)."""
    last = study.groupby("run_id", sort=False)["episode"].transform("max")
    return with_evaluations(study[study["episode"] == last], folder)


def seed_tables(study: pd.DataFrame, folder: str | Path | None = None) -> str:
    """Markdown: one table per study group, one row per configuration (method). With the study's
    ``folder``, each run's value is its mean over its evaluation episodes (``with_evaluations``)."""
    if study.empty or "recall_gap" not in study.columns:
        return ""
    return tables_markdown(final_rows(study, folder), per_group=_across_families(folder))


def _across_families(folder: str | Path | None) -> bool:
    """Whether the study's groups simulate different families (a benchmark): each group then gets
    the table and figure form of its own columns, and a group without a recall gap none."""
    from abm.reports.study import environments
    from abm.study.aggregate import read_manifest

    return (folder is not None and (Path(folder) / "manifest.json").is_file()  # a study's, not a run's folder
            and None not in environments(read_manifest(Path(folder))))


def _own(part: pd.DataFrame, per_group: bool) -> pd.DataFrame | None:
    """A study group's rows; with ``per_group``, without the columns only other groups fill, and
    None where the group has no recall gap (not one of the seed's forms)."""
    if not per_group:
        return part
    part = part.dropna(axis=1, how="all")
    return part if "recall_gap" in part.columns else None


def study_group_column(frame: pd.DataFrame) -> str:
    """The column naming a run's (first) study group: ``study_group`` in study.parquet, ``group`` in
    the ledgers written before it was renamed (docs/results/*.csv)."""
    return "group" if "study_group" not in frame.columns and "group" in frame.columns else "study_group"


def tables_markdown(final: pd.DataFrame, per_group: bool = False) -> str:
    """``seed_tables``' Markdown from its per-run rows (``final_rows``: columns study_group (a
    ledger's: group), config, eval_episodes and the metrics), e.g. those a ledger of runs keeps.
    ``per_group``: each group's table in the form of its own columns (``_own``)."""
    lines = ["# Seed 002 tables", "",
             "Final episode of every run (the mean over its evaluation episodes where it ran several: column "
             "Eval.); mean ± 95% CI (Student t) over the seeded replicates.", ""]
    for group, part in final.groupby(study_group_column(final), sort=False):
        part = _own(part, per_group)
        if part is None:
            continue
        cols = table_columns(part)
        header = ["Method", "Runs", "Eval.", *[h for h, _ in cols]]
        lines += [f"## {group}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for config, rows in part.groupby("config", sort=False):
            ev = rows["eval_episodes"].astype(int)
            cells = [str(config), str(len(rows)), str(ev.iloc[0]) if ev.nunique() == 1 else f"{ev.min()}-{ev.max()}"]
            for _, series in cols:
                cells.append(_fmt(*mean_ci(series.loc[rows.index].astype(float))))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def figure_columns(part: pd.DataFrame) -> tuple[str, list[tuple[str, str, str]]]:
    """(the seed's figure number, [(title, column, y label)]) for this family's metrics."""
    recalls = sorted((c for c in part.columns if c.startswith("recall_") and c != "recall_gap"),
                     key=lambda c: (len(c), c))
    ret = ("(a) Average return", "cumulative_return" if "cumulative_return" in part.columns else "cumulative_profit",
           "cumulative return (reward units)")
    if len(recalls) > 2:
        return "11", [ret, ("(b) Recall gap", "recall_gap", "max - min recall over groups"),
                      ("(c) Recall mean", "recall_mean", "mean recall over groups"),
                      ("(d) Recall SD", "recall_sd", "standard deviation of recall over groups")]
    burdens = sorted(c for c in part.columns if c.startswith("social_burden_"))
    if burdens:
        return "10", [ret, ("(b) Recall gap", "recall_gap", "max - min recall over groups"),
                      *[(f"({'cd'[k]}) Social burden, {c.removeprefix('social_burden_')}", c,
                         "mean manipulation cost of the admitted") for k, c in enumerate(burdens[:2])]]
    cols = [ret, *[(f"({'bc'[k]}) Recall, {c.removeprefix('recall_')}", c, "recall tp / (tp + fn), cumulative")
                   for k, c in enumerate(recalls[:2])]]
    if "credit_gap" in part.columns:
        cols.append(("(d) Credit gap", "credit_gap", "1-Wasserstein distance between groups' scores"))
    return "1", cols


def figure_specs(study: pd.DataFrame, per_group: bool = False) -> list:
    """The seed's figure over the evaluation for this study: one row of panels per study group.
    ``per_group`` (a study across families): each group in the form of its own columns, one
    figure per form (lending's Figure 1, admissions' Figure 10 ...)."""
    from abm.reports import figures as fig

    style = fig.Style.of(study)
    column = study_group_column(study)
    groups = list(dict.fromkeys(study[column])) if column in study.columns else [None]
    number, _ = figure_columns(study)
    forms: dict[str, list] = {}  # the figure's number -> its panels
    widest: dict[str, int] = {}  # -> the most panels one group has in it (per_group: its columns)
    for group in groups:
        part = _own(study if group is None else study[study[column] == group], per_group)
        if part is None:
            continue
        part = part.copy()
        recalls = [c for c in part.columns if c.startswith("recall_") and c != "recall_gap"]
        if len(recalls) > 2:
            part["recall_mean"] = part[recalls].astype(float).mean(axis=1)
            part["recall_sd"] = part[recalls].astype(float).std(axis=1, ddof=0)
        form, cols = figure_columns(part)
        form = form if per_group else number
        panels = forms.setdefault(form, [])
        before = len(panels)
        for title, col, ylabel in cols:
            if col not in part.columns or part[col].isna().all():
                continue
            series = fig.over_runs(part, col, style, x="time")
            name = title if len(groups) == 1 else f"{title} [{group}]"
            panels.append(fig.FigureSpec(col, name, "time steps", ylabel, series, caption=fig.CI_CAPTION,
                                             legend_title="method"))
        widest[form] = max(widest.get(form, 0), len(panels) - before)
    return [fig.Panels(f"seed002_figure{form}", f"Seed 002 Figure {form} form: mean and 95% CI over seeds "
                       "(not smoothed)", panels, caption=fig.CI_CAPTION,
                       ncols=min(4, max(1, widest[form] if per_group else len(panels) // len(groups))))
            for form, panels in forms.items()]


def study_frame(folder: str | Path) -> pd.DataFrame | None:
    """A study folder's ``study.parquet`` (None before any run finished)."""
    path = Path(folder) / "study.parquet"
    return pd.read_parquet(path) if path.is_file() else None


def applies(folder: str | Path) -> bool:
    """Whether the study's runs carry recall metrics (the score families: lending, admissions)."""
    study = study_frame(folder)
    return study is not None and not study.empty and "recall_gap" in study.columns


def write(folder: str | Path, out: str | Path) -> list[Path]:
    """Write ``seed_tables.md`` beside a study report when the runs carry recall metrics."""
    study = study_frame(folder)
    text = seed_tables(study, folder) if study is not None else ""
    if not text:
        return []
    target = Path(out) / "seed_tables.md"
    target.write_text(text)
    return [target]


def figures(folder: str | Path) -> list:
    """The seed's figure as a spec (``abm report`` draws it beside the tables as PNG)."""
    return figure_specs(study_frame(folder), _across_families(folder)) if applies(folder) else []
