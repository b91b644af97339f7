"""The Python API: run a scenario, open a run folder, run a study, from a notebook or a script.

    import abm

    run = abm.run("scenarios/eutopia.yaml", policy="random", episodes=20, seed=1)
    run.episodes                  # one row per episode (the wide per-group columns *_<group>)
    run.tidy()                    # the per-group columns long: episode, group, metric, value
    run.events, run.agents        # every event; one row per applicant
    run.history(17)               # applicant 17's events
    run.model_vars, run.agent_vars   # Mesa DataCollector-shaped frames

    run = abm.run("my.yaml", policy="mymodule:MyLender", out="outputs")   # also a run folder
    run = abm.load_run("outputs/<run folder>")
    result = abm.study("scenarios/studies/smoke.yaml", workers=2)          # a study folder

``abm.run`` takes the same inputs as ``abm run`` and, for the same configuration, gives the
same frames as the files ``abm run`` writes (the in-memory frames go through the same Arrow
conversion as the Parquet files). A scenario is a file path, a mapping (a scenario file's
content) or a scenario object (``Run.scenario``); ``policy`` is a registered name, a plugin
``module:Class`` or a ``policies.base.Policy`` subclass (``abm.registry``). Errors in the
inputs are ``abm.errors.UserError`` with one line per problem, as the CLI prints them.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa

from abm import __version__, objectives, registry
from abm.config import apply_overrides, config_hash, load_scenario, scenario_to_dict, validate_scenario_dict
from abm.errors import UserError

__all__ = ["Run", "StudyResult", "bundled_scenarios", "init", "load_run", "run", "study"]

# event kinds -> the agent_vars count columns (cumulative counts of each applicant's events)
_KIND_COLUMNS = {"apply": "applications", "approve": "approvals", "reject": "rejections", "repay": "repayments",
                 "default": "defaults"}


# ---------------------------------------------------------------------------------------------
# Inputs


def _policy_name(policy: Any) -> str | None:
    if policy is None or isinstance(policy, str):
        return policy
    if isinstance(policy, type):
        return registry.register_policy(policy)
    raise UserError(f"policy: give a registered name, 'module:Class' or a Policy subclass, got "
                    f"{type(policy).__name__} {policy!r}")


def _whole(name: str, value: Any) -> int | None:
    """An integer parameter as given (None stays None); 1.9, True or "3" are refused, not truncated."""
    if value is None or isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return None if value is None else int(value)
    raise UserError(f"{name}: expected a whole number, got {type(value).__name__} {value!r}")


def _of_type(name: str, value: Any, kinds: tuple, expected: str) -> Any:
    if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
        raise UserError(f"{name}: expected {expected}, got {type(value).__name__} {value!r}")
    return value


def _texts(name: str, value: Any) -> list[str]:
    """A string or an iterable of strings (``overrides``, ``order``) as a list."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Iterable) or isinstance(value, (bytes, dict)):
        raise UserError(f"{name}: expected a string or a list of strings, got {type(value).__name__} {value!r}")
    items = list(value)
    for item in items:
        _of_type(name, item, (str,), "strings")
    return items


_PLUGIN_KEYS = ("name", "family", "objective", "policy", "policies", "objectives")


def _strings_under(data: Any, inside: bool = False) -> list[str]:
    """The strings of a mapping given in code under the keys that name plugins."""
    if isinstance(data, dict):
        return [t for k, v in data.items() for t in _strings_under(v, inside or k in _PLUGIN_KEYS)]
    if isinstance(data, (list, tuple)):
        return [t for v in data for t in _strings_under(v, inside)]
    return [data] if inside and isinstance(data, str) else []


def _named_in_code(*values: Any, overrides: list[str] = (), mapping: Any = None) -> None:
    """A plugin name given in code (``policy=``, ``objective=``, ``overrides``, a mapping) is the
    user's consent to import it from the working directory (``abm.plugins``; the user wrote code)."""
    from abm import plugins

    plugins.allow(names=plugins.typed_names([*values, *_strings_under(mapping)], overrides))


def resolve_scenario(scenario: Any, *, policy: Any = None, episodes: int | None = None, seed: int | None = None,
                     overrides: Iterable[str] = (), objective: Any = None):
    """The validated scenario object for the API's inputs (what ``abm run`` would resolve);
    ``objective`` is a string or a ``CustomObjective`` subclass. A parameter of the wrong type is
    a UserError naming it (nothing is truncated: ``episodes=1.9`` is refused)."""
    name = _policy_name(policy)
    episodes, seed = _whole("episodes", episodes), _whole("seed", seed)
    if isinstance(objective, type):  # objective=MyObjective: a CustomObjective subclass, by its plugin name
        objective = objectives.register(objective)
    elif objective is not None:
        _of_type("objective", objective, (str,), "a string or a CustomObjective subclass")
    overrides = _texts("overrides", overrides)
    _named_in_code(name, objective, overrides=overrides, mapping=scenario if isinstance(scenario, dict) else None)
    if isinstance(scenario, (str, Path)):
        return load_scenario(scenario, overrides, policy=name, episodes=episodes, seed=seed, objective=objective)
    if isinstance(scenario, dict):
        data, source = dict(scenario), "scenario"
    elif hasattr(scenario, "model_dump_json") and hasattr(scenario, "family"):
        if name is None and episodes is None and seed is None and objective is None and not overrides:
            return scenario
        data, source = scenario_to_dict(scenario), f"scenario {scenario.name}"
    else:
        raise UserError(f"scenario: give a file path, a mapping or a scenario object, got {type(scenario).__name__}")
    # the same shortcuts, in the same order, as abm.config.load_scenario
    extra = []
    if seed is not None:
        extra.append(f"seed={seed}")
    if episodes is not None:
        extra.append(f"episodes.count={episodes}")
    if objective is not None:
        extra.append(f"objective={json.dumps(objective)}")
    if name is not None:
        current = data.get("policy")
        same = isinstance(current, dict) and current.get("name") == name
        data["policy"] = dict(current) if same else {"name": name}
    return validate_scenario_dict(apply_overrides(data, extra + overrides), source)


def _arrow_round_trip(frame: pd.DataFrame | None) -> pd.DataFrame | None:
    """The frame as ``abm run``'s Parquet file reads back (same dtypes, categories, index)."""
    if frame is None:
        return None
    return pa.Table.from_pandas(frame, preserve_index=False).to_pandas()


def _jsonable(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        return None if not np.isfinite(v) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.ndarray):
        return [_jsonable(x) for x in v.tolist()]
    return v


# ---------------------------------------------------------------------------------------------
# A run


class Run:
    """One simulated run: in memory (``abm.run(..., out=None)``) or read from a run folder.

    Frames: ``episodes`` (one row per episode), ``events`` (the event log; None when the
    scenario kept none), ``agents`` (one row per applicant), ``tidy()``, ``history(agent_id)``,
    and Mesa's DataCollector shapes ``model_vars`` / ``agent_vars``. ``scenario`` is the resolved
    scenario object, ``config`` the same as plain data, ``summary`` what ``summary.json`` holds,
    ``folder`` the run folder (None in memory), ``model`` the ``abm.engine.Simulation`` (a
    ``mesa.Model``; in memory only), ``computed`` whether this call computed it (False: reused)."""

    def __init__(self, *, folder: Path | None, summary: dict, episodes: pd.DataFrame, agents: pd.DataFrame,
                 events: pd.DataFrame | None = None, scenario: Any = None, model: Any = None,
                 computed: bool = True, group_names: list[str] | None = None, _folder_run: Any = None):
        self.folder = folder
        self.summary = summary
        self.episodes = episodes
        self.agents = agents
        self.model = model
        self.computed = computed
        self._events = events
        self._scenario = scenario
        self._group_names = group_names
        self._folder_run = _folder_run  # abm.inspect.Run: filtered event reads

    def __repr__(self) -> str:
        where = str(self.folder) if self.folder is not None else "in memory"
        return (f"<abm.Run {self.summary.get('family')}/{self.summary.get('policy')} seed {self.summary.get('seed')}: "
                f"{len(self.episodes)} episodes, {len(self.agents)} applicants, {where}>")

    # -- the scenario -------------------------------------------------------------------------
    @property
    def scenario(self):
        """The resolved scenario object (from a folder: its scenario.yaml, validated again)."""
        if self._scenario is None:
            # validate_scenario_dict leaves out the recorded abm_version
            self._scenario = validate_scenario_dict(self.config, str(self.folder / "scenario.yaml"))
        return self._scenario

    @cached_property
    def config(self) -> dict[str, Any]:
        """The resolved scenario as plain data (what the run folder's scenario.yaml holds)."""
        if self._scenario is not None:
            return scenario_to_dict(self._scenario)
        from abm.config import read_yaml

        return read_yaml(self.folder / "scenario.yaml")

    # -- frames -------------------------------------------------------------------------------
    @property
    def events(self) -> pd.DataFrame | None:
        """Every event (application, decision, outcome, a family's own); None when not kept."""
        if self._events is None and self._folder_run is not None and (self.folder / "events.parquet").exists():
            self._events = self._folder_run.events()
        return self._events

    @property
    def state(self) -> str:
        """The applicants' state the frames name (the family's ``Scenario.state``): ``events``'
        ``<state>_after``, ``agents``' ``initial_<state>``/``final_<state>``, ``agent_vars``' ``<state>``."""
        return self._folder_run.state if self._folder_run is not None else self.scenario.state

    @property
    def group_names(self) -> list[str]:
        if self._group_names is None:
            groups = self.agents["group"]
            categorical = isinstance(groups.dtype, pd.CategoricalDtype)
            self._group_names = [str(g) for g in (groups.cat.categories if categorical else pd.unique(groups.astype(str)))]
        return self._group_names

    def history(self, agent_id: int) -> pd.DataFrame:
        """One applicant's events in time order (``abm inspect --agent``'s rows)."""
        n = len(self.agents)
        if not isinstance(agent_id, (int, np.integer)) or not 0 <= int(agent_id) < n:
            raise UserError(f"history: no applicant {agent_id!r} (ids are 0..{n - 1})")
        if self._events is None and self._folder_run is not None:
            if not (self.folder / "events.parquet").exists():
                raise UserError(f"{self.folder}: this run did not keep an event log (outputs.events: false)")
            return self._folder_run.events(agent_id=int(agent_id)).reset_index(drop=True)
        if self._events is None:
            raise UserError("history: this run did not keep an event log (outputs.events: false)")
        return self._events[self._events["agent_id"] == int(agent_id)].reset_index(drop=True)

    def tidy(self) -> pd.DataFrame:
        """The per-group metrics in long form: columns episode, group, metric, value (one row per
        episode, group and metric), from the wide ``<metric>_<group>`` columns of ``episodes``;
        the same function writes a run folder's ``episodes_tidy.csv`` (``abm.runner.tidy_episodes``)."""
        from abm.runner import tidy_episodes

        return tidy_episodes(self.episodes, self.group_names)

    # -- Mesa's DataCollector shapes ----------------------------------------------------------
    @property
    def model_vars(self) -> pd.DataFrame:
        """Model variables per step (= episode), as ``DataCollector.get_model_vars_dataframe()``:
        one row per episode indexed by the episode, one column per metric."""
        frame = self.episodes.drop(columns=["episode"]).copy()
        frame.index = pd.Index(self.episodes["episode"].to_numpy())
        return frame

    @cached_property
    def agent_vars(self) -> pd.DataFrame:
        """Agent variables per step, as ``DataCollector.get_agent_vars_dataframe()``: indexed by
        (Step, AgentID), one row per applicant who has applied by the end of that episode (the
        applicants the engine's Mesa model holds as agents), with its group, its state at the
        episode's end (the column ``Run.state`` names: ``wealth``, ``score``...) and the cumulative
        counts of its events (applications, approvals, rejections, repayments, defaults, and a
        family's own kinds as ``<kind>_events``)."""
        events = self.events
        if events is None:
            raise UserError("agent_vars: this run did not keep an event log (outputs.events: false)")
        steps = len(self.episodes)
        index_names = ["Step", "AgentID"]
        if events.empty:
            return pd.DataFrame(index=pd.MultiIndex.from_arrays([[], []], names=index_names))
        ids, col = np.unique(events["agent_id"].to_numpy(), return_inverse=True)
        step = events["episode"].to_numpy().astype(np.int64)
        kinds = events["kind"].astype(str).to_numpy()
        first = np.full(len(ids), steps, dtype=np.int64)
        np.minimum.at(first, col, step)
        state = np.full((steps, len(ids)), np.nan)
        state[step, col] = events[f"{self.state}_after"].to_numpy(dtype=float)  # later events overwrite: the last one
        state = pd.DataFrame(state).ffill().to_numpy()
        rows, cols = np.nonzero(np.arange(steps)[:, None] >= first[None, :])
        data: dict[str, Any] = {"group": self.agents["group"].to_numpy()[ids[cols]], self.state: state[rows, cols]}
        for kind in dict.fromkeys([*_KIND_COLUMNS, *pd.unique(kinds)]):
            mask = kinds == kind
            if kind not in _KIND_COLUMNS and not mask.any():
                continue
            counts = np.zeros((steps, len(ids)), dtype=np.int64)
            np.add.at(counts, (step[mask], col[mask]), 1)
            data[_KIND_COLUMNS.get(kind, f"{kind}_events")] = np.cumsum(counts, axis=0)[rows, cols]
        frame = pd.DataFrame(data, index=pd.MultiIndex.from_arrays([rows, ids[cols]], names=index_names))
        if isinstance(self.agents["group"].dtype, pd.CategoricalDtype):
            frame["group"] = pd.Categorical(frame["group"], categories=self.agents["group"].cat.categories)
        return frame

    def get_model_vars_dataframe(self) -> pd.DataFrame:
        """Mesa's name for ``model_vars``."""
        return self.model_vars

    def get_agent_vars_dataframe(self) -> pd.DataFrame:
        """Mesa's name for ``agent_vars``."""
        return self.agent_vars


def run(scenario: Any, *, policy: Any = None, episodes: int | None = None, seed: int | None = None,
        overrides: Iterable[str] = (), out: str | Path | None = None, objective: Any = None,
        recompute: bool = False, on_episode: Callable[[dict], None] | None = None) -> Run:
    """Simulate a scenario; ``out=None``: in memory, no files; ``out=ROOT``: also write (or reuse)
    the run folder ``ROOT/<name>-<policy>-seed<S>-<hash>/`` exactly as ``abm run --out ROOT``.

    ``overrides`` are ``dotted.path=value`` strings (``--set``); ``policy``, ``episodes``,
    ``seed`` and ``objective`` are the CLI's shortcuts. ``on_episode(row)`` is called after each
    episode with its metrics row (a progress bar, early looks)."""
    _of_type("out", out, (str, Path, type(None)), "a folder path or None")
    _of_type("recompute", recompute, (bool,), "True or False")
    if on_episode is not None and not callable(on_episode):
        raise UserError(f"on_episode: expected a function of the episode's row, got {type(on_episode).__name__}")
    sc = resolve_scenario(scenario, policy=policy, episodes=episodes, seed=seed, overrides=overrides,
                          objective=objective)
    if out is not None:
        from abm.runner import run_to_folder

        folder, computed = run_to_folder(sc, out, on_episode=on_episode, reuse=not recompute,
                                         notify=lambda line: print(line, file=sys.stderr))
        result = load_run(folder)
        result._scenario, result.computed = sc, computed
        return result
    from abm.provenance import code_fingerprint
    from abm.runner import execute

    started = time.perf_counter()
    sim, episodes_frame, events = execute(sc, on_episode=on_episode)
    wall = time.perf_counter() - started
    final = episodes_frame.iloc[-1].to_dict() if len(episodes_frame) else {}
    summary = {"abm_version": __version__, "family": sc.family, "policy": sc.policy.name, "objective": sc.objective,
               "seed": sc.seed, "config_hash": config_hash(sc), "code_fingerprint": code_fingerprint(sc),
               "episodes": int(len(episodes_frame)), "events": int(sim.log.count),
               "final": {k: _jsonable(v) for k, v in final.items()}, "world": sim.world.summary(),
               "policy_state": sim.policy.state() if sim.policy is not None else {}, "wall_seconds": round(wall, 3)}
    return Run(folder=None, summary=summary, episodes=_arrow_round_trip(episodes_frame),
               agents=_arrow_round_trip(sim.world.agents_table()), events=_arrow_round_trip(events), scenario=sc,
               model=sim, group_names=[str(g) for g in sim.world.group_names])


def load_run(path: str | Path) -> Run:
    """A run folder (``abm run``'s, a study's ``runs/<id>``) as a ``Run``; the event log is read
    when first asked for. A folder that is not a complete run folder is a one-line UserError."""
    from abm.inspect import load_run as load_folder

    found = load_folder(path)
    return Run(folder=Path(path), summary=found.summary, episodes=found.episodes, agents=found.agents,
               computed=False, _folder_run=found)


# ---------------------------------------------------------------------------------------------
# A study


@dataclass
class StudyResult:
    """A study folder after ``abm.study``: what the call did (``outcome``: succeeded, skipped,
    failed counts) and the folder's tables: ``status`` (runs.csv: each run's status), ``frame``
    (study.parquet: one row per run and episode; ``study_group(s)``: the study file's named groups),
    ``summary`` (summary.parquet: mean, std and count per configuration and episode), ``tidy()``
    (every metric long, per population group); ``run(run_id)`` opens one run."""

    folder: Path
    name: str
    outcome: Any = None
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def status(self) -> pd.DataFrame:
        return pd.read_csv(self.folder / "runs.csv")

    @property
    def frame(self) -> pd.DataFrame:
        return pd.read_parquet(self.folder / "study.parquet")

    @property
    def summary(self) -> pd.DataFrame:
        from abm.study import load_summary

        return load_summary(self.folder)

    @property
    def run_ids(self) -> list[str]:
        return [str(r) for r in self.status["run_id"]]

    def run(self, run_id: str) -> Run:
        return load_run(self.folder / "runs" / run_id)

    def tidy(self) -> pd.DataFrame:
        """Every metric of every finished run in long form: columns run, configuration (its name in
        the report), episode (from 0, as in the data), group, metric, value (float). A per-group
        metric (``mean_wealth_F``) gives ``group`` the population group (``F``) and ``metric`` its
        stem (``mean_wealth``); a metric of the whole population (``wealth_gap``, ``profit``) has
        group None. Rows in the study's order, then by episode, metric (column order), group."""
        from abm.reports.figures import NOT_METRICS, grid_keys_of, groups_in
        from abm.runner import group_columns
        from abm.study.aggregate import RUN_COLUMNS

        frame = self.frame
        skip = {*RUN_COLUMNS, *NOT_METRICS, *grid_keys_of(frame)}
        metrics = [c for c in frame.columns if c not in skip and pd.api.types.is_numeric_dtype(frame[c])
                   and not pd.api.types.is_bool_dtype(frame[c])]
        per_group = group_columns(metrics, groups_in(frame.columns))
        wide = frame[["run_id", "config", "episode", *metrics]].rename(columns={"run_id": "run",
                                                                                "config": "configuration"})
        long = wide.melt(id_vars=["run", "configuration", "episode"], var_name="column", value_name="value")
        long["metric"] = long["column"].map(lambda c: per_group[c][0] if c in per_group else c)
        long["group"] = long["column"].map(lambda c: per_group[c][1] if c in per_group else None)
        long["value"] = long["value"].astype(float)
        order = {c: i for i, c in enumerate(dict.fromkeys(long["metric"]))}
        runs = {r: i for i, r in enumerate(dict.fromkeys(frame["run_id"]))}
        long = long.assign(_run=long["run"].map(runs), _metric=long["metric"].map(order))
        long = long.sort_values(["_run", "episode", "_metric"], kind="stable")
        return long[["run", "configuration", "episode", "group", "metric", "value"]].reset_index(drop=True)


def study(study_file_or_dict: str | Path | dict, *, workers: int | None = 0, out: str | Path | None = None,
          overrides: Iterable[str] = (), scheduler: str | None = None, retry_failed: bool = False,
          recompute_stale: bool = False, quiet: bool = True, order: Iterable[str] = (),
          skip: str | Path | Iterable[str] | None = None) -> StudyResult:
    """Run a study (a study file or its content as a mapping) into ``out`` (default
    ``outputs/studies/<name>``, as ``abm study``); resumable, like the CLI. ``workers=0`` runs in
    this process (no Dask; a plugin class defined in a notebook works only so); ``workers=N`` a
    local Dask cluster of N processes; ``workers=None`` as ``abm study`` without ``--workers``: in
    this process while the runs left are below a local cluster's measured break-even, else one
    worker per core (its choice: ``result.outcome.choice``); ``scheduler`` an existing
    Dask cluster (whose workers must be able to import any plugin the study uses). ``order``:
    policies (NAME or NAME:VARIANT, a sequence or one comma-separated string) whose runs start
    first, as ``abm study --order``; ``skip``:
    runs to leave out, a ledger CSV (its ``run_id`` column, as ``--skip``) or the run ids."""
    from abm.study import load_study, run_study, study_from_dict
    from abm.study.execute import read_held, skip_notices
    from abm.study.spec import order_items

    overrides = _texts("overrides", overrides)
    workers = _whole("workers", workers)
    _of_type("out", out, (str, Path, type(None)), "a folder path or None")
    _of_type("scheduler", scheduler, (str, type(None)), "an address tcp://HOST:PORT or None")
    for name, value in (("retry_failed", retry_failed), ("recompute_stale", recompute_stale), ("quiet", quiet)):
        _of_type(name, value, (bool,), "True or False")
    order = order if isinstance(order, str) else _texts("order", order)  # a string: comma-separated
    _named_in_code(overrides=overrides, mapping=study_file_or_dict if isinstance(study_file_or_dict, dict) else None)
    if isinstance(study_file_or_dict, dict):
        spec = study_from_dict(apply_overrides(study_file_or_dict, overrides), "study")
    else:
        spec = load_study(_of_type("study", study_file_or_dict, (str, Path), "a study file or its content"),
                          overrides)
    for notice in spec.notices:  # an entry that drops the base policy's parameters (abm study: "warning:")
        warnings.warn(notice, UserWarning, stacklevel=2)
    folder = Path(out) if out is not None else Path("outputs") / "studies" / spec.name
    if skip is None:
        held: set[str] = set()
    elif isinstance(skip, (str, Path)):
        held = read_held(skip)
    else:
        held = set(_texts("skip", skip))
    for notice in skip_notices(held, spec, "skip"):
        warnings.warn(notice, UserWarning, stacklevel=2)
    outcome = run_study(spec, folder, scheduler=scheduler, workers=None if scheduler else workers,
                        retry_failed=retry_failed, recompute_stale=recompute_stale, quiet=quiet,
                        order=order_items(order), skip=held,
                        on_backend=None if quiet else print)  # workers=None: the default's choice, one line
    return StudyResult(folder=folder, name=spec.name, outcome=outcome)


# ---------------------------------------------------------------------------------------------
# The bundled scenarios (abm init)


def bundled_scenarios() -> Path:
    """The folder of the scenarios shipped with abm (package data in a wheel, ``scenarios/`` in a
    source checkout)."""
    from abm.data import shipped_scenarios

    folder = shipped_scenarios()
    if folder is None:
        raise UserError("the bundled scenarios are missing from this installation (reinstall abm)")
    return folder


def init(folder: str | Path) -> list[Path]:
    """Copy the bundled scenarios (and their studies) into a new or empty ``folder``; return the
    files written. An existing non-empty folder is refused (nothing is overwritten)."""
    dest = Path(folder)
    if dest.exists() and not dest.is_dir():
        raise UserError(f"{dest}: exists and is not a folder")
    if dest.is_dir() and any(dest.iterdir()):
        raise UserError(f"{dest}: exists and is not empty; give a new or empty folder (nothing was copied)")
    source = bundled_scenarios()
    try:
        shutil.copytree(source, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]"))
    except OSError as exc:
        raise UserError(f"{dest}: cannot copy the scenarios ({exc.strerror or exc})") from None
    return sorted(p for p in dest.rglob("*") if p.is_file())
