"""A study folder's report: comparison tables (Markdown and CSV, final episode), the study's figures,
and each paper's own forms where the study has the runs they need.

Figures (``abm.reports.figures``: 95% Student-t confidence bands over seeds, n in the legend,
colour per policy, line style per setting, groups on the same axes, legends outside the data):

    <metric>.png          one per metric over episodes (``mean_wealth.png``: every group on one axis;
                          ``mean_wealth_<g>.png``: one group's panel, kept for the scripts that read it)
    frontier.png          final fairness (default: wealth gap, else recall gap, else credit gap) against
                          cumulative profit: a point per configuration, CI whiskers on both axes, Pareto
                          points marked; ``frontier_<x>_<y>.png`` for every other fairness metric the
                          family records, and for ``render_study(..., fairness=, profit=)``'s choice
                          (``abm report STUDY --frontier-x METRIC --frontier-y METRIC``)
    group_rates.png       selection / default / true-positive rate per group and their gaps over episodes
    distribution.png      quantile bands of each group's wealth (or score) over episodes, from the runs'
                          event logs

Paper reports are modules with one small interface (``PaperReport``): ``applies(folder)`` says
whether the study's runs carry what the paper's tables need, ``write(folder, out)`` writes them into
``out`` and returns the files written, ``figures(folder)`` gives the paper's figures as specs
(drawn beside the tables, and shown by the dashboard). ``render_study`` takes the papers to try; the tuple that
``abm report`` uses is declared once, ``abm.reports.PAPERS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Protocol

import numpy as np
import pandas as pd

from abm.errors import UserError
from abm.reports import figures
from abm.reports.run import to_markdown
from abm.runner import is_complete, run_folder_problem
from abm.study.aggregate import config_label, latest_run_times, load_summary, read_manifest

# metrics shown in the comparison tables and plots, when a family provides them
KEY_METRICS = ("wealth_gap", "inequality_ratio", "cumulative_profit", "mean_wealth_{g}", "reach_{g}",
               "social_welfare_{g}", "recall_{g}", "credit_gap")


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


def _metric_list(summary: pd.DataFrame) -> list[str]:
    groups = [c.removeprefix("mean_wealth_").removesuffix("_mean") for c in summary.columns
              if c.startswith("mean_wealth_") and c.endswith("_mean")]
    out = []
    for pattern in KEY_METRICS:
        names = [pattern.format(g=g) for g in groups] if "{g}" in pattern else [pattern]
        out += [m for m in names if f"{m}_mean" in summary.columns]
    return out


def render_study(folder: str | Path, papers: Iterable[PaperReport] = (), fairness: str | None = None,
                 profit: str | None = None) -> Path:
    """Write ``report/`` in a study folder: comparison.md/.csv, the study's figures, and the forms of
    every paper in ``papers`` that applies to the study. ``fairness`` / ``profit``: the frontier's
    axes (a column of ``study.parquet``) besides the default ``frontier.png``."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    summary = load_summary(folder)
    if summary.empty:
        raise UserError(f"{folder}: no finished runs to report (see runs.csv / failed/)")
    out = folder / "report"
    out.mkdir(exist_ok=True)
    metrics = _metric_list(summary)
    final = summary.loc[summary.groupby("config_id", sort=False)["episode"].idxmax()].reset_index(drop=True)
    grid_keys = [k for k in manifest.get("grid_keys", []) if k in summary.columns]
    table_cols = ["config", "groups", "policy", "objective", *grid_keys, "episode", "count"]
    final[table_cols + [f"{m}_{s}" for m in metrics for s in ("mean", "std")]].to_csv(out / "comparison.csv",
                                                                                      index=False)
    lines = [f"# Study {manifest['name']}", "",
             f"Final episode of each configuration: mean ± std over `count` seeded runs "
             f"(study seed {manifest['seed']}, {len(manifest['runs'])} runs).", ""]
    groups = list(dict.fromkeys(g for gs in final["groups"] for g in str(gs).split(",")))
    for group in groups:
        rows = final[final["groups"].astype(str).str.split(",").map(lambda gs, g=group: g in gs)]
        view = pd.DataFrame({"configuration": rows["config"], "runs": rows["count"].astype(int)})
        for m in metrics:
            view[m] = [_pm(a, b) for a, b in zip(rows[f"{m}_mean"], rows[f"{m}_std"])]
        if len(groups) > 1:
            lines += [f"## Group {group}", ""]
        lines += [to_markdown(view), ""]
    status = pd.read_csv(folder / "runs.csv") if (folder / "runs.csv").is_file() else None
    if status is not None and (status["status"] != "ok").any():
        bad = status[status["status"] != "ok"]
        lines += ["## Runs not finished", "", to_markdown(bad[["run_id", "status", "config", "error"]].fillna("")), ""]
    lines += time_section(folder, manifest, grid_keys)
    (out / "comparison.md").write_text("\n".join(lines))
    for paper in papers:
        if paper.applies(folder):
            drawn = {p.name for p in paper.write(folder, out)}
            for spec in paper.figures(folder):  # those ``write`` did not draw itself
                if f"{spec.name}.png" not in drawn:
                    figures.save(spec, out)
    write_figures(folder, summary, out, manifest, fairness=fairness, profit=profit)
    return out


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


def _pm(mean: float, std: float) -> str:
    if not np.isfinite(mean):
        return "NaN"
    return f"{mean:.4g} ± {std:.2g}" if np.isfinite(std) else f"{mean:.4g}"


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


def study_figures(folder: str | Path, summary: pd.DataFrame | None = None, manifest: dict | None = None,
                  fairness: str | None = None, profit: str | None = None) -> list:
    """The study's figure specs (``figures.FigureSpec`` / ``figures.Panels``), in the order they are shown."""
    folder = Path(folder)
    manifest = manifest if manifest is not None else read_manifest(folder)
    summary = summary if summary is not None else load_summary(folder)
    family = study_family(manifest)
    groups = figures.groups_in(summary.columns, "_mean")
    style = figures.Style.of(summary, groups)
    specs: list = []
    study = pd.read_parquet(folder / "study.parquet") if (folder / "study.parquet").is_file() else None
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
        specs.append(figures.study_metric(summary, metric, family, style))
    if study is not None and not study.empty:
        rates = figures.group_rates(study, family, style)
        if rates is not None:
            specs.append(rates)
    return specs


def write_figures(folder: Path, summary: pd.DataFrame, out: Path, manifest: dict, fairness: str | None = None,
                  profit: str | None = None) -> list[Path]:
    """Every study figure as a PNG in ``out`` (see the module docstring for the names)."""
    written = [figures.save(spec, out) for spec in study_figures(folder, summary, manifest, fairness, profit)]
    groups = figures.groups_in(summary.columns, "_mean")
    if "mean_wealth" in figures.METRIC_BY_STEM and any(f"mean_wealth_{g}_mean" in summary.columns for g in groups):
        style = figures.Style.of(summary, groups)
        for g in groups:  # the per-group panels earlier reports wrote (scripts read them)
            spec = figures.study_metric(summary, "mean_wealth", study_family(manifest), style, only_group=g)
            written.append(figures.save(spec, out))
    if (folder / "study.parquet").is_file():
        study = pd.read_parquet(folder / "study.parquet", columns=["run_id", "config"])
        spec = figures.distribution(run_folders(folder, study), study_family(manifest), groups)
        if spec is not None:
            written.append(figures.save(spec, out))
    return written


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
