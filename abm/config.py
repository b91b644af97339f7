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
import re
import types
import typing
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic_core import PydanticCustomError
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_serializer, \
    model_validator

from abm import objectives, registry, safe_yaml
from abm.errors import UserError

MAX_SEED = 2**63 - 1
MAX_APPLICATIONS = 1_000_000  # default episodes.max_applications (abm.engine enforces it)


_EXPONENT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _loose_scalar(annotation: Any, value: Any) -> str | None:
    """Why ``value`` is a surprising spelling of a number or flag for ``annotation`` (pydantic's
    lax mode reads ``true`` as 1, ``"7"`` as 7 and ``1`` as true), or None when it is fine."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None:
            return None
        reasons = [_loose_scalar(a, value) for a in options]
        return None if any(r is None for r in reasons) else reasons[0]
    if origin in (list, tuple) and isinstance(value, (list, tuple)):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        if len(args) == 1 or (origin is tuple and len(set(args)) == 1):
            return next((r for r in (_loose_scalar(args[0], v) for v in value) if r), None)
        return None
    shown = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    if annotation is float and isinstance(value, str) and _EXPONENT.match(value):
        return None  # YAML 1.1 reads 1e6 (no dot) as text; it is a number as written (YAML 1.2)
    if annotation in (int, float) and (isinstance(value, bool) or isinstance(value, str)):
        return f"expected a number, got {shown}"
    if annotation is bool and not isinstance(value, bool):
        return f"expected true or false, got {shown}"
    return None


def refuse_loose_scalars(model: type[BaseModel], data: Any) -> Any:
    """A ``mode="before"`` check: numbers must be numbers and flags true/false, as written in the
    YAML (no ``"7"`` for 7, no ``true`` for 1, no ``1`` for true)."""
    if isinstance(data, dict):
        for name, info in model.model_fields.items():
            key = info.alias or name
            if key in data:
                reason = _loose_scalar(info.annotation, data[key])
                if reason:  # the message's formatter (format_validation_error) adds the key to the path
                    raise PydanticCustomError("loose_scalar", "{key}: {reason}", {"key": key, "reason": reason})
    return data


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
        registry.validate_params(self.name, self.params)
        return self

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class OutputsConfig(Section):
    root: str = Field("outputs", min_length=1, description="Folder under which run folders are created.")
    events: bool = Field(True, description="Write events.parquet (every event: each applicant's history).")


class ScenarioBase(Section):
    """Fields every family shares. Families subclass this and add population/arrivals/dynamics,
    and declare ``capabilities``: what the family provides to policies (``abm.world``); a
    policy whose ``requires`` is not covered is refused when the scenario is validated."""

    capabilities: ClassVar[frozenset[str]] = frozenset()

    name: str = Field("scenario", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$",
                      description="Short name used in run-folder names.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Root seed; every random stream of the run is spawned from it.")
    episodes: EpisodesConfig = Field(default_factory=EpisodesConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    objective: str | None = Field(None, description=(
        "Learning objective 'perspective:family[:param]' (learning policies), or a plugin objective by "
        "'module:Class' (an abm.objectives.CustomObjective subclass) or by its abm.objectives entry point."))
    outputs: OutputsConfig = Field(default_factory=OutputsConfig)

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
    p = Path(path)
    return safe_yaml.load(p, source=str(p), require_mapping=True, allow_aliases=True)


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


def format_validation_error(source: str, exc: ValidationError) -> str:
    """One line per problem: ``source: field.path: bad value -> message``."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = [str(x) for x in err.get("loc", ())]
        # drop the discriminator tag pydantic inserts for unions (e.g. 'eutopia')
        if loc and loc[0] in registry.FAMILY_NAMES:
            loc = loc[1:]
        msg = err.get("msg", "invalid")
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
    if "abm_version" in data:
        data = {k: v for k, v in data.items() if k != "abm_version"}
    if "family" not in data:
        data = {**data, "family": "eutopia"}
    family = data.get("family")
    if not isinstance(family, str) or family not in registry.FAMILY_NAMES:
        raise UserError(f"{source}: family: unknown family {family!r} (allowed: {', '.join(registry.FAMILY_NAMES)})")
    try:
        scenario = _scenario_adapter().validate_python(data)
        registry.check_fits(scenario.policy.name, family, type(scenario).capabilities)
    except ValidationError as exc:
        raise UserError(format_validation_error(source, exc)) from None
    except ValueError as exc:  # the policy does not fit the family
        raise UserError(f"{source}: policy.name: {exc}") from None
    except UserError as exc:  # raised inside validators (policy registry, objectives)
        raise UserError(f"{source}: {exc}") from None
    return scenario


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = (), **fields: Any):
    """Read, override and validate a scenario file, or a run folder's ``scenario.yaml`` (the fully
    resolved scenario of that run, so ``abm run RUN_FOLDER`` computes the run again). ``fields``
    are top-level shortcuts (``policy``, ``episodes``, ``seed``) used by the CLI flags; ``None``
    values are ignored."""
    if Path(path).is_dir():
        if not (Path(path) / "scenario.yaml").is_file():
            raise UserError(f"{path}: a folder without scenario.yaml: give a scenario file or a run folder")
        path = Path(path) / "scenario.yaml"
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


def config_hash(scenario: BaseModel) -> str:
    """Stable short hash of the fully resolved config: the run's identity."""
    blob = json.dumps(scenario_to_dict(scenario), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
