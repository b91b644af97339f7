"""The dashboard web app (Solara): a run folder or a study folder, read on the server.

``abm dashboard DIR`` serves this module; the folder comes in ``ABM_DASHBOARD_TARGET``. Every
table and trace is computed by ``abm.dashboard.data`` on the server and only the visible part
(one page of applicants, one applicant's events, the chart being looked at) reaches the browser.
A folder that cannot be read gives an error page, never a traceback.

The figures are the report's (``abm.reports.figures``: the same specs ``abm report`` draws):
one interactive chart at a time with a metric picker (hover a point for its values, drag to
pan, wheel to zoom, click a legend entry), the frontier with a choice of axes for a study, and
every metric as a static overview below; a study across families shows one study group at a
time (``use_environment_picker``). A study's configuration table links each
configuration to its runs.
"""

from __future__ import annotations

import functools
import html
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import solara
import solara.lab

from abm.dashboard import data, figures
from abm.errors import UserError
from abm.reports import figures as specs
from abm.reports.run import run_figures
from abm.reports.study import environment_rows, environments

# Solara asks for a SameSite=None cookie, which needs https or the name "localhost"; served over
# http on 127.0.0.1 it falls back to SameSite=Lax (right for a local app) and warns on every page.
warnings.filterwarnings("ignore", message="Cookies with samesite=none require https", category=UserWarning)

TARGET_ENV = "ABM_DASHBOARD_TARGET"
PAGE_SIZE = 20
MAX_TIMELINE_ROWS = 5000  # one applicant's events; beyond this the table says how many were left out


def _stamp(path: Path) -> tuple:
    """Modification times of the files that define a folder's content (cache key)."""
    names = ("summary.json", "manifest.json", "summary.parquet", "episodes.parquet", "agents.parquet")
    return tuple((path / n).stat().st_mtime_ns if (path / n).is_file() else 0 for n in names)


@functools.lru_cache(maxsize=16)
def _open_cached(path: str, stamp: tuple):
    del stamp  # part of the cache key only: a rewritten folder is read again
    return data.open_folder(path)


def _key(path: str | Path) -> tuple[str, tuple]:
    path = Path(path)
    return str(path.resolve()), _stamp(path) if path.is_dir() else ()


def open_target(path: str | Path):
    return _open_cached(*_key(path))


# Figure specs are built once per folder version; PNGs (the static overview) and chart JSON once per
# folder version and figure: a reload or a second viewer of the same folder costs nothing.
@functools.lru_cache(maxsize=32)
def _run_specs(folder: str, stamp: tuple) -> dict:
    """A run's per-metric figures (cheap: from episodes.parquet)."""
    run = _open_cached(folder, stamp)
    style = specs.Style([], [], specs.groups_in(run.episodes.columns))
    return {m.stem: specs.run_metric(run.episodes, m, run.summary.get("family"), style)
            for m in specs.metrics_in(run.episodes.columns)}


@functools.lru_cache(maxsize=32)
def _run_extra(folder: str, stamp: tuple) -> dict:
    """A run's rates and distribution (the latter reads the event log): its report's other figures."""
    run = _open_cached(folder, stamp)
    return {spec.name: spec for spec in run_figures(run) if spec.name not in specs.METRIC_BY_STEM}


@functools.lru_cache(maxsize=16)
def _study_frame(folder: str, stamp: tuple) -> pd.DataFrame:
    return data.study_runs_frame(_open_cached(folder, stamp))


@functools.lru_cache(maxsize=16)
def _study_specs(folder: str, stamp: tuple) -> dict:
    from abm.reports.study import study_figures

    study = _open_cached(folder, stamp)
    out = {}
    for spec in study_figures(study.folder, study.summary, study.manifest):
        out[spec.name] = spec
    return out


@functools.lru_cache(maxsize=16)
def _study_extra(folder: str, stamp: tuple) -> dict:
    """The study's slower figures: its runs' distributions and every paper's figures."""
    from abm.reports import PAPERS
    from abm.reports.study import distribution_figures

    study = _open_cached(folder, stamp)
    frame = _study_frame(folder, stamp)
    out = {}
    if not frame.empty:
        for dist in distribution_figures(study.folder, study.summary, study.manifest, frame):
            out[dist.name] = dist
    for paper in PAPERS:
        if paper.applies(study.folder):
            for spec in paper.figures(study.folder):
                out[spec.name] = spec
    return out


TABLES = {"run": _run_specs, "run_extra": _run_extra, "study": _study_specs, "extra": _study_extra}


@functools.lru_cache(maxsize=256)
def _spec_png(folder: str, stamp: tuple, kind: str, name: str) -> bytes:
    table = TABLES[kind](folder, stamp)
    return specs.png(table[name])


@functools.lru_cache(maxsize=256)
def _spec_json(folder: str, stamp: tuple, kind: str, name: str) -> dict:
    table = TABLES[kind](folder, stamp)
    return figures.vega_spec(table[name])


@functools.lru_cache(maxsize=64)
def _frontier_json(folder: str, stamp: tuple, fairness: str, profit: str, env: str | None = None) -> dict:
    """The frontier of the study, or of its group ``env`` in a study across families."""
    study = _open_cached(folder, stamp)
    frame = environment_rows(_study_frame(folder, stamp), "study_groups", env)
    summary = environment_rows(study.summary, "study_groups", env)
    style = specs.Style.of(summary, specs.groups_in(summary.columns, "_mean"))
    return figures.vega_spec(specs.frontier(frame, fairness, profit, environments(study.manifest)[env], style))


def _base(name: str, spec) -> str:
    """A figure's catalogue name: ``name`` without the ``_<group>`` a study across families gives
    each of its figures (titled ``<group>: ...``; ``abm.reports.study.study_figures``)."""
    group = spec.title.split(": ", 1)[0] if ": " in spec.title else None
    return name.removesuffix(f"_{group}") if group and name.endswith(f"_{group}") else name


def _metric_names(table: dict) -> list[str]:
    """The per-metric figures of a spec table, in catalogue order (frontier, rates etc. excluded)."""
    return [name for name, spec in table.items() if _base(name, spec) in specs.METRIC_BY_STEM]


def warm(path: str | Path) -> None:
    """Read a folder and draw its first tab's figures, so the first visitor does not wait for them."""
    target = open_target(path)
    key = _key(path)
    kind = "study" if isinstance(target, data.Study) else "run"
    if kind == "study" and target.summary.empty:
        return
    table = (_study_specs if kind == "study" else _run_specs)(*key)
    names = _metric_names(table)
    for name in names:
        _spec_png(*key, kind, name)
    if names:
        _spec_json(*key, kind, names[0])


def _try(fn, *args):
    """(value, None) or (None, the UserError's message): user errors become page text."""
    try:
        return fn(*args), None
    except UserError as exc:
        return None, str(exc)


def _fmt(value, digits: int = 4) -> str:
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return "" if np.isnan(value) else f"{float(value):.{digits}f}"
    return str(value)


def timeline_rows(events: pd.DataFrame, state: str = "wealth") -> list[list[str]]:
    """The timeline table's cells: time, episode, event, amount, <state> after, decision prob."""
    after = events[f"{state}_after"].to_numpy()
    return [[f"{r.time:.4f}", str(int(r.episode)), str(r.kind), _fmt(r.amount), _fmt(value), _fmt(r.decision_prob)]
            for r, value in zip(events.itertuples(index=False), after)]


def _html_table(header: list[str], rows: list[list[str]], css_class: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (f'<table class="{css_class} abm-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


CSS = """
.abm-table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
.abm-table th, .abm-table td { padding: 2px 10px; border-bottom: 1px solid #ddd; text-align: right; }
.abm-table th { background: #f3f3f3; }
"""


@solara.component
def ErrorPage(message: str):
    solara.Title("abm dashboard: cannot open")
    with solara.Column(style={"padding": "24px"}):
        solara.Markdown("## abm dashboard: cannot open this folder")
        solara.Error(message, classes=["abm-error"])
        solara.Markdown("Give a run folder (from `abm run`: `summary.json`, `episodes.parquet`, `agents.parquet`, "
                        "`events.parquet`) or a study folder (from `abm study`: `manifest.json`, `summary.parquet`).")


@solara.component
def Page():
    solara.Style(CSS)
    target = os.environ.get(TARGET_ENV)
    if not target:
        ErrorPage("no folder given: start the dashboard with `abm dashboard RUN_OR_STUDY_DIR`")
        return
    folder, error = _try(open_target, target)
    if error:
        ErrorPage(error)
    elif isinstance(folder, data.Study):
        solara.Title(f"abm dashboard: study {folder.name}")
        StudyView(folder)
    else:
        solara.Title(f"abm dashboard: {folder.folder.name}")
        RunView(folder)


# -- a run --------------------------------------------------------------------------------
@solara.component
def RunView(run):
    s = run.summary
    hawkes, hawkes_error = _try(data.hawkes_parameters, run)
    solara.Markdown(f"### Run `{run.folder.name}`\n"
                    f"family **{s.get('family')}**, policy **{s.get('policy')}**, seed {s.get('seed')}, "
                    f"{len(run.episodes):,} episodes, {s.get('events', 0):,} events, {len(run.agents):,} applicants")
    with solara.lab.Tabs(lazy=True):
        with solara.lab.Tab("Group metrics"):
            MetricsView(run)
        with solara.lab.Tab("Applicants"):
            ApplicantsView(run)
        with solara.lab.Tab("Rates and distributions"):
            RatesView(run)
        if hawkes is not None or hawkes_error:
            with solara.lab.Tab("Hawkes intensity"):
                if hawkes_error:
                    solara.Error(hawkes_error)
                else:
                    IntensityView(run)


@solara.component
def InteractiveFigure(key: tuple, kind: str, names: list[str], titles: dict[str, str], label: str = "metric",
                      css: str = "abm-metric"):
    """A picker over figures and the chosen one as an interactive chart, with the hovered point's values."""
    choice = solara.use_reactive(names[0] if names else None)
    hovered = solara.use_reactive("")
    shown = choice.value if choice.value in names else (names[0] if names else None)
    if shown is None:
        solara.Info("nothing recorded to plot")
        return

    def pick(title: str) -> None:
        by_title = {titles[n]: n for n in names}
        choice.set(by_title.get(title, names[0]))
        hovered.set("")

    with solara.Row(style={"align-items": "center"}):
        solara.Select(label, values=[titles[n] for n in names], value=titles[shown], on_value=pick,
                      classes=[f"{css}-picker"], style={"max-width": "420px"})
        solara.Text("hover a point for its values; drag to pan, wheel to zoom, click a legend entry",
                    style={"color": "#666", "font-size": "12px"})
    figures.VegaChart(_spec_json(*key, kind, shown), on_hover=lambda d: hovered.set(figures.describe_point(d)),
                      classes=[css, f"{css}-{shown}"])
    solara.Text(hovered.value or " ", classes=[f"{css}-hover"], style={"font-size": "13px"})


@solara.component
def StaticGrid(key: tuple, kind: str, names: list[str]):
    with solara.GridFixed(columns=2):
        for name in names:
            solara.Image(_spec_png(*key, kind, name))


@solara.component
def MetricsView(run):
    if run.episodes.empty:
        solara.Info("this run recorded no group metrics")
        return
    key = _key(run.folder)
    table = _run_specs(*key)
    names = _metric_names(table)
    if not names:
        solara.Info("this run recorded no group metrics")
        return
    InteractiveFigure(key, "run", names, {n: table[n].title for n in names})
    solara.Markdown("#### Every metric (groups on one axis)")
    StaticGrid(key, "run", names)


@solara.component
def RatesView(run):
    key = _key(run.folder)
    table = _run_extra(*key)
    names = [n for n in ("group_rates", "distribution") if n in table]
    if not names:
        solara.Info("this run records neither per-group counts nor an event log")
        return
    titles = {"group_rates": "selection / default / true-positive rates and gaps",
              "distribution": f"{run.state} distribution per group"}
    InteractiveFigure(key, "run_extra", names, titles, label="figure", css="abm-rates")


@solara.component
def ApplicantsView(run):
    query = solara.use_reactive("")
    sort_by = solara.use_reactive("agent_id")
    descending = solara.use_reactive(False)
    page = solara.use_reactive(0)
    selected = solara.use_reactive(None)
    rows, total = data.applicant_page(run.agents, query.value, sort_by.value, descending.value, page.value,
                                      PAGE_SIZE, state=run.state)
    last_page = max(0, (total - 1) // PAGE_SIZE)
    shown_page = min(page.value, last_page)

    def search(text: str) -> None:
        query.set(text)
        page.set(0)

    def sort(col: str) -> None:
        if sort_by.value == col:
            descending.set(not descending.value)
        else:
            sort_by.set(col)
            descending.set(col not in ("agent_id", "group"))  # numbers: largest first
        page.set(0)

    with solara.Row(style={"align-items": "center"}):
        solara.InputText("Search: applicant id or group name (Enter)", value=query.value, on_value=search,
                         continuous_update=False, classes=["abm-search"])
        solara.Text((f"{total:,} applicant matches" if total == 1 else f"{total:,} applicants match")
                    if query.value.strip() else f"{total:,} applicants",
                    classes=["abm-count"])
    header = []
    for col in rows.columns:
        arrow = (" ↓" if descending.value else " ↑") if col == sort_by.value else ""
        header.append(solara.v.Html(tag="th", children=[
            solara.Button(col.replace("_", " ") + arrow, text=True, small=True, classes=[f"abm-sort-{col}"],
                          on_click=functools.partial(sort, col))]))
    header.append(solara.v.Html(tag="th", children=["timeline"]))
    body = []
    for r in rows.itertuples(index=False):
        cells = [solara.v.Html(tag="td", children=[_fmt(v, 2)]) for v in r]
        agent_id = int(r.agent_id)
        cells.append(solara.v.Html(tag="td", children=[
            solara.Button("open", small=True, outlined=True, classes=["abm-open", f"abm-open-{agent_id}"],
                          on_click=functools.partial(selected.set, agent_id))]))
        body.append(solara.v.Html(tag="tr", children=cells, attributes={"data-agent": str(agent_id)}))
    solara.v.Html(tag="table", class_="abm-table abm-applicants", children=[
        solara.v.Html(tag="thead", children=[solara.v.Html(tag="tr", children=header)]),
        solara.v.Html(tag="tbody", children=body)])
    with solara.Row(style={"align-items": "center"}):
        solara.Button("previous", small=True, disabled=shown_page == 0, on_click=lambda: page.set(shown_page - 1))
        solara.Text(f"page {shown_page + 1} of {last_page + 1}")
        solara.Button("next", small=True, disabled=shown_page >= last_page, on_click=lambda: page.set(shown_page + 1))
    if selected.value is not None:
        TimelineView(run, selected.value)
        from abm.dashboard.network import NetworkPanel  # runs with social ties: the applicant's neighbourhood

        NetworkPanel(run, selected.value)


def _timeline(run, agent_id: int):
    result = data.applicant_timeline(run, agent_id)
    return result, figures.png(figures.timeline(result.path, result.events, agent_id, result.state))


def _trace(run, first: int, last: int):
    trace = data.intensity_trace(run, first, last)
    return trace, figures.png(figures.intensity(trace, run.episodes.iloc[first:last + 1]))


@solara.component
def TimelineView(run, agent_id: int):
    result, error = solara.use_memo(lambda: _try(_timeline, run, agent_id), [str(run.folder), agent_id])
    if error:
        solara.Error(error)
        return
    timeline, image = result
    a, events, state = timeline.agent, timeline.events, timeline.state
    solara.Markdown(f"#### Applicant {agent_id} (group {a['group']}): {state} {_fmt(a.get(f'initial_{state}'), 2)} → "
                    f"{_fmt(a.get(f'final_{state}'), 2)}, {len(events)} events")
    solara.Image(image)
    shown = events.head(MAX_TIMELINE_ROWS)
    header = ["time", "episode", "event", "amount", f"{state} after", "decision prob"]
    solara.HTML(tag="div", unsafe_innerHTML=_html_table(header, timeline_rows(shown, state), "abm-timeline"))
    if len(events) > len(shown):
        solara.Text(f"first {len(shown)} of {len(events)} events shown")


@solara.component
def IntensityView(run):
    n = len(run.episodes)
    width = solara.use_reactive(min(3, n))
    first = solara.use_reactive(max(0, n - min(3, n)))
    last = min(n - 1, first.value + width.value - 1)
    result, error = solara.use_memo(lambda: _try(_trace, run, first.value, last),
                                    [str(run.folder), first.value, last])
    solara.Markdown(
        "λ_g(t) = max(0, a + b·μ_g(t)) + α·Σ exp(−β(t − t_j)) over the group's approvals t_j "
        "(or applications, per `arrivals.excite_on`), recomputed on the server from the events of the chosen "
        "episodes: μ_g moves with each repayment, the excitation jumps by α at each approval. "
        "The dots are `intensity_<g>` recorded in episodes.parquet at each episode end; the trace passes "
        "through them. The episode-end series over the whole run is in *Group metrics*.")
    with solara.Row(classes=["abm-hawkes-sliders"]):
        solara.SliderInt(f"first episode: {first.value}", value=first, min=0, max=max(0, n - 1),
                         thumb_label="always")
        solara.SliderInt(f"episodes shown: {width.value}", value=width, min=1,
                         max=max(1, min(data.MAX_TRACE_EPISODES, n)), thumb_label="always")
    if error:
        solara.Error(error)
        return
    trace, image = result
    solara.Image(image)
    solara.Text(f"episodes {first.value}..{last}: {len(trace):,} evaluation points")


def _study_run(study, run_id: str):
    if run_id not in study.run_ids:
        raise UserError(f"{study.folder}: no finished run {run_id!r}")
    return open_target(study.folder / "runs" / run_id)


# -- a study ------------------------------------------------------------------------------
STUDY_TABS = ("Configurations", "Frontier and rates", "Runs")


@solara.component
def StudyView(study):
    summary = study.summary
    total_runs = len(study.manifest.get("runs", []))
    n_configs = summary["config_id"].nunique() if "config_id" in summary.columns else 0
    tab = solara.use_reactive(0)
    run_id = solara.use_reactive(study.run_ids[0] if study.run_ids else None)
    solara.Markdown(f"### Study `{study.name}`\n{n_configs} configurations, {len(study.run_ids)} of {total_runs} "
                    f"runs finished ({study.folder})")
    if summary.empty:
        solara.Warning("no finished runs yet: nothing to compare")
        return

    def open_run(rid: str) -> None:
        run_id.set(rid)
        tab.set(STUDY_TABS.index("Runs"))

    with solara.lab.Tabs(value=tab, lazy=True):
        with solara.lab.Tab(STUDY_TABS[0]):
            ConfigurationsView(study, open_run)
        with solara.lab.Tab(STUDY_TABS[1]):
            StudyFiguresView(study)
        with solara.lab.Tab(STUDY_TABS[2]):
            StudyRunsView(study, run_id)


def use_environment_picker(study, css: str) -> str | None:
    """A study across families (``abm.reports.study.environments``): a picker of its study groups,
    each shown alone, since one axis or table cannot hold two families' metrics; returns the group
    picked. Any other study: no picker, None (everything)."""
    envs = list(environments(study.manifest))
    env = solara.use_reactive(envs[0])
    shown = env.value if env.value in envs else envs[0]
    if shown is not None:
        solara.Select("environment (study group)", values=envs, value=env, classes=[css], style={"max-width": "320px"})
    return shown


@solara.component
def ConfigurationsView(study, open_run=None):
    key = _key(study.folder)
    shown = use_environment_picker(study, "abm-config-env")
    summary = environment_rows(study.summary, "study_groups", shown)
    panels = data.metric_panels(summary.columns, suffix="_mean")
    metrics = [m for _, cols in panels for m in cols]
    final = data.study_final_table(summary, metrics)
    links = data.runs_by_config(study, _study_frame(*key))
    solara.Markdown("Final episode of each configuration: mean ± 95% CI over its seeded runs; its runs open in *Runs*.")
    header = [solara.v.Html(tag="th", children=[c]) for c in [*final.columns, "runs (open)"]]
    body = []
    for config_id, row in zip(final.index, final.itertuples(index=False)):
        cells = [solara.v.Html(tag="td", children=[str(v)]) for v in row]
        buttons = [solara.Button(rid.rsplit("-", 1)[-1], small=True, text=True, classes=["abm-run-link"],
                                 on_click=functools.partial(open_run, rid) if open_run else None)
                   for rid in links.get(str(config_id), [])]
        cells.append(solara.v.Html(tag="td", children=buttons))
        body.append(solara.v.Html(tag="tr", children=cells, attributes={"data-config": str(row[0])}))
    solara.v.Html(tag="table", class_="abm-table abm-study-final", children=[
        solara.v.Html(tag="thead", children=[solara.v.Html(tag="tr", children=header)]),
        solara.v.Html(tag="tbody", children=body)])
    table = _study_specs(*key)
    names = [n for n in _metric_names(table) if shown is None or table[n].title.startswith(f"{shown}: ")]
    if names:
        InteractiveFigure(key, "study", names, {n: table[n].title for n in names})
        solara.Markdown("#### Every metric (configurations and groups on one axis; bands: 95% CI over seeds)")
        StaticGrid(key, "study", names)


@solara.component
def StudyFiguresView(study):
    key = _key(study.folder)
    shown = use_environment_picker(study, "abm-frontier-env")
    frame = environment_rows(_study_frame(*key), "study_groups", shown)
    fair, money = specs.fairness_choices(frame.columns), specs.profit_choices(frame.columns)
    x = solara.use_reactive(fair[0] if fair else None)
    y = solara.use_reactive(money[0] if money else None)
    if fair and money:
        xv, yv = (x.value if x.value in fair else fair[0]), (y.value if y.value in money else money[0])
        solara.Markdown("#### Frontier: fairness against profit at the final episode")
        with solara.Row():
            solara.Select("fairness (x)", values=fair, value=xv, on_value=x.set, classes=["abm-frontier-x"],
                          style={"max-width": "320px"})
            solara.Select("profit or return (y)", values=money, value=yv, on_value=y.set, classes=["abm-frontier-y"],
                          style={"max-width": "320px"})
        figures.VegaChart(_frontier_json(*key, xv, yv, shown), classes=["abm-frontier"])
    rates = {k: v for k, v in _study_specs(*key).items() if _base(k, v) == "group_rates"}
    table = {**rates, **_study_extra(*key)}
    if table:
        titles = {name: spec.title for name, spec in table.items()}
        kinds = {name: "study" if name in rates else "extra" for name in table}
        FigureList(key, kinds, titles)


@solara.component
def FigureList(key: tuple, kinds: dict[str, str], titles: dict[str, str]):
    names = list(kinds)
    choice = solara.use_reactive(names[0])
    shown = choice.value if choice.value in names else names[0]
    by_title = {titles[n]: n for n in names}
    solara.Select("figure", values=[titles[n] for n in names], value=titles[shown],
                  on_value=lambda t: choice.set(by_title.get(t, names[0])), classes=["abm-figure-picker"],
                  style={"max-width": "420px"})
    figures.VegaChart(_spec_json(*key, kinds[shown], shown), classes=["abm-study-figure"])


@solara.component
def StudyRunsView(study, run_id=None):
    own = solara.use_reactive(study.run_ids[0] if study.run_ids else None)
    run_id = run_id if run_id is not None else own
    if not study.run_ids:
        solara.Warning("no finished runs")
        return
    solara.Select("run", values=study.run_ids, value=run_id, classes=["abm-run-select"])
    run, error = _try(_study_run, study, run_id.value)
    if error:
        solara.Error(error)
    else:
        RunView(run).key(run_id.value)
