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
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from abm.errors import UserError

MAX_SEED = 2**63 - 1
# YAML aliases let a few lines expand to billions of values ("billion laughs"); no scenario or
# study needs more than this many, so larger (or self-referencing) documents are refused
MAX_VALUES = 100_000


class Section(BaseModel):
    """Base of every config section: frozen, unknown keys refused, no NaN or infinity."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, validate_default=True)


class EpisodesConfig(Section):
    count: int = Field(200, ge=1, le=1_000_000, description="Number of episodes (checkpoints of one continual trajectory).")
    horizon: float = Field(10.0, gt=0, le=1e6, description="Episode length T in simulated time units.")
    decision_interval: float = Field(0.1, gt=0, le=1e6, description="Time dt between the bank's decision epochs (T/dt epochs per episode).")
    review: Literal["batch", "immediate"] = Field("batch", description="batch: the bank reviews its queue every dt; immediate: decides on arrival.")

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
        from policies import registry  # late: policies import the engine's types

        registry.validate_params(self.name, self.params)
        return self

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class OutputsConfig(Section):
    root: str = Field("outputs", min_length=1, description="Folder under which run folders are created.")
    events: bool = Field(True, description="Write events.parquet (every event: each applicant's history).")


class ScenarioBase(Section):
    """Fields every family shares. Families subclass this and add population/arrivals/dynamics."""

    name: str = Field("scenario", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$",
                      description="Short name used in run-folder names.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Root seed; every random stream of the run is spawned from it.")
    episodes: EpisodesConfig = Field(default_factory=EpisodesConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    objective: str | None = Field(None, description="Learning objective 'perspective:family[:param]' (learning policies).")
    outputs: OutputsConfig = Field(default_factory=OutputsConfig)

    @field_validator("objective")
    @classmethod
    def _objective_form(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from policies import objectives  # late import keeps config free of torch

        objectives.parse(value)
        return value


def _scenario_adapter() -> TypeAdapter:
    from abm.families import scenario_union

    return TypeAdapter(scenario_union())


# ---------------------------------------------------------------------------------------------
# Reading files and applying overrides


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Parse a YAML mapping from ``path`` (safe loader only) or raise a one-line UserError."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: file not found")
    if not p.is_file():
        raise UserError(f"{p}: not a file")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{p}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise UserError(f"{p}: cannot read ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{p}: invalid YAML{where}: {problem}") from None
    if data is None:
        data = {}
    _check_size(data, str(p))
    if not isinstance(data, dict):
        raise UserError(f"{p}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (['a','b','c'], value); the value is parsed as YAML (so 0.1 is a float)."""
    if "=" not in text:
        raise UserError(f"--set {text!r}: expected dotted.path=value")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not key.strip() or any(not part for part in parts):
        raise UserError(f"--set {text!r}: empty field name in {key!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    _check_size(value, f"--set {key.strip()}")
    return parts, value


def _check_size(data: Any, source: str) -> None:
    """Refuse documents that expand (through aliases) to more than MAX_VALUES values; stops
    counting at the limit, so a bomb costs no more than a legitimate document."""
    count, stack = 0, [data]
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise UserError(f"{source}: expands to more than {MAX_VALUES:,} values (YAML aliases "
                            "repeating or containing themselves?)")
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


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
        from abm.families import FAMILY_NAMES

        if loc and loc[0] in FAMILY_NAMES:
            loc = loc[1:]
        path = ".".join(loc) or "(top level)"
        msg = err.get("msg", "invalid")
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
    """Validate a raw mapping into the family's frozen scenario object (UserError on problems)."""
    if "family" not in data:
        data = {**data, "family": "eutopia"}
    from abm.families import FAMILY_NAMES

    family = data.get("family")
    if not isinstance(family, str) or family not in FAMILY_NAMES:
        raise UserError(f"{source}: family: unknown family {family!r} (allowed: {', '.join(FAMILY_NAMES)})")
    try:
        return _scenario_adapter().validate_python(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(source, exc)) from None
    except UserError as exc:  # raised inside validators (policy registry, objectives)
        raise UserError(f"{source}: {exc}") from None


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = (), **fields: Any):
    """Read, override and validate a scenario file. ``fields`` are top-level shortcuts
    (``policy``, ``episodes``, ``seed``) used by the CLI flags; ``None`` values are ignored."""
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
