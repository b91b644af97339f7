"""Server-side data for the dashboard: pure functions of run and study folders.

The browser only ever receives what these functions return: one page of applicants, one
applicant's events (read with a Parquet filter, ``abm.inspect.Run.events``), one window of
the Hawkes intensity trace (read with an episode filter). The event log itself stays on disk.

Hawkes trace (Eutopia). ``lambda_g(t) = max(0, a + b mu_g(t)) + E_g(t)`` with
``E_g(t) = alpha sum_{t_j <= t} exp(-beta (t - t_j))`` over the group's approvals (or
applications, per ``arrivals.excite_on``): the formula of ``EutopiaWorld.intensity``, evaluated
by the same code (``abm.hawkes.excitation_path``). At the
start of a window the state is taken from ``episodes.parquet`` (the group mean wealth and
the intensity at the previous episode's end, so ``E_g = intensity_g - base_g``); inside the
window ``mu_g`` moves by each repayment's gain (``agents.gain``; a default leaves wealth
unchanged) and ``E_g`` jumps by ``alpha`` at each excitation. The trace is therefore exact at
every evaluation time and equals ``intensity_<g>`` of ``episodes.parquet`` at episode ends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from abm.errors import UserError
from abm.inspect import Run, load_run
from abm.reports.figures import t_half_width
from abm.reports.study import ci_cell

# (title, column pattern): the group metrics shown over episodes, when a family provides them
PANELS = (
    ("mean wealth ($K)", "mean_wealth_{g}"),
    ("wealth gap ($K)", "wealth_gap"),
    ("mean credit score", "mean_score_{g}"),  # score families (credit_score, fico, admissions)
    ("credit gap (1-Wasserstein)", "credit_gap"),
    ("profit per episode ($K)", "profit"),
    ("cumulative profit ($K)", "cumulative_profit"),
    ("reach (share approved per episode)", "reach_{g}"),
    ("recall (cumulative)", "recall_{g}"),
    ("social burden (mean cost paid by the admitted)", "social_burden_{g}"),
    ("Hawkes intensity at episode end", "intensity_{g}"),
)
# those a family records ("loans", "admitted": the score families' approvals); {state}: the family's
# state (Scenario.state: wealth, score, budget, belief), as the run's files name it (inspect.Run.state)
APPLICANT_COLUMNS = ("agent_id", "group", "initial_{state}", "final_{state}", "applications", "approvals", "loans",
                     "admitted", "defaults")
TIMELINE_COLUMNS = ("time", "episode", "kind", "amount", "{state}_after", "decision_prob")
MAX_TRACE_EPISODES = 20  # a trace window is evaluated at ~500 points per episode and group
TRACE_POINTS_PER_EPOCH = 5


@dataclass
class Study:
    """A study folder: its manifest, ``summary.parquet`` and the ids of its finished runs."""

    folder: Path
    manifest: dict
    summary: pd.DataFrame
    run_ids: list[str]

    @property
    def name(self) -> str:
        return str(self.manifest.get("name", self.folder.name))

    def run(self, run_id: str) -> Run:
        if run_id not in self.run_ids:
            raise UserError(f"{self.folder}: no finished run {run_id!r} (finished: {len(self.run_ids)} runs)")
        return load_run(self.folder / "runs" / run_id)


def load_study(folder: str | Path) -> Study:
    folder = Path(folder)
    path = folder / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
        runs = [str(spec["run_id"]) for spec in manifest["runs"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: unreadable study manifest ({exc})") from None
    summary_path = folder / "summary.parquet"
    if not summary_path.is_file():
        raise UserError(f"{folder}: no summary.parquet yet (run `abm report {folder}` to aggregate the finished runs)")
    try:
        summary = pd.read_parquet(summary_path)
    except (OSError, ValueError) as exc:
        raise UserError(f"{summary_path}: unreadable ({exc})") from None
    done = [r for r in runs if (folder / "runs" / r / "summary.json").is_file()]
    return Study(folder, manifest, summary, done)


def open_folder(path: str | Path) -> Run | Study:
    """A run folder (``summary.json``) or a study folder (``manifest.json``); else a UserError."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such folder")
    if not path.is_dir():
        raise UserError(f"{path}: not a folder (give a run folder or a study folder)")
    if (path / "manifest.json").is_file():
        return load_study(path)
    if (path / "summary.json").is_file():
        return load_run(path)
    raise UserError(f"{path}: neither a run folder (no summary.json) nor a study folder (no manifest.json)")


# -- group metrics over episodes ----------------------------------------------------------
def groups_of(columns, suffix: str = "") -> list[str]:
    """Group names from ``mean_wealth_<g>`` (or ``applications_<g>``) metric columns."""
    for stem in ("mean_wealth_", "applications_"):
        found = [c.removeprefix(stem).removesuffix(suffix) for c in columns
                 if c.startswith(stem) and c.endswith(suffix)]
        if found:
            return found
    return []


def metric_panels(columns, suffix: str = "") -> list[tuple[str, list[str]]]:
    """``[(title, [metric, ...]), ...]`` for the panels whose metrics exist (``metric + suffix``)."""
    columns = list(columns)
    groups = groups_of(columns, suffix)
    out = []
    for title, pattern in PANELS:
        names = [pattern.format(g=g) for g in groups] if "{g}" in pattern else [pattern]
        names = [n for n in names if f"{n}{suffix}" in columns]
        if names:
            out.append((title, names))
    return out


def study_bands(summary: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One row per configuration and episode: ``config, episode, mean, lower, upper, count``.

    The band is mean ± sample std over the replicates; a configuration with one finished run
    has no spread (std NaN) and gets a zero-width band.
    """
    if f"{metric}_mean" not in summary.columns:
        raise UserError(f"study summary has no metric {metric!r}")
    std = summary[f"{metric}_std"].astype(float).fillna(0.0)
    mean = summary[f"{metric}_mean"].astype(float)
    out = pd.DataFrame({"config": summary["config"].astype(str), "episode": summary["episode"].astype(int),
                        "mean": mean, "lower": mean - std, "upper": mean + std, "count": summary["count"]})
    return out.sort_values(["config", "episode"], kind="stable").reset_index(drop=True)


def study_final_table(summary: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Configurations side by side at their last episode: mean ± 95% CI per metric (as the report's
    comparison tables: ``abm.reports.study.ci_cell``), indexed by configuration id; with a column
    ``group`` where the configurations belong to more than one study group (a label such as PPO
    may name one configuration in each)."""
    if summary.empty:
        return pd.DataFrame(columns=["configuration", "runs", *metrics])
    last = summary.loc[summary.groupby("config_id", sort=False)["episode"].idxmax()]
    out = pd.DataFrame({"configuration": last["config"].astype(str).to_numpy()},
                       index=pd.Index(last["config_id"].astype(str).to_numpy(), name="config_id"))
    if "study_groups" in last.columns and last["study_groups"].nunique() > 1:
        out["group"] = last["study_groups"].astype(str).to_numpy()
    out["runs"] = last["count"].astype(int).to_numpy()
    for m in metrics:
        half = t_half_width(last[f"{m}_std"], last["count"])
        out[m] = [ci_cell(a, h, int(n), int(n)) for a, h, n in zip(last[f"{m}_mean"], half, last["count"])]
    return out




# -- applicants ---------------------------------------------------------------------------
def applicant_page(agents: pd.DataFrame, query: str = "", sort_by: str = "agent_id", descending: bool = False,
                   page: int = 0, page_size: int = 20, state: str = "wealth") -> tuple[pd.DataFrame, int]:
    """One page of the applicant table and the number of matching applicants.

    ``query``: empty (everyone), an applicant id (digits), or a group name (case-insensitive).
    ``page`` is clipped to the pages that exist. ``state``: the run's (``Run.state``).
    """
    cols = [c for c in (c.format(state=state) for c in APPLICANT_COLUMNS) if c in agents.columns]
    if sort_by not in cols:
        raise UserError(f"sort: no column {sort_by!r} (columns: {', '.join(cols)})")
    if page_size < 1:
        raise UserError(f"page size must be >= 1, got {page_size}")
    table = agents[cols]
    q = query.strip()
    if q.isdigit():
        table = table[table["agent_id"] == int(q)]
    elif q:
        table = table[table["group"].astype(str).str.lower() == q.lower()]
    total = len(table)
    # mergesort is stable: ties keep applicant order, so a page never reshuffles
    table = table.sort_values(sort_by, ascending=not descending, kind="mergesort")
    last_page = max(0, (total - 1) // page_size)
    page = min(max(0, int(page)), last_page)
    return table.iloc[page * page_size:(page + 1) * page_size].reset_index(drop=True), total


@dataclass
class Timeline:
    """One applicant: its agents.parquet row, its events and the path of its state (``Run.state``)."""

    agent: dict
    events: pd.DataFrame
    state: str  # wealth, score ...: the family's (events' <state>_after)
    path: pd.DataFrame  # time, <state>: a step path from t = 0 to the end of the run


def applicant_timeline(run: Run, agent_id: int) -> Timeline:
    n = len(run.agents)
    if not (0 <= int(agent_id) < n):
        raise UserError(f"no applicant {agent_id} (ids are 0..{n - 1})")
    row = run.agents.iloc[int(agent_id)].to_dict()
    events = run.events(agent_id=int(agent_id))
    state = run.state
    if f"{state}_after" not in events.columns:
        raise UserError(f"{run.folder / 'events.parquet'}: no column {state}_after (each event's {state})")
    events = events[[c for c in (c.format(state=state) for c in TIMELINE_COLUMNS) if c in events.columns]].copy()
    events["kind"] = events["kind"].astype(str)
    end = float(run.episodes["time"].iloc[-1]) if len(run.episodes) else 0.0
    times = np.concatenate([[0.0], events["time"].to_numpy(float), [end]])
    values = np.concatenate([[float(row.get(f"initial_{state}", np.nan))], events[f"{state}_after"].to_numpy(float),
                             [float(row.get(f"final_{state}", np.nan))]])
    return Timeline(row, events.reset_index(drop=True), state, pd.DataFrame({"time": times, state: values}))


# -- Hawkes intensity (Eutopia) -----------------------------------------------------------
def hawkes_parameters(run: Run) -> dict | None:
    """The run's arrival parameters when it is a Hawkes-arrival family (Eutopia), else None."""
    try:
        scenario = yaml.safe_load((run.folder / "scenario.yaml").read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"{run.folder}/scenario.yaml: unreadable ({exc})") from None
    arrivals = scenario.get("arrivals") if isinstance(scenario, dict) else None
    keys = ("base_intercept", "base_slope", "excitation", "decay", "excite_on")
    if scenario.get("family") != "eutopia" or not isinstance(arrivals, dict) or any(k not in arrivals for k in keys):
        return None
    params = {k: arrivals[k] for k in keys}
    params["decision_interval"] = float(scenario["episodes"]["decision_interval"])
    return params


def intensity_trace(run: Run, first_episode: int, last_episode: int) -> pd.DataFrame:
    """``time, group, intensity``: each group's lambda_g(t) over episodes first..last (inclusive).

    Evaluated at ``TRACE_POINTS_PER_EPOCH`` points per decision interval plus every jump time
    (the value there includes the jump), from the events of those episodes only.
    """
    from abm.hawkes import excitation_path

    params = hawkes_parameters(run)
    if params is None:
        raise UserError(f"{run.folder}: not a Hawkes-arrival (Eutopia) run: no intensity trace")
    ep = run.episodes
    n_ep = len(ep)
    if not (0 <= first_episode <= last_episode < n_ep):
        raise UserError(f"episodes {first_episode}..{last_episode}: out of range 0..{n_ep - 1}")
    if last_episode - first_episode + 1 > MAX_TRACE_EPISODES:
        raise UserError(f"episodes {first_episode}..{last_episode}: at most {MAX_TRACE_EPISODES} episodes per trace")
    a, b = float(params["base_intercept"]), float(params["base_slope"])
    alpha, beta = float(params["excitation"]), float(params["decay"])
    groups = groups_of(ep.columns)
    agent_group = run.agents["group"].astype(str)
    sizes = {g: int((agent_group == g).sum()) for g in groups}
    if first_episode == 0:
        t0 = 0.0
        mu0 = {g: float(run.agents.loc[agent_group == g, "initial_wealth"].mean()) for g in groups}
        e0 = {g: 0.0 for g in groups}
    else:
        prev = ep.iloc[first_episode - 1]
        t0 = float(prev["time"])
        mu0 = {g: float(prev[f"mean_wealth_{g}"]) for g in groups}
        e0 = {g: float(prev[f"intensity_{g}"]) - max(0.0, a + b * mu0[g]) for g in groups}
    t1 = float(ep.iloc[last_episode]["time"])
    events = _window_events(run, first_episode, last_episode)
    kind = events["kind"].astype(str).to_numpy()
    ev_group = events["group"].astype(str).to_numpy()
    ev_time = events["time"].to_numpy(float)
    excite_kind = "approve" if params["excite_on"] == "approvals" else "apply"
    gain = run.agents["gain"].to_numpy(float) if "gain" in run.agents.columns else None
    step = params["decision_interval"] / TRACE_POINTS_PER_EPOCH
    grid = t0 + step * np.arange(int(round((t1 - t0) / step)) + 1)
    frames = []
    for g in groups:
        in_g = ev_group == g
        jumps = ev_time[in_g & (kind == excite_kind)]
        repay = in_g & (kind == "repay")
        repay_t = ev_time[repay]
        repay_gain = gain[events["agent_id"].to_numpy()[repay]] if gain is not None else np.zeros(repay.sum())
        times = np.unique(np.concatenate([grid, jumps, repay_t]))
        excitation = excitation_path(times, jumps, alpha, beta, start=t0, initial=e0[g])
        order = np.argsort(repay_t, kind="stable")
        cum_gain = np.concatenate([[0.0], np.cumsum(repay_gain[order])])
        mu = mu0[g] + cum_gain[np.searchsorted(repay_t[order], times, side="right")] / sizes[g]
        base = np.maximum(0.0, a + b * mu)
        frames.append(pd.DataFrame({"time": times, "group": g, "intensity": base + excitation}))
    return pd.concat(frames, ignore_index=True)


def _window_events(run: Run, first: int, last: int) -> pd.DataFrame:
    import pyarrow.parquet as pq

    path = run.folder / "events.parquet"
    if not path.is_file():
        raise UserError(f"{run.folder}: this run did not keep an event log (outputs.events: false): no trace")
    table = pq.read_table(path, columns=["time", "agent_id", "group", "kind"],
                          filters=[("episode", ">=", int(first)), ("episode", "<=", int(last))])
    return table.to_pandas()


# -- study figures and links (the report's figure layer, for the study view) ---------------------
def study_runs_frame(study: Study) -> pd.DataFrame:
    """``study.parquet``: one row per finished run and episode (empty when the study has none yet)."""
    path = study.folder / "study.parquet"
    if not path.is_file():
        return pd.DataFrame(columns=["run_id", "config_id", "config", "episode"])
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable ({exc})") from None


def runs_by_config(study: Study, frame: pd.DataFrame | None = None) -> dict[str, list[str]]:
    """Configuration id -> the ids of its finished runs (study order): the study view's links."""
    frame = study_runs_frame(study) if frame is None else frame
    done = set(study.run_ids)
    out: dict[str, list[str]] = {}
    if frame.empty:
        return out
    for r in frame.drop_duplicates("run_id")[["run_id", "config_id"]].itertuples(index=False):
        if str(r.run_id) in done:
            out.setdefault(str(r.config_id), []).append(str(r.run_id))
    return out
