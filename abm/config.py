"""Scenario files -> validated, frozen config objects (pydantic v2), and ``--set`` overrides.

Every section forbids unknown keys; every field has a description (it is the documentation a
user sees). Families (``abm.families``) contribute their own top-level model, selected by the
``family`` discriminator. Errors become one line per problem naming the file, the field path,
the bad value and what is allowed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import typing
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_serializer, \
    model_validator

from abm import objectives, registry, safe_yaml
from abm.errors import UserError, read_user_file
from abm.strict import did_you_mean, fields_at, refuse_loose_scalars

MAX_SEED = 2**63 - 1
MAX_APPLICATIONS = 1_000_000  # default episodes.max_applications (abm.engine enforces it)


class Section(BaseModel):
    """Base of every config section: frozen, unknown keys refused, no NaN or infinity, numbers
    and flags as written (``refuse_loose_scalars``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, validate_default=True)

    @model_validator(mode="before")
    @classmethod
    def _as_written(cls, data: Any) -> Any:
        return refuse_loose_scalars(cls, data)


class EpisodesConfig(Section):
    count: int = Field(200, ge=1, le=1_000_000, description="Number of episodes (checkpoints of one continual trajectory).")
    horizon: float = Field(10.0, gt=0, le=1e6, description="Episode length T in simulated time units.")
    decision_interval: float = Field(0.1, gt=0, le=1e6, description="Time dt between the bank's decision epochs (T/dt epochs per episode).")
    review: Literal["batch", "immediate"] = Field("batch", description="batch: the bank reviews its queue every dt; immediate: decides on arrival.")
    max_applications: int = Field(MAX_APPLICATIONS, ge=1, le=10**12, description=(
        "Application budget per episode: a run whose episode receives more applications stops with an "
        "error (a runaway arrival process); raise it for a run that really needs more."))

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        """The budget is left out of the dump (so of the config hash, scenario.yaml and run
        names) while it has its default: adding it changed no existing run's identity."""
        data = handler(self)
        if isinstance(data, dict) and self.max_applications == MAX_APPLICATIONS:
            data.pop("max_applications", None)
        return data

    @model_validator(mode="after")
    def _epochs_fit(self) -> "EpisodesConfig":
        ratio = self.horizon / self.decision_interval
        if self.review == "batch" and (abs(ratio - round(ratio)) > 1e-9 * max(1.0, ratio) or round(ratio) < 1):
            raise ValueError(f"horizon/decision_interval must be a whole number >= 1, got {ratio:g}")
        if self.review == "batch" and round(ratio) > 1_000_000:
            raise ValueError(f"more than 1,000,000 decision epochs per episode ({ratio:g})")
        return self

    @property
    def epochs_per_episode(self) -> int:
        return int(round(self.horizon / self.decision_interval))


class PolicyConfig(BaseModel):
    """The bank's decision module: a registered policy name plus its parameters (flat keys).

    Parameters are checked against the policy's own parameter model from the registry.
    """

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)
    name: str = Field("approve_all", description="Registered policy name (see `abm policies`).")

    @model_validator(mode="after")
    def _known_policy(self) -> "PolicyConfig":
        params = registry.validate_params(self.name, self.params)
        for name in getattr(params, "legacy_omitted", {}):  # a default that changed: written out
            self.__pydantic_extra__.setdefault(name, getattr(params, name))
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler, info):
        return legacy_omitted(handler(self), getattr(registry.get(self.name).Params, "legacy_omitted", {}), info)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class OutputsConfig(Section):
    root: str = Field("outputs", min_length=1, description="Folder under which run folders are created.")
    events: bool = Field(True, description="Write events.parquet (every event: each applicant's history).")


#: the columns of episodes.parquet every run has (the engine's, before its world's metrics)
ENGINE_METRICS: dict[str, tuple[str, str]] = {
    "episode": ("", "Episode number, counted from 0."),
    "time": ("time units", "Simulation clock at the episode's end: (episode + 1) x episodes.horizon."),
}


class ScenarioBase(Section):
    """Fields every family shares. A family's ``Scenario`` subclasses this, adds its own sections
    and declares what the rest of abm reads about the family (a plugin family that declares
    nothing gets these defaults):

    capabilities     what it provides to policies (``abm.world.CAPABILITIES``); a policy whose
                     ``requires`` is not covered is refused when the scenario is validated
    state            the name of the per-applicant state its run files carry (the engine's one seam:
                     events' ``<state>_after``, agents' ``initial_<state>``/``final_<state>``):
                     ``wealth`` (Eutopia), ``score`` (the credit families), ``budget``, ``belief``
    units            what that state is and the unit of its money (the report's axes)
    event_kinds      its own event kinds beyond the core's, registered when the class is defined
                     (before its world asks ``abm.eventlog.kind_code`` for their codes)
    live_parameters  the live view's sidebar: (dotted scenario path, label, min, max, step)
    live_plots       the metric each of the live view's plots starts on
    metric_definitions  each column its world writes to episodes.parquet: name (``{g}`` stands for
                     each group's name) -> (unit, one-line definition); ``{money}``, ``{wealth}``,
                     ``{wealth_unit}`` or ``{score}`` in a unit is the family's ``units`` entry.
                     docs/metrics.md is generated from them (with ``ENGINE_METRICS``, the columns
                     every run has), and a test checks every column a run writes has one.
    observation_definitions  observation field (the world's ``obs_fields``) -> one-line definition
    benchmark        (reward, fairness gap): the two metric columns a study across environments
                     reports for it (``abm.reports.benchmark``)
    """

    capabilities: ClassVar[frozenset[str]] = frozenset()
    state: ClassVar[str] = "wealth"
    units: ClassVar[dict[str, str]] = {"wealth": "wealth", "wealth_unit": "units", "money": "units",
                                       "score": "wealth or score"}
    event_kinds: ClassVar[tuple[str, ...]] = ()
    live_parameters: ClassVar[tuple[tuple[str, str, float, float, float], ...]] = ()
    live_plots: ClassVar[tuple[str, ...]] = ("mean_wealth", "wealth_gap", "cumulative_profit", "reach")
    metric_definitions: ClassVar[dict[str, tuple[str, str]]] = {}
    observation_definitions: ClassVar[dict[str, str]] = {}
    benchmark: ClassVar[tuple[str, str]] = ("return", "recall_gap")

    name: str = Field("scenario", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$",
                      description="Short name used in run-folder names.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Root seed; every random stream of the run is spawned from it.")
    episodes: EpisodesConfig = Field(default_factory=EpisodesConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    objective: str | None = Field(None, description=(
        "Learning objective 'perspective:family[:param]' (learning policies), or a plugin objective by "
        "'module:Class' (an abm.objectives.CustomObjective subclass) or by its abm.objectives entry point."))
    outputs: OutputsConfig = Field(default_factory=OutputsConfig)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if not (isinstance(cls.state, str) and cls.state.isidentifier() and cls.state == cls.state.lower()):
            raise UserError(f"{cls.__module__}.{cls.__name__}.state: {cls.state!r} is not a lower-case identifier "
                            "(it names the run files' columns: <state>_after, initial_<state>)")
        field = cls.model_fields.get("family")
        if cls.__dict__.get("event_kinds") and field is not None:  # its own, not a base family's
            for name in typing.get_args(field.annotation):
                registry.register_event_kinds(name, cls.event_kinds)

    @classmethod
    def as_recorded(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A run folder's scenario.yaml as the run computed it: a field whose default changed since
        is written out in full by today's folders, so one that is absent meant the old default (a
        family fills those in; none by default)."""
        return data

    @field_validator("objective")
    @classmethod
    def _objective_form(cls, value: str | None) -> str | None:
        if value is None:
            return value
        objectives.parse(value)
        return value


_ADAPTER: list = [None, None]  # (the union it was built for, its TypeAdapter)


def _scenario_adapter() -> TypeAdapter:
    """The TypeAdapter of the scenario union, built once per union (building it was ~75% of a
    study configuration's validation); a plugin family loaded later makes a new union."""
    union = registry.scenario_union()
    if _ADAPTER[0] is not union:
        _ADAPTER[:] = [union, TypeAdapter(union)]
    return _ADAPTER[1]


# ---------------------------------------------------------------------------------------------
# Reading files and applying overrides


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Parse a YAML mapping from ``path`` with the one bounded loader (``abm.safe_yaml``: size,
    depth, duplicate keys, huge integers, NUL, tags; an empty file is refused) or raise a
    one-line UserError naming the file."""
    path = Path(path)
    data = read_user_file(path, limit=safe_yaml.MAX_BYTES)  # a regular file, its size checked before reading
    return safe_yaml.load(data, source=str(path), require_mapping=True, allow_aliases=True)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (['a','b','c'], value); the value is parsed as YAML (so 0.1 is a float)."""
    if "=" not in text:
        raise UserError(f"--set {text!r}: expected dotted.path=value")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not key.strip() or any(not part for part in parts):
        raise UserError(f"--set {text!r}: empty field name in {key!r}")
    return parts, safe_yaml.load_override_value(raw, field=key.strip(), allow_aliases=True)


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Return a copy of ``data`` with each ``dotted.path=value`` set (sections created as needed)."""
    out = copy.deepcopy(data)
    for text in overrides:
        parts, value = parse_override(text)
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise UserError(f"--set {text!r}: {'.'.join(parts[:i + 1])} is a value, not a section")
            node = child
        node[parts[-1]] = value
    return out


def format_validation_error(source: str, exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line per problem: ``source: field.path: bad value -> message``; an unknown key of
    ``model`` (the validated class) gets a "did you mean" for the closest known one."""
    lines = []
    for err in exc.errors(include_url=False):
        raw = tuple(err.get("loc", ()))
        # drop the discriminator tag pydantic inserts for unions (e.g. 'eutopia')
        if raw and raw[0] in registry.FAMILY_NAMES:
            raw = raw[1:]
        loc: list[str] = []
        for part in raw:  # a list index joins its list: groups[0] (0-based, as everywhere)
            if isinstance(part, int) and loc:
                loc[-1] += f"[{part}]"
            else:
                loc.append(str(part))
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden" and model is not None:
            msg = "unknown field" + did_you_mean(raw[-1], fields_at(model, raw[:-1]))
        if err.get("type") == "loose_scalar":  # raised for the whole section: name the field
            loc, msg = [*loc, err["ctx"]["key"]], err["ctx"]["reason"]
        path = ".".join(loc) or "(top level)"
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        value = err.get("input")
        shown = "" if isinstance(value, dict) or err.get("type") == "missing" else f" (got {_short(value)})"
        lines.append(f"{source}: {path}: {msg}{shown}")
    return "\n".join(dict.fromkeys(lines))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validate_scenario_dict(data: dict[str, Any], source: str = "scenario"):
    """Validate a raw mapping into the family's frozen scenario object (UserError on problems).
    A top-level ``abm_version`` (a run folder's scenario.yaml records the version that wrote it:
    provenance, not a setting) is left out."""
    recorded = "abm_version" in data
    if recorded:
        data = {k: v for k, v in data.items() if k != "abm_version"}
    if "family" not in data:
        data = {**data, "family": "eutopia"}
    family = data.get("family")
    if not isinstance(family, str) or family not in registry.FAMILY_NAMES:
        raise UserError(f"{source}: family: unknown family {family!r}{did_you_mean(family, registry.FAMILY_NAMES)} "
                        f"(allowed: {', '.join(registry.FAMILY_NAMES)})")
    module = registry.family_module(family)
    if not issubclass(module.Scenario, ScenarioBase):
        raise UserError(f"{source}: family: unknown family {family!r}: module {module.__name__!r} is not a family "
                        f"module (its Scenario must be an abm.config.ScenarioBase subclass)")
    if recorded:
        data = module.Scenario.as_recorded(data)
    try:
        scenario = _scenario_adapter().validate_python(data)
        registry.check_fits(scenario.policy.name, family, type(scenario).capabilities)
    except ValidationError as exc:
        raise UserError(format_validation_error(source, exc, module.Scenario)) from None
    except ValueError as exc:  # the policy does not fit the family
        raise UserError(f"{source}: policy.name: {exc}") from None
    except UserError as exc:  # raised inside validators (policy registry, objectives)
        raise UserError(f"{source}: {exc}") from None
    return scenario


def scenario_file(path: str | Path) -> Path:
    """``path`` itself, or a run folder's ``scenario.yaml`` (a folder without one: a one-line UserError)."""
    path = Path(path)
    if path.is_dir():
        if not (path / "scenario.yaml").is_file():
            raise UserError(f"{path}: a folder without scenario.yaml: give a scenario file or a run folder")
        return path / "scenario.yaml"
    return path


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = (), **fields: Any):
    """Read, override and validate a scenario file, or a run folder's ``scenario.yaml`` (the fully
    resolved scenario of that run, so ``abm run RUN_FOLDER`` computes the run again). ``fields``
    are top-level shortcuts (``policy``, ``episodes``, ``seed``) used by the CLI flags; ``None``
    values are ignored."""
    path = scenario_file(path)
    data = read_yaml(path)
    extra = []
    if fields.get("seed") is not None:
        extra.append(f"seed={int(fields['seed'])}")
    if fields.get("episodes") is not None:
        extra.append(f"episodes.count={int(fields['episodes'])}")
    if fields.get("objective") is not None:
        extra.append(f"objective={json.dumps(fields['objective'])}")
    if fields.get("policy") is not None:  # before the overrides: `--policy X --set policy.k=v` keeps k
        policy = data.get("policy")
        same = isinstance(policy, dict) and policy.get("name") == fields["policy"]
        data["policy"] = dict(policy) if same else {"name": fields["policy"]}
    data = apply_overrides(data, extra + list(overrides))
    return validate_scenario_dict(data, str(path))


def scenario_to_dict(scenario: BaseModel) -> dict[str, Any]:
    """The fully resolved scenario as plain data (policy parameters flattened into ``policy``)."""
    return json.loads(scenario.model_dump_json())


#: the serialisation context of a run's identity: a field whose default changed after runs were made
#: leaves it at its old default (``legacy_omitted``), so an old run folder's id keeps meaning what it computed
RUN_ID = {"run_id": True}


def legacy_omitted(data: dict[str, Any], legacy: dict[str, Any], info) -> dict[str, Any]:
    """``data`` (a dump) without the ``legacy`` fields that hold their old defaults, when it is a run id's."""
    if not (info.context or {}).get("run_id"):
        return data
    return {k: v for k, v in data.items() if k not in legacy or v != legacy[k]}


def config_hash(scenario: BaseModel) -> str:
    """Stable short hash of the fully resolved config: the run's identity."""
    data = json.loads(scenario.model_dump_json(context=RUN_ID))
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
