"""The plugin tables: family name -> module, policy name -> "module:Class", event kinds, and plugins.

Scenario files, ``--policy``, studies and the Python API refer to policies, families and
objectives by name. A built-in name comes from the tables below (objectives: the forms of
``abm.objectives``). Anything else is a *plugin*, resolved only in these forms (nothing else a
user wrote is ever imported):

  policy  ``module:Class`` (a ``policies.base.Policy`` subclass in an importable module), or
          the name of an entry point in the group ``abm.policies`` of an installed package
          (its value ``module:Class``);
  family  a dotted module path ``package.module`` whose module defines ``Scenario`` (a
          ``abm.config.ScenarioBase`` subclass with ``family: Literal["package.module"]``) and
          ``World`` (``abm.world.World``), or the name of an entry point in the group
          ``abm.families`` (its value the module; the Literal is then the entry point's name);
  objective ``module:Class`` (an ``abm.objectives.CustomObjective`` subclass, built with no
          arguments), or the name of an entry point in the group ``abm.objectives``; a string whose
          first part is a built-in perspective or whose second a built-in reward family is a
          built-in objective (so ``dm:Foo`` is a bad built-in, never a module ``dm``).

One loader (``_resolve``) serves policies and objectives. A plugin module is imported as any module is (``sys.path``: PYTHONPATH, an installed package);
when it is not found there, the working directory is tried (appended, so it never shadows an
installed package), as ``python -c`` would. A name that fails to import, or names something
that is not a Policy (or not a family module, or not a CustomObjective), is a one-line
``UserError`` naming it (exit 2). Loaded plugins' source files are part of a run's code
fingerprint (``abm.provenance``, from ``plugin_modules``).

A family's own event kinds (beyond the core's apply, approve, reject, repay, default) are
registered here too: the built-ins' in ``FAMILY_EVENT_KINDS``, a plugin family's by
``register_event_kinds`` (called by its module before it asks ``abm.eventlog.kind_code``).

Modules are imported lazily, when a name is first used, so listing names costs nothing and a
family's or policy's heavy imports (torch) cost only its users; pydantic, numpy and pandas are
imported only by the functions that need them. This module sits at the bottom of the layer
order: it imports nothing of the project but ``abm.errors`` and ``abm.world``, so the scenario
schema (``abm.config``) can validate names and parameters without importing a policy or family
module statically; the project modules it needs at run time (``policies.base``, ``abm.config``)
are loaded by name, like every plugin.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import typing
from functools import lru_cache
from typing import Any

from abm.errors import UserError

# family name -> module path; the module defines ``Scenario`` (a ``ScenarioBase`` subclass with
# ``family: Literal[name]`` and ``capabilities``) and ``World`` (``abm.world.World``)
FAMILIES: dict[str, str] = {
    "eutopia": "abm.families.eutopia",
    "credit_score": "abm.families.credit_score",
    "fico": "abm.families.fico",
    "admissions": "abm.families.admissions",
    "beta_belief": "abm.families.beta_belief",
}


class _FamilyNames(tuple):
    """The built-in family names; ``name in FAMILY_NAMES`` is also true of a plugin family
    (``package.module`` or an ``abm.families`` entry point), which it loads and registers. A
    plugin that cannot be loaded raises its one-line ``UserError``."""

    def __contains__(self, name: object) -> bool:
        if tuple.__contains__(self, name) or name in FAMILIES:
            return True
        if not isinstance(name, str) or not _is_family_plugin(name):
            return False
        family_module(name)
        return True


FAMILY_NAMES = _FamilyNames(FAMILIES)
# event kinds a family logs beyond the core's (apply, approve, reject, repay, default); appended to
# the event log's vocabulary in this order (``abm.eventlog.KIND_NAMES``). A plugin family adds its
# own with ``register_event_kinds`` (appended after these, in the order they are registered).
FAMILY_EVENT_KINDS: dict[str, tuple[str, ...]] = {
    "admissions": ("admit", "manipulate", "leave"),
}
# the core's kinds (``abm.eventlog.EventKind``, which this layer cannot import): no family may reuse them
CORE_EVENT_KINDS = ("apply", "approve", "reject", "repay", "default")
# A light mirror of each built-in family's ``Scenario.capabilities``, so ``abm policies`` can show
# where each policy applies without importing a family (tests/test_plugins.py keeps it exact).
FAMILY_CAPABILITIES: dict[str, frozenset[str]] = {
    "eutopia": frozenset({"wealth", "latent_default", "labels", "approval_model", "decision_env"}),
    "credit_score": frozenset({"score_curve", "decision_env"}),
    "fico": frozenset({"score_curve", "decision_env"}),
    "admissions": frozenset({"score_curve", "decision_env"}),
    "beta_belief": frozenset({"loan_mdp"}),
}
ENTRY_POINT_GROUPS = {"policy": "abm.policies", "family": "abm.families", "objective": "abm.objectives"}
# the extra that installs a missing third-party module a built-in policy or family needs
EXTRAS = {"torch": "rl", "stable_baselines3": "rl", "gymnasium": "rl", "nevergrad": "rl", "solara": "dashboard"}
_PLUGIN_FAMILIES: dict[str, Any] = {}  # plugin family name -> its module


def register_event_kinds(family: str, kinds: tuple[str, ...] | list[str]) -> None:
    """Register a (plugin) family's own event kinds, so that ``abm.eventlog.kind_code(name)`` gives
    their codes and every event log's ``kind`` categories include them. Call it in the family's
    module before asking for a code (``registry.register_event_kinds(__name__, ("audit",))``).
    A name must be a lower-case identifier, not a core kind and not another family's; registering
    the same names again (a re-imported module) changes nothing. Codes are per process: event
    logs are written with their kinds' names (a categorical), never with the codes."""
    kinds = tuple(kinds)
    what = f"family {family!r}: event kinds {kinds!r}"
    if not isinstance(family, str) or not family:
        raise UserError(f"{what}: the family must be named (a non-empty string)")
    for name in kinds:
        if not (isinstance(name, str) and name.isidentifier() and name == name.lower()):
            raise UserError(f"{what}: {name!r} is not a lower-case identifier")
        if name in CORE_EVENT_KINDS:
            raise UserError(f"{what}: {name!r} is a core event kind (abm.eventlog.EventKind)")
        owner = next((f for f, names in FAMILY_EVENT_KINDS.items() if name in names and f != family), None)
        if owner is not None:
            raise UserError(f"{what}: {name!r} is already family {owner!r}'s")
    if len(set(kinds)) != len(kinds):
        raise UserError(f"{what}: a kind is listed twice")
    known = FAMILY_EVENT_KINDS.get(family, ())
    FAMILY_EVENT_KINDS[family] = known + tuple(k for k in kinds if k not in known)
    # the event log (core, above this layer) built its vocabulary when it was imported; extend it
    # in place, by name (not an import), so codes handed out earlier stay what they were
    log = sys.modules.get("abm.eventlog")
    vocabulary = getattr(log, "KIND_NAMES", None)
    if isinstance(vocabulary, list):
        vocabulary.extend(k for k in kinds if k not in vocabulary)


def _is_family_plugin(name: str) -> bool:
    return "." in name or name in entry_points("family")


def family_module(family: str):
    """The module of a family: a registered one, or a plugin (loaded and registered once)."""
    if family in _PLUGIN_FAMILIES:
        return _PLUGIN_FAMILIES[family]
    if family in FAMILIES and FAMILIES[family] in sys.modules:
        return sys.modules[FAMILIES[family]]
    if tuple.__contains__(FAMILY_NAMES, family):
        return _import_builtin(FAMILIES[family], f"family {family!r}")
    if not isinstance(family, str) or not _is_family_plugin(family):
        raise UserError(f"family: unknown family {family!r} (registered: {', '.join(FAMILY_NAMES)}; "
                        f"a plugin family is a module path package.module)")
    return _load_family(family)


def _load_family(name: str):
    eps = entry_points("family")
    target = eps[name].value if name in eps else name
    module_name = target.split(":")[0]
    what = f"family: unknown family {name!r}"  # every refusal begins so (then ": why")
    module = _import_plugin(module_name, what)
    scenario, world = getattr(module, "Scenario", None), getattr(module, "World", None)
    base = importlib.import_module("abm.config").ScenarioBase  # by name: abm.config is above this layer
    if not (isinstance(scenario, type) and issubclass(scenario, base)) or not isinstance(world, type):
        raise UserError(f"{what}: module {module_name!r} is not a family module (it must define Scenario, "
                        f"an abm.config.ScenarioBase subclass, and World, a class)")
    field = scenario.model_fields.get("family")
    allowed = typing.get_args(field.annotation) if field is not None else ()
    if name not in allowed:
        raise UserError(f"{what}: {module_name}.Scenario must declare family: Literal[{name!r}] "
                        f"(it declares {', '.join(map(repr, allowed)) or 'none'})")
    _PLUGIN_FAMILIES[name] = module
    FAMILIES[name] = module.__name__
    scenario_union.cache_clear()
    return module


@lru_cache(maxsize=1)
def scenario_union():
    """The pydantic type of any scenario: the families' models (plugins loaded so far included),
    discriminated by ``family``."""
    from typing import Annotated, Union

    from pydantic import Field

    classes = tuple(family_module(name).Scenario for name in FAMILIES)
    if len(classes) == 1:
        return classes[0]
    return Annotated[Union[classes], Field(discriminator="family")]

# name -> "module:Class"; modules are imported lazily (torch only for learning policies)
POLICIES: dict[str, str] = {
    "approve_all": "policies.heuristics:ApproveAll",
    "reject_all": "policies.heuristics:RejectAll",
    "random": "policies.heuristics:RandomApproval",
    "wealth_threshold": "policies.heuristics:WealthThreshold",
    "score_threshold": "policies.heuristics:ScoreThreshold",
    "demographic_parity": "policies.heuristics:DemographicParityQuota",
    "equal_opportunity": "policies.heuristics:EqualOpportunityThresholds",
    "oracle": "policies.oracle:Oracle",
    "one_step": "policies.one_step:OneStepPredictor",
    "rl": "policies.rl:RLLender",
    "perl": "policies.perl:PERLLender",
    # seed-002 / Liu et al. baselines for the score families (credit_score, fico, admissions)
    "max_util": "policies.baselines:MaxUtil",
    "eo_threshold": "policies.baselines:EqualOpportunity",
    "dp_threshold": "policies.baselines:DemographicParity",
    "single_threshold": "policies.baselines:SingleThreshold",
    "classifier": "policies.baselines:Classifier",
    "ppo": "policies.deep.ppo:PPOLender",
    "dqn": "policies.deep.dqn:DQNLender",
    "lag_ppo": "policies.deep.lag_ppo:LagPPOLender",
    "a_ppo": "policies.deep.a_ppo:APPOLender",
    "elbert_po": "policies.deep.elbert_po:ELBERTLender",
    "bisim_ppo": "policies.deep.bisimulator:BisimPPOLender",
    "bisim_dqn": "policies.deep.bisimulator:BisimDQNLender",
    # seed 001 planners on the beta_belief family's exact MDP (policies/fair_mdp/policies.py)
    "fair_lp": "policies.fair_mdp.policies:FairLP",
    "fair_cce": "policies.fair_mdp.policies:FairCCE",
    "optimistic": "policies.fair_mdp.policies:Optimistic",
    "conservative": "policies.fair_mdp.policies:Conservative",
    "race_blind": "policies.fair_mdp.policies:RaceBlind",
    "unconstrained": "policies.fair_mdp.policies:Unconstrained",
    "explore_then_commit": "policies.fair_mdp.policies:ExploreThenCommit",
}
_DEEP = frozenset({"decision_env"})
_SCORE = frozenset({"score_curve"})
_MDP = frozenset({"loan_mdp"})
# A light mirror of each built-in policy's ``requires`` (``abm policies`` lists where each one
# applies without importing it, i.e. without torch; tests/test_plugins.py keeps it exact).
POLICY_REQUIRES: dict[str, frozenset[str]] = {
    "approve_all": frozenset(), "reject_all": frozenset(), "random": frozenset(),
    "wealth_threshold": frozenset({"wealth"}), "score_threshold": frozenset({"wealth"}),
    "demographic_parity": frozenset({"wealth"}), "equal_opportunity": frozenset({"wealth", "labels"}),
    "oracle": frozenset({"latent_default"}), "one_step": frozenset({"wealth"}),
    "rl": frozenset({"approval_model"}), "perl": frozenset({"approval_model"}),
    "max_util": _SCORE, "eo_threshold": _SCORE, "dp_threshold": _SCORE, "single_threshold": _SCORE,
    "classifier": _SCORE,
    "ppo": _DEEP, "dqn": _DEEP, "lag_ppo": _DEEP, "a_ppo": _DEEP, "elbert_po": _DEEP, "bisim_ppo": _DEEP,
    "bisim_dqn": _DEEP,
    "fair_lp": _MDP, "fair_cce": _MDP, "optimistic": _MDP, "conservative": _MDP, "race_blind": _MDP,
    "unconstrained": _MDP, "explore_then_commit": _MDP,
}
_PLUGIN_POLICIES: dict[str, type] = {}  # plugin policy name -> its class (resolved or registered)
_PLUGIN_OBJECTIVES: dict[str, type] = {}  # plugin objective name -> its class (resolved or registered)
# every refused policy (objective) name begins so, whatever the reason (then ": why")
_UNKNOWN_POLICY = "policy.name: unknown policy {name}"
_UNKNOWN_OBJECTIVE = "objective: unknown objective {name}"


# -- entry points and imports -------------------------------------------------------------------
@lru_cache(maxsize=None)
def _entry_points(group: str) -> dict[str, Any]:
    from importlib.metadata import entry_points as found

    return {ep.name: ep for ep in found(group=group)}


def entry_points(kind: str) -> dict[str, Any]:
    """Installed packages' entry points of ``kind`` ('policy', 'family' or 'objective'), by name
    (built-in names win over an entry point of the same name)."""
    return _entry_points(ENTRY_POINT_GROUPS[kind])


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split()) or 'no message'}"


def _import_builtin(module_name: str, what: str):
    """A built-in module; a missing optional dependency names the extra that installs it."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top in EXTRAS:
            raise UserError(f"{what} needs the [{EXTRAS[top]}] extra: pip install 'abm[{EXTRAS[top]}]' "
                            f"(no module named {top!r})") from None
        raise


def _import_plugin(module_name: str, what: str):
    """Import a plugin's module; on failure a one-line UserError naming ``what`` and the module."""
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        raise UserError(f"{what}: {module_name!r} is not a module path")
    try:
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            cwd = os.getcwd()
            missing_self = exc.name is not None and module_name.split(".")[0] == exc.name.split(".")[0]
            if not missing_self or cwd in sys.path or "" in sys.path:
                raise
            sys.path.append(cwd)  # as `python -c` would see it; appended: never shadows a package
            importlib.invalidate_caches()
            return importlib.import_module(module_name)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001  any failure inside a user's module is theirs to fix
        raise UserError(f"{what}: cannot import module {module_name!r} ({_one_line(exc)}); it must be importable "
                        f"(on PYTHONPATH, in the working directory or installed)") from None


def _policy_base() -> type:
    return importlib.import_module("policies.base").Policy  # by name: policies is above this layer


def _refused(name: str, why: str) -> UserError:
    """A plugin policy name that is refused reads like an unknown name, with the reason."""
    return UserError(f"{_UNKNOWN_POLICY.format(name=repr(name))}: {why}")


def _check_policy_class(obj: Any, name: str, target: str) -> type:
    if not (isinstance(obj, type) and issubclass(obj, _policy_base())):
        got = f"class {obj.__name__}" if isinstance(obj, type) else type(obj).__name__
        raise _refused(name, f"{target} is not a policies.base.Policy subclass (got {got})")
    if inspect.isabstract(obj):
        raise _refused(name, f"{target} is abstract (it must implement _decide)")
    return obj


def _resolve(kind: str, name: str, what: str) -> tuple[Any, str]:
    """The object a plugin name refers to, and its ``module:Attr`` target: the name itself, or
    the value of the entry point of that name in ``kind``'s group. Every refusal is one
    ``UserError`` beginning with ``what`` (then ": why")."""
    eps = entry_points(kind)
    target = eps[name].value if ":" not in name and name in eps else name
    module_name, sep, attr = target.partition(":")
    if not sep or not attr:
        raise UserError(f"{what}: expected module:Class, got {target!r}")
    module = _import_plugin(module_name, what)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise UserError(f"{what}: module {module_name!r} has no {attr!r}")
    return obj, target


def _load_policy(name: str) -> type:
    obj, target = _resolve("policy", name, _UNKNOWN_POLICY.format(name=repr(name)))
    cls = _check_policy_class(obj, name, target)
    _PLUGIN_POLICIES[name] = cls
    return cls


def register_policy(cls: type) -> str:
    """Register a Policy subclass given as an object (the Python API's ``policy=MyPolicy``);
    returns its name ``module:QualName``, usable in a scenario like any plugin name. A class
    defined in a notebook or script (``__main__``) runs in this process; a study on Dask
    workers needs it in an importable module."""
    name = f"{cls.__module__}:{cls.__qualname__}" if isinstance(cls, type) else repr(cls)
    _check_policy_class(cls, name, name)
    if "<locals>" in cls.__qualname__:
        raise _refused(name, "a class defined inside a function has no importable name; define it at the top "
                             "level of a module or notebook")
    _PLUGIN_POLICIES[name] = cls
    return name


def is_plugin(name: str) -> bool:
    """Whether a policy name refers to a plugin (not a built-in)."""
    return name not in POLICIES


def names() -> list[str]:
    """Built-in policy names, then installed packages' entry point names (sorted)."""
    return sorted(POLICIES) + sorted(n for n in entry_points("policy") if n not in POLICIES)


def get(name: str) -> type:
    """The class of a policy: a registered name, ``module:Class`` or an entry point's name."""
    if name in POLICIES:
        module, cls = POLICIES[name].split(":")
        return getattr(_import_builtin(module, f"policy {name!r}"), cls)
    if name in _PLUGIN_POLICIES:
        return _PLUGIN_POLICIES[name]
    if isinstance(name, str) and (":" in name or name in entry_points("policy")):
        return _load_policy(name)
    raise UserError(f"policy.name: unknown policy {name!r} (registered: {', '.join(names())}; "
                    f"a plugin is module:Class)")


def plugin_modules(policy_name: str | None, family: str | None, objective: str | None = None) -> list[str]:
    """The modules of the plugins a scenario uses (none for built-ins), for the fingerprint:
    its policy's, its family's and its objective's (``scenario.objective``)."""
    found = []
    if policy_name is not None and policy_name not in POLICIES:
        found.append(get(policy_name).__module__)
    if family is not None and not tuple.__contains__(FAMILY_NAMES, family):
        found.append(family_module(family).__name__)
    if objective is not None and is_objective_plugin(objective):
        found.append(objective_class(objective).__module__)
    return sorted(set(found))


def registered_classes(module: str) -> list[type]:
    """Plugin policy and objective classes registered from ``module`` (sources for a module
    without a file)."""
    return [cls for cls in (*_PLUGIN_POLICIES.values(), *_PLUGIN_OBJECTIVES.values()) if cls.__module__ == module]


# -- objectives ---------------------------------------------------------------------------------
def _objective_base() -> type:
    return importlib.import_module("abm.objectives").CustomObjective  # by name: it parses through here


def is_objective_plugin(text: str) -> bool:
    """Whether an objective string names a plugin rather than a built-in form: ``module:Class``
    whose first part is no built-in perspective and whose second no built-in reward family,
    a registered class's name, or an ``abm.objectives`` entry point's name."""
    if not isinstance(text, str):
        return False
    name = text.strip()
    if name in _PLUGIN_OBJECTIVES:
        return True
    if ":" not in name:
        return bool(name) and name in entry_points("objective")
    builtin = importlib.import_module("abm.objectives")
    head, _, rest = name.partition(":")
    return head.split("(")[0].strip() not in builtin.PERSPECTIVES and \
        rest.split(":")[0].strip() not in builtin.FAMILIES


def _check_objective_class(obj: Any, name: str, target: str) -> type:
    what = _UNKNOWN_OBJECTIVE.format(name=repr(name))
    if not (isinstance(obj, type) and issubclass(obj, _objective_base())):
        got = f"class {obj.__name__}" if isinstance(obj, type) else type(obj).__name__
        raise UserError(f"{what}: {target} is not an abm.objectives.CustomObjective subclass (got {got})")
    if inspect.isabstract(obj):
        raise UserError(f"{what}: {target} is abstract (it must implement reward)")
    return obj


def objective_class(name: str) -> type:
    """The class of a plugin objective: ``module:Class``, a registered class's name or an
    ``abm.objectives`` entry point's name (loaded once, refused in one line)."""
    name = name.strip()
    if name in _PLUGIN_OBJECTIVES:
        return _PLUGIN_OBJECTIVES[name]
    obj, target = _resolve("objective", name, _UNKNOWN_OBJECTIVE.format(name=repr(name)))
    cls = _check_objective_class(obj, name, target)
    _PLUGIN_OBJECTIVES[name] = cls
    return cls


def register_objective(cls: type) -> str:
    """Register a CustomObjective subclass given as an object; returns its name
    ``module:QualName``, usable as a scenario's ``objective`` like any plugin name."""
    name = f"{cls.__module__}:{cls.__qualname__}" if isinstance(cls, type) else repr(cls)
    _check_objective_class(cls, name, name)
    if "<locals>" in cls.__qualname__:
        raise UserError(f"{_UNKNOWN_OBJECTIVE.format(name=repr(name))}: a class defined inside a function has no "
                        f"importable name; define it at the top level of a module or notebook")
    _PLUGIN_OBJECTIVES[name] = cls
    return name


# -- parameters, building, fit ------------------------------------------------------------------
def validate_params(name: str, params: dict[str, Any]):
    from pydantic import ValidationError

    cls = get(name)
    try:
        return cls.Params(**params)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            loc = ".".join(str(x) for x in err.get("loc", ())) or "(params)"
            msg = err.get("msg", "invalid").removeprefix("Value error, ")
            if err.get("type") == "loose_scalar":  # numbers and flags as written (abm.config)
                loc, msg, err = err["ctx"]["key"], err["ctx"]["reason"], {**err, "type": "missing"}
            got = "" if err.get("type") == "missing" else f" (got {err.get('input')!r})"
            problems.append(f"policy.{loc}: {msg}{got}")
        raise UserError("; ".join(problems)) from None


def build(policy_config, context: Any, rng):
    """Instantiate the configured policy for a world's ``context``."""
    cls = get(policy_config.name)
    return cls(validate_params(policy_config.name, policy_config.params), context, rng)


def check_fits(policy_name: str, family: str, capabilities: frozenset[str]) -> None:
    """Refuse a policy that needs what the family does not provide (``Policy.requires`` vs the
    family's ``Scenario.capabilities``), in one line naming both and what is missing."""
    from abm.world import CAPABILITIES

    cls = get(policy_name)
    missing = sorted(set(cls.requires) - set(capabilities))
    if missing:
        hint = f"; use {cls.twin!r} (its counterpart there)" if cls.twin else ""
        needs = "; ".join(CAPABILITIES.get(m, m) for m in missing)
        raise ValueError(f"policy {policy_name!r} does not apply to family {family!r}: it needs {needs}{hint}")


def families_for(requires: frozenset[str] | set[str]) -> list[str]:
    """The built-in families (and plugin families loaded so far) that provide ``requires``."""
    fits = [f for f, caps in FAMILY_CAPABILITIES.items() if set(requires) <= caps]
    fits += [f for f, mod in _PLUGIN_FAMILIES.items() if set(requires) <= set(mod.Scenario.capabilities)]
    return fits


# -- listing (abm policies) ---------------------------------------------------------------------
def listing() -> list[dict[str, Any]]:
    """Every policy name with where it applies, without importing any policy: built-ins from the
    tables above, installed plugins from their entry points (families unknown until loaded)."""
    rows = []
    for name in sorted(POLICIES):
        requires = POLICY_REQUIRES.get(name)
        fams = families_for(requires) if requires is not None else None
        rows.append({"name": name, "target": POLICIES[name], "source": "built-in",
                     "families": fams, "requires": sorted(requires) if requires is not None else None})
    for name, ep in sorted(entry_points("policy").items()):
        if name not in POLICIES:
            rows.append({"name": name, "target": ep.value, "source": f"plugin: {ep.dist.name if ep.dist else '?'}",
                         "families": None, "requires": None})
    return rows


_BOUNDS = {"Ge": (">=", "ge"), "Gt": (">", "gt"), "Le": ("<=", "le"), "Lt": ("<", "lt"),
           "MinLen": ("length >=", "min_length"), "MaxLen": ("length <=", "max_length")}


def _constraint(meta: Any) -> str:
    """``Ge(ge=0)`` -> ``>= 0`` (pydantic's field constraints, for ``abm policies NAME``)."""
    op, attr = _BOUNDS.get(type(meta).__name__, (None, None))
    return f"{op} {getattr(meta, attr)!r}" if op is not None and hasattr(meta, attr) else str(meta)


def details(name: str) -> dict[str, Any]:
    """One policy in detail (imports it): its documentation, parameters, needs and families."""
    cls = get(name)
    doc = inspect.cleandoc(cls.__doc__ or "")
    params = []
    for field, info in cls.Params.model_fields.items():
        constraints = [_constraint(m) for m in info.metadata]
        annotation = getattr(info.annotation, "__name__", None) or str(info.annotation).replace("typing.", "")
        default = "(required)" if info.is_required() else info.get_default(call_default_factory=True)
        params.append({"name": field, "type": annotation, "default": default,
                       "constraints": constraints, "description": info.description or ""})
    target = POLICIES.get(name) or f"{cls.__module__}:{cls.__qualname__}"
    return {"name": name, "target": target, "doc": doc, "params": params, "requires": sorted(cls.requires),
            "families": families_for(cls.requires), "privileged": list(cls.privileged), "twin": cls.twin,
            "saves": bool(cls.saves), "source": "built-in" if name in POLICIES else "plugin"}


def describe() -> list[dict[str, Any]]:
    """Every registered policy with its documented parameters (imports every policy)."""
    rows = []
    for name in names():
        cls = get(name)
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        params = []
        for field, info in cls.Params.model_fields.items():
            params.append({"name": field, "default": info.default, "description": info.description or ""})
        rows.append({"name": name, "doc": doc, "params": params, "privileged": list(cls.privileged)})
    return rows
