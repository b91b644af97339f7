"""A study folder's report: comparison tables (Markdown and CSV, final episode: mean ± 95% CI
with n, one table per figure), the study's figures, and each paper's own forms where the study
has the runs they need.

Figures (``abm.reports.figures``: 95% Student-t confidence bands over seeds, n in the legend,
colour per policy, line style per setting, groups on the same axes or one panel per group
(``facet="group"``), legends outside the data in the study's order; each figure in every format
asked, ``<name>.png`` / ``.svg`` / ``.pdf``):

    <metric>.png          one per metric over episodes (``mean_wealth.png``: every group on one axis;
                          ``mean_wealth_<g>.png``: one group's panel, kept for the scripts that read it)
    frontier.png          final fairness (default: wealth gap, else recall gap, else credit gap) against
                          cumulative profit: a point per configuration, CI whiskers on both axes, Pareto
                          points marked; ``frontier_<x>_<y>.png`` for every other fairness metric the
                          family records, and for ``render_study(..., fairness=, profit=)``'s choice
                          (``abm report STUDY --frontier-x METRIC --frontier-y METRIC``)
    group_rates.png       selection / default / true-positive rate per group and their gaps over episodes
    distribution.png      quantile bands of each group's state (wealth, score ...) over episodes, from the runs'
                          event logs

A study across families (a benchmark) gets each of these once per study group: ``<name>_<group>``.

Paper reports are modules with one small interface (``PaperReport``): ``applies(folder)`` says
whether the study's runs carry what the paper's tables need, ``write(folder, out)`` writes them into
``out`` and returns the files written, ``figures(folder)`` gives the paper's figures as specs
(drawn beside the tables, and shown by the dashboard). ``render_study`` takes the papers to try; the tuple that
``abm report`` uses is declared once, ``abm.reports.PAPERS``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Protocol

import numpy as np
import pandas as pd

from abm.errors import UserError
from abm.reports import figures
from abm.reports.run import to_markdown
from abm.runner import is_complete, run_folder_problem
from abm.study.aggregate import config_label, latest_run_times, load_summary, read_manifest

class PaperReport(Protocol):
    """A paper's result forms from a finished study (a module: ``abm.reports.seed000`` ...)."""

    def applies(self, folder: str | Path) -> bool:
        """Whether the study in ``folder`` has the runs this paper's forms need."""

    def write(self, folder: str | Path, out: str | Path) -> list[Path]:
        """Write the forms into ``out``; the files written (none when the study does not apply)."""

    def figures(self, folder: str | Path) -> list:
        """The paper's figures as ``abm.reports.figures`` specs (none when the study does not apply)."""


def is_study_folder(folder: str | Path) -> bool:
    folder = Path(folder)
    return (folder / "study.yaml").is_file() or (folder / "runs").is_dir()


def render_study(folder: str | Path, papers: Iterable[PaperReport] = (), fairness: str | None = None,
                 profit: str | None = None, formats=("png",), dpi: int = figures.DPI, facet: str | None = None) -> Path:
    """Write ``report/`` in a study folder: comparison.md/.csv, the study's figures, and the forms of
    every paper in ``papers`` that applies to the study. ``fairness`` / ``profit``: the frontier's
    axes (a column of ``study.parquet``) besides the default ``frontier.png``; ``formats``, ``dpi``,
    ``facet``: as ``figures.output_options`` (each figure in every format; ``facet="group"``: the
    per-group figures one panel per group)."""
    formats, dpi, facet = figures.output_options(formats, dpi, facet)
    folder = Path(folder)
    manifest = read_manifest(folder)
    summary = load_summary(folder)
    if summary.empty:
        raise UserError(f"{folder}: no finished runs to report (see runs.csv / failed/)")
    out = folder / "report"
    out.mkdir(exist_ok=True)
    study = pd.read_parquet(folder / "study.parquet")
    grid_keys = [k for k in manifest.get("grid_keys", []) if k in study.columns]
    final, tables = final_metrics(study)
    comparison_frame(final, tables, grid_keys).to_csv(out / "comparison.csv", index=False)
    lines = [f"# Study {manifest['name']}", "", COMPARISON_NOTE.format(seed=manifest["seed"],
                                                                      runs=len(manifest["runs"])), ""]
    groups = list(dict.fromkeys(g for gs in final["study_groups"] for g in str(gs).split(",")))
    for group in groups:
        rows = final[final["study_groups"].astype(str).str.split(",").map(lambda gs, g=group: g in gs)]
        if len(groups) > 1:
            lines += [f"## Group {group}", ""]
        for title, columns in tables:
            lines += [f"### {title}", "", to_markdown(comparison_table(rows, columns)), ""]
    status = pd.read_csv(folder / "runs.csv") if (folder / "runs.csv").is_file() else None
    if status is not None and (status["status"] != "ok").any():
        bad = status[status["status"] != "ok"]
        lines += ["## Runs not finished", "", to_markdown(bad[["run_id", "status", "config", "error"]].fillna("")), ""]
    lines += time_section(folder, manifest, grid_keys)
    (out / "comparison.md").write_text("\n".join(lines))
    for paper in papers:
        if paper.applies(folder):
            drawn = {p.name for p in paper.write(folder, out)}
            for spec in paper.figures(folder):  # those ``write`` did not draw itself, in every format asked
                todo = [f for f in formats if f"{spec.name}.{f}" not in drawn or dpi != figures.DPI]
                if todo:
                    figures.save(spec, out, formats=todo, dpi=dpi)
    write_figures(folder, summary, out, manifest, fairness=fairness, profit=profit, formats=formats, dpi=dpi,
                  facet=facet)
    return out


COMPARISON_NOTE = ("Final episode of each run; each cell: the mean over a configuration's seeded runs ± the "
                   "half-width of its 95% confidence interval (Student t, n - 1 d.f.; no interval when n = 1). runs = n, the "
                   "configuration's finished runs; a cell over fewer finite values gives its own n. One table per "
                   "figure of the report, configurations in the study's order (study seed {seed}, {runs} runs).")


def final_metrics(study: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, list[tuple[str, str]]]]]:
    """(each run's final episode with the per-group rates beside its metrics, the tables: [(title,
    [(column header, metric column)])]): one table per figure the report draws over these metrics
    (every catalogued metric the study records, the frontier's axes, the per-group rates and gaps),
    so every number a figure shows is in comparison.md."""
    groups = figures.groups_in(study.columns)
    final = figures.final_rows(study)
    rates = figures.final_rows(figures.rate_frame(study, groups)) if groups else pd.DataFrame()
    rate_cols = [c for c in rates.columns if c.split("_", 1)[0] in {r for r, _, _ in figures.RATES}]
    if rate_cols:
        final = final.merge(rates[["run_id", *rate_cols]], on="run_id", how="left")
    tables = []
    for m in figures.metrics_in(final.columns):
        if m.per_group:
            cols = [(g, m.pattern.format(g=g)) for g in groups if m.pattern.format(g=g) in final.columns]
        else:
            cols = [(m.pattern, m.pattern)]
        tables.append((f"{m.title} (`{m.stem}`)", cols))
    shown = {c for _, cols in tables for _, c in cols}
    for extra in [*figures.fairness_choices(final.columns), *figures.profit_choices(final.columns)]:
        if extra not in shown:
            tables.append((f"`{extra}`", [(extra, extra)]))
    recall = all(f"recall_{g}" in final.columns for g in groups)
    for name, title, _ in figures.RATES:
        if name == "tpr" and recall:  # the true-positive rate is the recall, in its table above
            continue
        cols = [(g, f"{name}_{g}") for g in groups if f"{name}_{g}" in final.columns]
        cols += [("gap", f"{name}_gap")] if f"{name}_gap" in final.columns else []
        if cols:
            tables.append((f"{title} per group and gap (`group_rates`)", cols))
    return final, tables


def comparison_table(final: pd.DataFrame, columns: list[tuple[str, str]]) -> pd.DataFrame:
    """One row per configuration (study order): runs, and per column ``mean ± 95% CI`` over its runs."""
    rows = []
    for config, runs in final.groupby("config", sort=False):
        row = {"configuration": str(config), "runs": len(runs)}
        for header, col in columns:
            mean, low, high, n = figures.mean_ci(runs[col])
            row[header] = ci_cell(mean, high - mean, n, len(runs))
        rows.append(row)
    return pd.DataFrame(rows, columns=["configuration", "runs", *[h for h, _ in columns]])


def comparison_frame(final: pd.DataFrame, tables, grid_keys: list[str]) -> pd.DataFrame:
    """comparison.csv: one row per configuration; per metric ``_mean``, ``_std``, ``_ci95`` (the
    half-width of the 95% Student-t interval) and ``_n`` (finite values) over its runs' final episodes."""
    metrics = list(dict.fromkeys(c for _, cols in tables for _, c in cols))
    keys = ["config", "study_groups", "policy", "objective", *grid_keys]
    rows = []
    for _, runs in final.groupby("config_id", sort=False):
        row = {k: runs[k].iloc[0] for k in keys} | {"episode": int(runs["episode"].max()), "runs": len(runs)}
        for m in metrics:
            mean, _, high, n = figures.mean_ci(runs[m])
            values = runs[m].astype(float)
            row.update({f"{m}_mean": mean, f"{m}_std": values.std(), f"{m}_ci95": high - mean, f"{m}_n": n})
        rows.append(row)
    return pd.DataFrame(rows)


def ci_cell(mean: float, half: float, n: int, runs: int) -> str:
    """``3646 ± 140``: a mean and its CI half-width (none for n = 1), ``(n=k)`` where the finite
    values are fewer than the runs."""
    if not np.isfinite(mean):
        return "NaN"
    text = f"{_num(mean, 4)} ± {_num(half, 2)}" if np.isfinite(half) else _num(mean, 4)
    return text + (f" (n={n})" if n != runs else "")


def _num(x: float, digits: int) -> str:
    """``digits`` significant digits, in plain notation between 0.001 and a million."""
    if x == 0 or not 1e-3 <= abs(x) < 1e6:
        return f"{x:.{digits}g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def time_section(folder: Path, manifest: dict, grid_keys: list[str]) -> list[str]:
    """The "Time" section of comparison.md: per configuration, the wall and CPU seconds of its runs'
    latest computations (``run_times.csv``), and the study's total; nothing when it kept no times."""
    times = latest_run_times(folder).reset_index()
    labels = {spec["run_id"]: config_label(spec["columns"], grid_keys) for spec in manifest["runs"]}
    times = times[times["run_id"].isin(labels)]
    if times.empty:
        return []
    times = times.assign(configuration=times["run_id"].map(labels))
    rows = []
    for config, runs in times.groupby("configuration", sort=False):
        wall, cpu = runs["wall_s"], runs["cpu_s"]
        rows.append({"configuration": config, "runs timed": len(runs),
                     "wall s per run": _secs(wall.min()) if len(runs) == 1 else f"{_secs(wall.min())}-{_secs(wall.max())}",
                     "CPU s per run (mean)": _secs(cpu.mean()), "CPU s (all runs)": _secs(cpu.sum()),
                     "load (1 min, at the end)": f"{runs['load_1m'].min():.1f}-{runs['load_1m'].max():.1f}"})
    untimed = len(manifest["runs"]) - len(times)
    return ["## Time", "",
            f"Each finished run's latest computation as its worker measured it (`run_times.csv`): "
            f"{len(times)} run{'s' * (len(times) != 1)}, {_secs(times['cpu_s'].sum())} CPU-s ({times['cpu_s'].sum() / 3600:.2f} h) and "
            f"{_secs(times['wall_s'].sum())} s of run wall time in all"
            + (f"; {untimed} run{'s' * (untimed != 1)} of the study {'have' if untimed != 1 else 'has'} no time (not finished, or computed before times were kept)"
               if untimed else "") + ".", "", to_markdown(pd.DataFrame(rows)), ""]


def _secs(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def study_family(manifest: dict) -> str | None:
    """The family of the study's runs (the first run's resolved scenario)."""
    for spec in manifest.get("runs", []):
        family = (spec.get("scenario") or {}).get("family")
        if family:
            return str(family)
    return None


def run_folders(folder: Path, study: pd.DataFrame) -> dict[str, list[Path]]:
    """Configuration label -> its finished run folders, in study order; a damaged one (a file
    truncated or overwritten since the study was aggregated) is a one-line UserError."""
    out: dict[str, list[Path]] = {}
    for r in study.drop_duplicates("run_id")[["run_id", "config"]].itertuples(index=False):
        path = folder / "runs" / str(r.run_id)
        if is_complete(path):
            problem = run_folder_problem(path)
            if problem is not None:
                raise UserError(f"{path}: {problem}; rerun `abm study` to set the run aside and compute it again")
            out.setdefault(str(r.config), []).append(path)
    return out


def group_families(manifest: dict) -> dict[str, str]:
    """Study group -> the family its runs simulate (from the manifest's resolved scenarios)."""
    out: dict[str, str] = {}
    for spec in manifest.get("runs", []):
        family = (spec.get("scenario") or {}).get("family")
        for group in spec.get("groups", []):
            if family:
                out.setdefault(str(group), str(family))
    return out


def environment_rows(frame: pd.DataFrame, column: str, env: str | None) -> pd.DataFrame:
    """``frame``'s rows of study group ``env`` (``column``: comma-separated groups) without the
    columns only other groups fill; all of it for ``env=None`` (or a frame without ``column``: no runs yet)."""
    if env is None or column not in frame.columns:
        return frame
    return frame[frame[column].astype(str).str.split(",").map(lambda gs: env in gs)].dropna(axis=1, how="all")


def _named(spec, env: str | None):
    if env is not None:
        spec.name, spec.title = f"{spec.name}_{env}", f"{env}: {spec.title}"
    return spec


def environments(manifest: dict) -> dict:
    """Study group -> family for a study across families (a benchmark: one axis cannot hold two
    families' metrics, so its figures are drawn per group), else {None: the study's family}."""
    envs = group_families(manifest)
    return envs if len(set(envs.values())) > 1 else {None: study_family(manifest)}


def study_figures(folder: str | Path, summary: pd.DataFrame | None = None, manifest: dict | None = None,
                  fairness: str | None = None, profit: str | None = None, facet: str | None = None) -> list:
    """The study's figure specs (``figures.FigureSpec`` / ``figures.Panels``), in the order they are
    shown; ``facet="group"``: the per-group metrics one panel per group. A study across families
    gets each figure once per study group: ``<name>_<group>``, titled ``<group>: ...``."""
    folder = Path(folder)
    manifest = manifest if manifest is not None else read_manifest(folder)
    summary = summary if summary is not None else load_summary(folder)
    study = pd.read_parquet(folder / "study.parquet") if (folder / "study.parquet").is_file() else None
    return [_named(spec, env) for env, family in environments(manifest).items()
            for spec in _figures(environment_rows(summary, "study_groups", env),
                                 None if study is None else environment_rows(study, "study_groups", env),
                                 family, fairness, profit, facet)]


def distribution_figures(folder: Path, summary: pd.DataFrame, manifest: dict, runs: pd.DataFrame) -> list:
    """The quantile bands of each group's state over episodes (``figures.distribution``) from the
    event logs of ``runs`` (study.parquet's rows: run_id, config, study_groups), once per study
    group of a study across families."""
    out = []
    for env, family in environments(manifest).items():
        groups = figures.groups_in(environment_rows(summary, "study_groups", env).columns, "_mean")
        spec = figures.distribution(run_folders(folder, environment_rows(runs, "study_groups", env)), family, groups)
        if spec is not None:
            out.append(_named(spec, env))
    return out


def _figures(summary: pd.DataFrame, study: pd.DataFrame | None, family: str | None, fairness: str | None,
             profit: str | None, facet: str | None) -> list:
    groups = figures.groups_in(summary.columns, "_mean")
    style = figures.Style.of(summary, groups)
    specs: list = []
    if study is not None and not study.empty:
        fair, money = figures.fairness_choices(study.columns), figures.profit_choices(study.columns)
        if fair and money:
            specs.append(figures.frontier(study, family=family, style=style))
            pairs = [(f, money[0]) for f in fair[1:]]
            if (fairness or profit) and (fairness or fair[0], profit or money[0]) != (fair[0], money[0]):
                pairs.append((fairness or fair[0], profit or money[0]))
            for x, y in dict.fromkeys(pairs):
                specs.append(figures.frontier(study, x, y, family=family, style=style))
    for metric in figures.metrics_in(summary.columns, "_mean"):
        spec = figures.study_metric(summary, metric, family, style)
        specs.append(figures.facet_by_group(spec) if facet == "group" else spec)
    if study is not None and not study.empty:
        rates = figures.group_rates(study, family, style)
        if rates is not None:
            specs.append(rates)
    return specs


def write_figures(folder: Path, summary: pd.DataFrame, out: Path, manifest: dict, fairness: str | None = None,
                  profit: str | None = None, formats=("png",), dpi: int = figures.DPI,
                  facet: str | None = None) -> list[Path]:
    """Every study figure in ``out``, in each of ``formats`` (see the module docstring for the names)."""
    specs = study_figures(folder, summary, manifest, fairness, profit, facet)
    for env, family in environments(manifest).items():
        part = environment_rows(summary, "study_groups", env)
        groups = figures.groups_in(part.columns, "_mean")
        if "mean_wealth" in figures.METRIC_BY_STEM and any(f"mean_wealth_{g}_mean" in part.columns for g in groups):
            style = figures.Style.of(part, groups)
            for g in groups:  # the per-group panels earlier reports wrote (scripts read them)
                specs.append(_named(figures.study_metric(part, "mean_wealth", family, style, only_group=g), env))
    if (folder / "study.parquet").is_file():
        runs = pd.read_parquet(folder / "study.parquet", columns=["run_id", "config", "study_groups"])
        specs += distribution_figures(folder, summary, manifest, runs)
    return [figures.save(spec, out, formats=formats, dpi=dpi) for spec in specs]


def frontier_axes(folder: str | Path, x: str | None, y: str | None) -> tuple[str, str]:
    """The frontier axes ``abm report --frontier-x X --frontier-y Y`` asks for, checked against the
    study's metric columns (``figures.frontier_metrics``); an axis not given is the default one (the
    first fairness metric, the first profit metric the study records). Any problem is one line
    naming the flag and listing the valid names."""
    folder = Path(folder)
    path = folder / "study.parquet"
    flag = "--frontier-x" if x is not None else "--frontier-y"
    if not path.is_file():
        raise UserError(f"{flag}: {path} is missing (a study folder with finished runs has one)")
    try:
        study = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001  pyarrow raises many kinds for a damaged file
        raise UserError(f"{flag}: {path} is unreadable ({type(exc).__name__})") from None
    valid = figures.frontier_metrics(study)
    names = ", ".join(valid) or "none"
    chosen = []
    for flag, name, defaults in (("--frontier-x", x, figures.fairness_choices(study.columns)),
                                 ("--frontier-y", y, figures.profit_choices(study.columns))):
        if name is None:
            if not defaults:
                raise UserError(f"{flag}: this study has no default metric for this axis; give one of: {names}")
            name = defaults[0]
        elif name not in valid:
            raise UserError(f"{flag}: unknown metric {name!r}; valid names: {names}")
        chosen.append(name)
    return chosen[0], chosen[1]


def frontier_file(report: str | Path, x: str, y: str) -> Path:
    """Where the report drew the frontier of ``x`` against ``y``: ``frontier_<x>_<y>.png``, or
    ``frontier.png`` when those are the study's default axes."""
    named = Path(report) / f"frontier_{x}_{y}.png"
    return named if named.is_file() else Path(report) / "frontier.png"
