"""Population studies: study files -> validated run specs with stable ids and seeds.

A study file names a base scenario, overrides applied to every run, a grid over any scenario
field (by dotted path), policies (with parameters), objectives, a number (or list) of seeded
replicates, and optional named groups of runs. ``load_study`` validates the file and every
run it expands to (each run is a fully resolved scenario, checked like a scenario file), so
``abm validate`` refuses a bad study before anything runs.

Identity. A *configuration* is a resolved scenario without its seed; its id is a hash of that
data. A run is a configuration plus a replicate key ``r``; its id is ``<policy>-<config id>-r<r>``
and its seed comes from ``numpy.random.SeedSequence(study_seed, spawn_key=(config id words, r))``,
or, with ``study.common_seeds: true``, from ``SeedSequence(study_seed, spawn_key=(r,))`` alone, so
replicate r of every configuration shares its seed (common random numbers; the id then ends
``-cr<r>`` so the two schemes never share a folder).
Neither depends on grid order, worker count or completion order, so a study can be extended
(more seeds, more grid values) and rerun without recomputing what is already finished.

Execution lives in ``abm.study.execute``, aggregation in ``abm.study.aggregate``, the speed-up
benchmark in ``abm.study.bench`` (``abm.study`` re-exports the public names); reports on a study
folder are ``abm.reports``, which reads studies and is never read by them.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterable
from typing import Any

import numpy as np
from pydantic import Field, ValidationError, field_validator

from abm import objectives, registry
from abm.config import MAX_SEED, PolicyConfig, Section, apply_overrides, format_validation_error, read_yaml, \
    scenario_to_dict, validate_scenario_dict
from abm.errors import UserError

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# fields a study sets through its own sections, never through overrides or the grid
_RESERVED = ("seed", "policy", "objective")
MAX_RUNS = 100_000  # runs (configurations x seeds) a study may expand to ...
MAX_CONFIGURATIONS = 10_000  # ... and configurations (each is validated: about 3 ms apiece)


def _check_paths(mapping: dict[str, Any], what: str) -> dict[str, Any]:
    for key in mapping:
        if not isinstance(key, str) or not _DOTTED.match(key):
            raise ValueError(f"{what} key {key!r} is not a dotted field path like 'arrivals.base_slope'")
        if key.split(".")[0] in _RESERVED:
            raise ValueError(f"{what} key {key!r}: set seeds, policies and objectives in their own study sections")
    return mapping


def _flatten(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> dotted keys (so ``--set overrides.population.n_male=9`` works)."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


MAX_LABEL = 60  # characters of a policy entry's ``label:`` (a legend entry, a table row)


def split_label(entry: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A policies entry -> (the policy: name and parameters, its ``label:`` or None). The label
    names the entry in legends and tables only: it is not part of the scenario, so it changes
    no configuration id, run id or seed."""
    policy = {k: v for k, v in entry.items() if k != "label"}
    return policy, entry.get("label")


def _label_problem(label: Any) -> str | None:
    if not isinstance(label, str):
        return f"label must be text, got {label!r}"
    if not label.strip():
        return "label is empty"
    if len(label) > MAX_LABEL:
        return f"label is {len(label)} characters long; at most {MAX_LABEL}"
    if not label.isprintable():
        return f"label {label!r} holds a line break or control character"
    return None


def _check_policies(entries: list[Any] | None) -> list[Any] | None:
    if entries is None:
        return None
    if not entries:
        raise ValueError("must list at least one policy (or be left out to use the base scenario's)")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError(f"entry [{i}]: expected a mapping with a policy name, e.g. {{name: random, p: 0.3}}, "
                             f"got {entry!r}")
        if "label" in entry and (problem := _label_problem(entry["label"])):
            raise ValueError(f"entry [{i}] ({entry['name']}): {problem}")
        try:
            PolicyConfig.model_validate(split_label(entry)[0])
        except UserError as exc:  # registry: unknown name or bad parameter
            raise ValueError(f"entry [{i}] ({entry['name']}): {exc}") from None
        except ValidationError as exc:
            raise ValueError(f"entry [{i}]: {exc.errors(include_url=False)[0]['msg']}") from None
    labels = [policy_label(split_label(e)[0]) for e in entries]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise ValueError(f"listed twice: {', '.join(dup)}")
    named = [e["label"] for e in entries if "label" in e]
    dup = sorted({x for x in named if named.count(x) > 1})
    if dup:
        raise ValueError(f"label {dup[0]!r} names two entries; give each entry its own label")
    return entries


def _check_labels(doc: "StudyFile") -> None:
    """Across the study's groups, one name per policy entry and one entry per name: a label names
    one policy (with its parameters), a policy carries one label, and no label is the name of
    another, unlabelled entry (legends and tables would merge them)."""
    names: dict[str, str] = {}  # policy_label -> its shown name
    for _, _, _, entries, _ in _blocks(doc):
        for entry in entries or []:
            policy, label = split_label(entry)
            key = policy_label(policy)
            shown = label if label is not None else key
            if names.setdefault(key, shown) != shown:
                raise UserError(f"policies: {key} has two labels, {names[key]!r} and {shown!r}; give it one")
    seen: dict[str, str] = {}
    for key, shown in names.items():
        if seen.setdefault(shown, key) != key:
            raise UserError(f"policies: label {shown!r} names two policies, {seen[shown]} and {key}; "
                            "give each its own label")


def _check_objectives(entries: list[str | None] | None) -> list[str | None] | None:
    if entries is None:
        return None
    if not entries:
        raise ValueError("must list at least one objective (or be left out)")
    for i, text in enumerate(entries):
        if text is None:
            continue
        try:
            objectives.parse(text)
        except UserError as exc:
            raise ValueError(f"entry [{i}]: {exc}") from None
    if len(set(entries)) != len(entries):
        raise ValueError("an objective is listed twice")
    return entries


class Block(Section):
    """What a study (and each named group) may set: overrides, a grid, policies, objectives."""

    overrides: dict[str, Any] = Field(default_factory=dict, description=(
        "Scenario fields set for every run, by dotted path (or nested mappings), e.g. population.n_male: 500."))
    grid: dict[str, list[Any]] = Field(default_factory=dict, description=(
        "Dotted field path -> list of values; runs cover every combination (applied after overrides)."))
    policies: list[dict[str, Any]] | None = Field(None, description=(
        "Policies to compare, each {name: NAME, <param>: value}, each replacing the base scenario's policy "
        "whole (parameters not given take the policy's defaults); default: the base scenario's policy. "
        "An entry's optional label: (text, at most 60 characters) names it in legends and tables in place of "
        "NAME(params); it changes no run id."))
    objectives: list[str | None] | None = Field(None, description=(
        "Learning objectives 'perspective:family[:param]' (null keeps the scenario's); default: [null]."))

    @field_validator("overrides", mode="before")
    @classmethod
    def _overrides(cls, value: Any) -> Any:
        return _check_paths(_flatten(value), "overrides") if isinstance(value, dict) else value

    @field_validator("grid", mode="before")
    @classmethod
    def _grid(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        value = _check_paths(_flatten(value), "grid")
        for key, values in value.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"grid key {key!r}: expected a non-empty list of values, got {values!r}")
            seen: dict[str, Any] = {}  # what each value means (1 and 1.0 alike) -> the value as written
            for v in values:
                meaning = _canon(_as_value(v))
                if meaning in seen:
                    same = "listed twice" if _canon(seen[meaning]) == _canon(v) else "the same value"
                    raise ValueError(f"grid key {key!r}: {seen[meaning]!r} and {v!r} are {same}; list it once")
                seen[meaning] = v
        return value

    @field_validator("policies")
    @classmethod
    def _policies(cls, value: Any) -> Any:
        return _check_policies(value)

    @field_validator("objectives")
    @classmethod
    def _objectives(cls, value: Any) -> Any:
        return _check_objectives(value)


class StudyHeader(Section):
    name: str = Field(..., min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$",
                      description="Study name: the default output folder outputs/studies/<name>.")
    seed: int = Field(0, ge=0, le=MAX_SEED,
                      description="Study seed: every run's seed is derived from it and the run's id.")
    episodes: int | None = Field(None, ge=1, le=1_000_000,
                                 description="Episodes per run (sets episodes.count of every run).")
    seeds: int | list[int] = Field(1, description="Replicates per configuration: a count, or a list of replicate keys.")
    description: str = Field("", max_length=2000, description="Free text: what the study is for.")
    common_seeds: bool = Field(False, description=(
        "Common random numbers: replicate r of every configuration gets the same seed (so the same "
        "population and the same stream roots), which pairs the comparisons between configurations. "
        "Off: each run's seed is keyed by its configuration too."))

    @field_validator("seeds", mode="before")
    @classmethod
    def _no_flags(cls, value: Any) -> Any:  # pydantic would read `seeds: true` as 1 replicate
        if isinstance(value, bool) or isinstance(value, list) and any(isinstance(k, bool) for k in value):
            raise ValueError("expected a count or a list of replicate keys, not true or false")
        return value

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, value: int | list[int]) -> int | list[int]:
        if isinstance(value, int):
            if not 1 <= value <= 10_000:
                raise ValueError(f"a count must be between 1 and 10000, got {value}")
            return value
        if not value:
            raise ValueError("the list of replicate keys is empty")
        if any(k < 0 or k > 2**32 - 1 for k in value) or len(set(value)) != len(value):
            raise ValueError(f"replicate keys must be distinct integers in [0, 2^32), got {value}")
        return value

    @field_validator("name")
    @classmethod
    def _not_a_path_step(cls, value: str) -> str:
        if value in (".", ".."):  # outputs/studies/.. would write the study outside outputs/studies
            raise ValueError(f"{value!r} is not a name (it is a path step)")
        return value

    @property
    def replicates(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)


class StudyGroup(Block):
    """A named group of runs: its own grid/policies/objectives over the study's base, or over a
    base of its own (another scenario file, e.g. another family: one study across environments)."""

    base: str | dict[str, Any] | None = Field(None, description=(
        "This group's base scenario in place of the study's: a path relative to the study file, or an "
        "inline mapping; the study's overrides still apply. Default: the study's base."))


class StudyFile(Block):
    study: StudyHeader = Field(..., description="Name, study seed, episodes and replicates.")
    base: str | dict[str, Any] = Field(..., description=(
        "Base scenario: a path relative to the study file, or an inline mapping."))
    groups: dict[str, StudyGroup] = Field(default_factory=dict, description=(
        "Optional named groups; each merges its overrides/grid over the study's and replaces policies/objectives."))

    @field_validator("groups")
    @classmethod
    def _group_names(cls, value: dict[str, StudyGroup]) -> dict[str, StudyGroup]:
        for name in value:
            if not re.match(r"^[A-Za-z0-9_.-]+$", name):
                raise ValueError(f"group name {name!r}: use letters, digits, '_', '.', '-'")
        return value


# ---------------------------------------------------------------------------------------------
# Run specs


@dataclass(frozen=True)
class RunSpec:
    """One run of a study: its identity, seed, configuration columns and resolved scenario."""

    run_id: str
    config_id: str
    replicate: int
    seed: int
    groups: tuple[str, ...]
    columns: dict[str, Any]  # configuration columns: grid values by dotted path, policy, objective
    scenario: dict[str, Any]  # the fully resolved scenario as plain data, seed included

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "config_id": self.config_id, "replicate": self.replicate, "seed": self.seed,
                "groups": list(self.groups), "columns": self.columns, "scenario": self.scenario}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RunSpec":
        return cls(data["run_id"], data["config_id"], int(data["replicate"]), int(data["seed"]),
                   tuple(data["groups"]), dict(data["columns"]), dict(data["scenario"]))


@dataclass
class Study:
    """A validated study: its header, the file it came from and every run it expands to."""

    name: str
    seed: int
    source: str
    document: dict[str, Any]  # the study file with overrides applied and the base inlined
    grid_keys: list[str]
    runs: list[RunSpec] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)  # warnings for the user (``base_policy_notices``)

    @property
    def configurations(self) -> int:
        return len({r.config_id for r in self.runs})


def names_policy(item: str, label: str) -> bool:
    """Whether an ``--order`` item, NAME or NAME:VARIANT, names the policy of a run whose policy
    column is ``label`` (``bisim_ppo(backend=lean,...,variant=full)``)."""
    name, _, variant = item.partition(":")
    if not (label == name or label.startswith(name + "(")):
        return False
    return not variant or f"variant={variant}" in label[len(name):]


def order_items(order: str | Iterable[str]) -> list[str]:
    """``--order``'s items: a comma-separated string (the CLI's form, also accepted by the Python
    API) or a sequence of NAME / NAME:VARIANT, stripped, empty items dropped."""
    items = order.split(",") if isinstance(order, str) else [str(item) for item in order]
    return [item.strip() for item in items if item.strip()]


def order_runs(study: Study, order: list[str] | tuple[str, ...]) -> list[RunSpec]:
    """``study.runs`` with the runs of the policies ``order`` names first, in its order, each
    replicate by replicate (every configuration of replicate 0, then 1, ...), so that a study
    stopped early has whole methods at every seed; the runs no item names follow in the study's
    order. The order changes no run (each run's seed and folder are its own). An item that names
    no policy of the study is refused (UserError)."""
    labels = [str(spec.columns.get("policy", "")) for spec in study.runs]
    for item in order:
        if not item or not any(names_policy(item, label) for label in labels):
            names = sorted({label.split("(", 1)[0] for label in labels if label})
            raise UserError(f"--order: {item!r} names no policy of study {study.name} "
                            f"({', '.join(names) or 'it names none'})")

    def key(index: int) -> tuple[int, int, int]:
        rank = next((i for i, item in enumerate(order) if names_policy(item, labels[index])), len(order))
        return rank, study.runs[index].replicate if rank < len(order) else 0, index

    return [study.runs[i] for i in sorted(range(len(study.runs)), key=key)]


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _as_value(value: Any) -> Any:
    """What a grid value means to a field: 1.0 is 1 (a whole float as its int), recursively."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (list, tuple)):
        return [_as_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_value(v) for k, v in value.items()}
    return value


def policy_label(entry: dict[str, Any]) -> str:
    """``random(p=0.3)``: a policy name with its parameters, as a configuration column."""
    params = {k: v for k, v in entry.items() if k != "name"}
    if not params:
        return str(entry["name"])
    return f"{entry['name']}(" + ",".join(f"{k}={params[k]}" for k in sorted(params)) + ")"


def configuration_id(resolved: dict[str, Any]) -> str:
    """Hash of a resolved scenario without its seed (and output root): a configuration's id."""
    data = copy.deepcopy(resolved)
    data.pop("seed", None)
    data.get("outputs", {}).pop("root", None)
    return hashlib.sha256(_canon(data).encode()).hexdigest()[:16]


def derive_seed(study_seed: int, config_id: str | None, replicate: int) -> int:
    """The run's scenario seed: SeedSequence(study_seed) keyed by (config id, replicate), or by the
    replicate alone (``config_id=None``: common random numbers across configurations)."""
    words = () if config_id is None else tuple(int(config_id[i:i + 8], 16) for i in range(0, len(config_id), 8))
    state = np.random.SeedSequence(study_seed, spawn_key=(*words, int(replicate))).generate_state(1, np.uint64)
    return int(state[0]) & MAX_SEED


def _set_path(data: dict[str, Any], path: str, value: Any, what: str) -> None:
    parts = path.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise UserError(f"{what} {path}: {'.'.join(parts[:i + 1])} is a value, not a section")
        node = child
    node[parts[-1]] = copy.deepcopy(value)


def _read_base(base: str | dict[str, Any], source: Path, field: str = "base") -> dict[str, Any]:
    if isinstance(base, dict):
        return copy.deepcopy(base)
    path = Path(base)
    if not path.is_absolute():
        path = source.parent / path
    try:
        return read_yaml(path)
    except UserError as exc:
        raise UserError(f"{source}: {field}: {exc}") from None


def _group_bases(doc: StudyFile, source: Path) -> dict[str, dict[str, Any]]:
    """The base scenario of each group that names its own (read once)."""
    return {name: _read_base(group.base, source, f"groups.{name}.base")
            for name, group in doc.groups.items() if group.base is not None}


def _blocks(doc: StudyFile) -> list[tuple[str, dict[str, Any], dict[str, list[Any]], list[dict], list[str | None]]]:
    top_policies = doc.policies
    top_objectives = doc.objectives or [None]
    if not doc.groups:
        return [(doc.study.name, dict(doc.overrides), dict(doc.grid), top_policies, top_objectives)]
    out = []
    for name, group in doc.groups.items():
        out.append((name, {**doc.overrides, **group.overrides}, {**doc.grid, **group.grid},
                    group.policies if group.policies is not None else top_policies,
                    group.objectives if group.objectives is not None else top_objectives))
    return out


def expand(doc: StudyFile, base: dict[str, Any], source: str,
           group_bases: dict[str, dict[str, Any]] | None = None) -> list[RunSpec]:
    """Every run of a validated study file, each checked as a scenario; duplicates merged.
    ``group_bases``: the groups that replace the study's base with their own."""
    by_id: dict[str, RunSpec] = {}
    replicates = doc.study.replicates
    _check_size(doc, source)
    for group, overrides, grid, policies, objectives in _blocks(doc):
        block_base = (group_bases or {}).get(group, base)
        keys = list(grid)
        seen: dict[str, tuple[dict[str, Any], Any, Any]] = {}  # config id -> the block's point that gave it
        for values in itertools.product(*(grid[k] for k in keys)):
            point = dict(zip(keys, values))
            for entry, shown in [split_label(e) for e in policies or []] or [(None, None)]:
                for objective in objectives:
                    data = copy.deepcopy(block_base)
                    label = ", ".join([f"group {group}"] * bool(doc.groups) + [f"{k}={v!r}" for k, v in point.items()]
                                      + ([f"policy {policy_label(entry)}"] if entry else [])
                                      + ([f"objective {objective}"] if objective else []))
                    where = f"{source}: run ({label})" if label else f"{source}: run"
                    for key, value in {**overrides, **point}.items():
                        _set_path(data, key, value, f"{where}: field")
                    if doc.study.episodes is not None:
                        _set_path(data, "episodes.count", doc.study.episodes, where)
                    if entry is not None:
                        data["policy"] = dict(entry)
                    if objective is not None:
                        data["objective"] = objective
                    data["seed"] = 0
                    resolved = scenario_to_dict(validate_scenario_dict(data, where))
                    config_id = configuration_id(resolved)
                    same = _simulation_id(resolved)
                    if same in seen:
                        raise UserError(_same_configuration(source, group if doc.groups else None, seen[same],
                                                            (point, entry, objective)))
                    seen[same] = (point, entry, objective)
                    columns = {"group": group, "policy": policy_label(resolved["policy"]),
                               "objective": resolved.get("objective") or "none"}
                    if shown is not None:  # only when given: the manifest of an unlabelled study is as before
                        columns["label"] = shown
                    columns.update({k: _column_value(v) for k, v in point.items()})
                    for r in replicates:
                        seed = derive_seed(doc.study.seed, None if doc.study.common_seeds else config_id, r)
                        tag = "cr" if doc.study.common_seeds else "r"  # a different seed is a different run
                        policy = resolved["policy"]["name"].replace(":", ".")  # no colon in folder names
                        run_id = f"{policy}-{config_id[:12]}-{tag}{r}"
                        if run_id in by_id:
                            old = by_id[run_id]
                            if group not in old.groups:
                                by_id[run_id] = RunSpec(old.run_id, old.config_id, old.replicate, old.seed,
                                                        old.groups + (group,), old.columns, old.scenario)
                            continue
                        by_id[run_id] = RunSpec(run_id, config_id, r, seed, (group,), dict(columns),
                                                {**resolved, "seed": seed})
    return list(by_id.values())


def _simulation_id(resolved: dict[str, Any]) -> str:
    """The configuration id with the policy's parameters at their defaults written out: ``{name:
    random}`` and ``{name: random, p: 0.5}`` have two configuration ids but one simulation."""
    policy = resolved["policy"]
    params = {k: v for k, v in policy.items() if k != "name"}
    full = registry.validate_params(policy["name"], params).model_dump(mode="json")
    return configuration_id({**resolved, "policy": {"name": policy["name"], **full}})


def _check_size(doc: StudyFile, source: str) -> None:
    """Refuse a study too large to expand, from its grid sizes alone (before building any run)."""
    configurations = sum(len(policies or [None]) * len(objectives) * math.prod(len(grid[k]) for k in grid)
                         for _, _, grid, policies, objectives in _blocks(doc))
    seeds = len(doc.study.replicates)
    runs = configurations * seeds
    if configurations > MAX_CONFIGURATIONS or runs > MAX_RUNS:
        shown = f"{configurations:,}" if configurations < 10**15 else f"{configurations:.3g}"
        raise UserError(f"{source}: grid: the study expands to {shown} configurations x {seeds:,} seeds; at most "
                        f"{MAX_CONFIGURATIONS:,} configurations and {MAX_RUNS:,} runs: split it into several studies")


def _same_configuration(source: str, group: str | None, first: tuple, second: tuple) -> str:
    """One line: two entries of one block that resolve to the same scenario (a silent duplicate)."""
    (p1, e1, o1), (p2, e2, o2) = first, second
    where = f"{source}: " + (f"groups.{group}." if group else "")
    keys = [k for k in p1 if _canon(p1[k]) != _canon(p2[k])]
    if keys == [] and o1 == o2 and e1 == e2:  # not reached: the grid check refuses a value listed twice
        return f"{where}grid: the same grid point is listed twice; list it once"
    if keys == [] and o1 == o2 and e1 is not None:
        return (f"{where}policies: {policy_label(e1)} and {policy_label(e2)} are one configuration (identical resolved "
                f"scenarios: a parameter at its default?); list it once")
    if keys == [] and e1 == e2:
        return (f"{where}objectives: {o1 or 'null'} and {o2 or 'null'} are one configuration (identical resolved "
                f"scenarios); list it once")
    if len(keys) == 1 and e1 == e2 and o1 == o2:
        k = keys[0]
        return (f"{where}grid: grid key {k!r}: {p1[k]!r} and {p2[k]!r} give identical resolved scenarios; "
                f"list it once")
    label = lambda p, e, o: ", ".join([f"{k}={v!r}" for k, v in p.items()] + ([policy_label(e)] if e else [])
                                      + ([o] if o else []))
    return (f"{where}grid: runs ({label(p1, e1, o1)}) and ({label(p2, e2, o2)}) are one configuration (identical "
            f"resolved scenarios); change or drop one")


def _column_value(value: Any) -> Any:
    """Grid values become table columns: scalars stay, anything else becomes its JSON text."""
    if isinstance(value, (bool, int, float, str)):
        return value
    return _canon(value)


def _format_errors(source: str, exc: ValidationError) -> str:
    """One line per problem; our own validators already quote the bad value."""
    lines = []
    for err in exc.errors(include_url=False):
        if err.get("type") == "loose_scalar":  # abm.config's strict scalars: a custom type pydantic cannot rebuild
            path = ".".join([*(str(x) for x in err.get("loc", ())), err["ctx"]["key"]])
            lines.append(f"{source}: {path}: {err['ctx']['reason']}")
            continue
        if err.get("type") != "value_error":
            single = ValidationError.from_exception_data(exc.title, [err])
            lines.append(format_validation_error(source, single))
            continue
        path = ".".join(str(x) for x in err.get("loc", ())) or "(top level)"
        lines.append(f"{source}: {path}: {err['msg'].removeprefix('Value error, ')}")
    return "\n".join(dict.fromkeys(lines))


def load_study(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Study:
    """Read, override (``--set`` applies to the study file's own fields) and validate a study."""
    source = Path(path)
    raw = apply_overrides(read_yaml(source), list(overrides))
    return study_from_dict(raw, source)


def study_from_dict(raw: dict[str, Any], source: Path | str = "study") -> Study:
    """Validate a study mapping (``source`` anchors a relative base path and names errors)."""
    source = Path(source)
    try:
        doc = StudyFile.model_validate(raw)
    except ValidationError as exc:
        raise UserError(_format_errors(str(source), exc)) from None
    try:
        _check_labels(doc)
    except UserError as exc:
        raise UserError(f"{source}: {exc}") from None
    base = _read_base(doc.base, source)
    group_bases = _group_bases(doc, source)
    runs = expand(doc, base, str(source), group_bases)
    keys = list(dict.fromkeys(k for _, _, grid, _, _ in _blocks(doc) for k in grid))
    document = json.loads(doc.model_dump_json())
    document["base"] = base
    for name, group in document["groups"].items():  # the manifest inlines every base it read
        if name in group_bases:
            group["base"] = group_bases[name]
        else:
            del group["base"]
    return Study(doc.study.name, doc.study.seed, str(source), document, keys, runs,
                 base_policy_notices(doc, base, str(source)))


def base_policy_notices(doc: StudyFile, base: dict[str, Any], source: str) -> list[str]:
    """One warning per policy entry that names the base scenario's policy but leaves out some of
    the base's non-default parameters: an entry replaces the base's policy whole (nothing is
    merged), so such an entry runs that policy at its defaults for those parameters, which is
    rarely what the author meant (table2.yaml's ``{name: classifier}`` once ran the classifier
    with a burn-in as long as the run)."""
    policy = base.get("policy")
    if not isinstance(policy, dict) or not isinstance(policy.get("name"), str):
        return []
    name = policy["name"]
    try:
        given = registry.validate_params(name, {k: v for k, v in policy.items() if k != "name"}).model_dump(mode="json")
        defaults = registry.validate_params(name, {}).model_dump(mode="json")
    except (UserError, ValueError, TypeError):  # a base policy the entries replace may be invalid
        return []
    changed = {k: v for k, v in given.items() if defaults.get(k) != v}
    notices = []
    for entry in dict.fromkeys(json.dumps(split_label(e)[0], sort_keys=True) for _, _, _, entries, _ in _blocks(doc)
                               for e in entries or []):
        entry = json.loads(entry)
        if entry.get("name") != name:
            continue
        dropped = {k: v for k, v in changed.items() if k not in entry}
        if dropped:
            shown = ", ".join(f"{k}: {json.dumps(v)}" for k, v in dropped.items())
            notices.append(f"{source}: policies: {policy_label(entry)} replaces the base scenario's policy whole, "
                           f"so it runs without the base's {shown} (that is, at {name}'s defaults); "
                           "write them in the entry to keep them")
    return notices
