"""The plugin tables: family name -> module, policy name -> "module:Class", event kinds, and plugins.

Scenario files, ``--policy``, studies and the Python API refer to policies, families and
objectives by name. A built-in policy's name comes from ``POLICIES`` below; a built-in family is
a module of ``abm/families/`` that defines ``Scenario`` (its name is the family's); built-in
objectives are the forms of ``abm.objectives``. Anything else is a *plugin*, resolved only in
these forms (nothing else a user wrote is ever imported):

  policy  ``module:Class`` (a ``policies.base.Policy`` subclass in an importable module), or
          the name of an entry point in the group ``abm.policies`` of an installed package
          (its value ``module:Class``);
  family  a dotted module path ``package.module`` whose module defines ``Scenario`` (a
          ``abm.config.ScenarioBase`` subclass with ``family: Literal["package.module"]``) and
          ``World`` (``abm.world.World``), or the name of an entry point in the group
          ``abm.families`` (its value the module; the Literal is then the entry point's name);
  objective ``module:Class`` (an ``abm.objectives.CustomObjective`` subclass, built with no
          arguments), or the name of an entry point in the group ``abm.objectives``
          (``abm.objectives.is_plugin`` tells a plugin from a built-in form).

The loader is the plugin seam, ``abm.plugins``, which also decides where plugin code may come
from (installed packages; the working directory or a ``--plugins`` folder only with the user's
consent): a name that fails to import is a one-line ``UserError`` naming it (exit 2); so is one
that names something that is not a Policy (checked here) or not a family module (here, naming
its file) or not a CustomObjective (``abm.objectives``). Loaded plugins' source files are part of a run's code fingerprint
(``abm.provenance``, from ``plugin_modules``).

What the rest of abm knows about a family or a policy is declared on its own classes: a
family's ``Scenario`` (``capabilities``, ``units``, ``event_kinds``, ``live_parameters``,
``live_plots``: ``abm.config.ScenarioBase``) and a policy's ``requires`` (``policies.base``).
``abm policies`` lists where each built-in policy applies by reading those two declarations
from the source (``_declared``), so listing imports no policy or family (no torch).

Event kinds: the core's (``CORE_EVENT_KINDS``, ``abm.eventlog.EventKind``) and each family's own,
registered by ``register_event_kinds`` (a built-in's from its ``Scenario.event_kinds`` when the
class is defined; a plugin family may also call it) into ``KIND_NAMES``, the event log's vocabulary.

Modules are imported lazily, when a name is first used, so listing names costs nothing and a
family's or policy's heavy imports (torch) cost only its users; pydantic, numpy and pandas are
imported only by the functions that need them. This module sits in the bottom layer: it imports
``abm.errors``, ``abm.plugins``, ``abm.world``, ``abm.objectives`` and ``policies.base``, all of
that layer; families and policies (above it) are loaded by name, through the plugin seam.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import re
import sys
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any

from abm.errors import UserError
from abm.plugins import entry_points, import_builtin, import_plugin, resolve

ROOT = Path(__file__).resolve().parents[1]  # holds the packages abm and policies


def _builtin_families() -> dict[str, str]:
    """Family name -> module: every module of abm/families/ that defines ``Scenario``, by name."""
    folder = ROOT / "abm" / "families"
    return {path.stem: f"abm.families.{path.stem}" for path in sorted(folder.glob("*.py"))
            if re.search(r"^class Scenario\b", path.read_text(), re.MULTILINE)}


# family name -> module path: the built-ins, then plugin families as they are loaded
FAMILIES: dict[str, str] = _builtin_families()


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
# the core's event kinds (``abm.eventlog.EventKind``, in its order): no family may reuse them
CORE_EVENT_KINDS = ("apply", "approve", "reject", "repay", "default")
# each family's own event kinds, as registered (``register_event_kinds``), in registration order
FAMILY_EVENT_KINDS: dict[str, tuple[str, ...]] = {}
# the event log's vocabulary: core kinds, then each registered family's (codes follow this order);
# ``abm.eventlog.KIND_NAMES`` is this list, extended in place so codes handed out stay valid
KIND_NAMES: list[str] = list(CORE_EVENT_KINDS)
_PLUGIN_FAMILIES: dict[str, Any] = {}  # plugin family name -> its module


def register_event_kinds(family: str, kinds: tuple[str, ...] | list[str]) -> None:
    """Register a family's own event kinds, so that ``abm.eventlog.kind_code(name)`` gives their
    codes and every event log's ``kind`` categories include them. A family declares them as
    ``Scenario.event_kinds`` (registered when the class is defined); a plugin family's module may
    instead call this before it asks for a code (``registry.register_event_kinds(__name__,
    ("audit",))``). A name must be a lower-case identifier, not a core kind and not another
    family's; registering the same names again (a re-imported module) changes nothing. Codes are
    per process: event logs are written with their kinds' names (a categorical), never the codes."""
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
    KIND_NAMES.extend(k for k in kinds if k not in KIND_NAMES)


def _is_family_plugin(name: str) -> bool:
    return "." in name or name in entry_points("family")


def family_module(family: str):
    """The module of a family: a registered one, or a plugin (loaded and registered once)."""
    if family in _PLUGIN_FAMILIES:
        return _PLUGIN_FAMILIES[family]
    if family in FAMILIES and FAMILIES[family] in sys.modules:
        return sys.modules[FAMILIES[family]]
    if tuple.__contains__(FAMILY_NAMES, family):
        return import_builtin(FAMILIES[family], f"family {family!r}")
    if not isinstance(family, str) or not _is_family_plugin(family):
        raise UserError(f"family: unknown family {family!r} (registered: {', '.join(FAMILY_NAMES)}; "
                        f"a plugin family is a module path package.module)")
    return _load_family(family)


def _load_family(name: str):
    for builtin in FAMILY_NAMES:  # first: their event kinds' codes never depend on a plugin's
        family_module(builtin)
    eps = entry_points("family")
    target = eps[name].value if name in eps else name
    module_name = target.split(":")[0]
    what = f"family: unknown family {name!r}"  # every refusal begins so (then ": why"), and names the file
    module = import_plugin(module_name, what, installed=name in eps)
    file = f"file {getattr(module, '__file__', None) or 'unknown'}"
    scenario, world = getattr(module, "Scenario", None), getattr(module, "World", None)
    if not isinstance(scenario, type) or not isinstance(world, type):
        raise UserError(f"{what}: module {module_name!r} is not a family module (it must define Scenario, "
                        f"an abm.config.ScenarioBase subclass, and World, a class; {file})")
    if not any(f"{c.__module__}.{c.__qualname__}" == "abm.config.ScenarioBase" for c in scenario.__mro__):
        raise UserError(f"{what}: module {module_name!r} is not a family module (its Scenario must be an "
                        f"abm.config.ScenarioBase subclass; {file})")
    field = scenario.model_fields.get("family")
    allowed = typing.get_args(field.annotation) if field is not None else ()
    if name not in allowed:
        raise UserError(f"{what}: {module_name}.Scenario must declare family: Literal[{name!r}] "
                        f"(it declares {', '.join(map(repr, allowed)) or 'none'}; {file})")
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


# -- declarations read from the source ------------------------------------------------------------
@lru_cache(maxsize=None)
def _source(module: str) -> ast.Module:
    base = ROOT.joinpath(*module.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    if not path.is_file():
        raise LookupError(module)
    return ast.parse(path.read_text(), str(path))


def _imported(module: str, name: str) -> str | None:
    """What ``name`` is bound to by ``module``'s own imports: ``package.module`` or
    ``package.module:Name`` (None when it is not imported there)."""
    package = module if ROOT.joinpath(*module.split(".")).is_dir() else module.rpartition(".")[0]
    for node in _source(module).body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return alias.name
        elif isinstance(node, ast.ImportFrom):
            anchor = package.split(".")[: len(package.split(".")) - max(node.level - 1, 0)] if node.level else []
            origin = ".".join([*anchor, node.module] if node.module else anchor)
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    submodule = f"{origin}.{alias.name}"
                    is_module = ROOT.joinpath(*submodule.split(".")).with_suffix(".py").is_file()
                    return submodule if is_module else f"{origin}:{alias.name}"
    return None


def _literal(node: ast.expr) -> Any:
    """A literal, or ``frozenset()`` of one, as written; LookupError for anything else."""
    try:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "frozenset" \
                and len(node.args) <= 1 and not node.keywords:
            return frozenset(ast.literal_eval(node.args[0])) if node.args else frozenset()
        return ast.literal_eval(node)
    except ValueError:
        raise LookupError(ast.unparse(node)) from None


_ABSENT = object()  # no class on the way sets the attribute


def _lookup(target: str, attr: str) -> Any:
    """``attr`` as class ``target`` (``module:Class``) or its bases, depth first, set it."""
    module, _, cls = target.partition(":")
    if module.split(".")[0] not in ("abm", "policies"):
        return _ABSENT  # a class outside the project (abc.ABC, pydantic's BaseModel) declares nothing of ours
    node = next((n for n in _source(module).body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    if node is None:  # imported into the module, or a builtin (object, tuple)
        origin = _imported(module, cls)
        if origin is None and hasattr(builtins, cls):
            return _ABSENT
        if origin is None or ":" not in origin:
            raise LookupError(target)
        return _lookup(origin, attr)
    for stmt in node.body:
        name = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else \
            stmt.target if isinstance(stmt, ast.AnnAssign) and stmt.value is not None else None
        if isinstance(name, ast.Name) and name.id == attr:
            return _literal(stmt.value)
    for base in node.bases:
        if isinstance(base, ast.Name):
            origin = _imported(module, base.id) or f"{module}:{base.id}"
        elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
            origin = f"{_imported(module, base.value.id)}:{base.attr}"
        else:
            raise LookupError(ast.unparse(base))
        if ":" not in origin:
            raise LookupError(origin)
        value = _lookup(origin, attr)
        if value is not _ABSENT:
            return value
    return _ABSENT


def _declared(module: str, cls: str, attr: str) -> Any:
    """Class ``module:cls``'s attribute ``attr`` as its source declares it, read without importing
    (or running) anything: a literal (or ``frozenset`` of one) set in the class or, failing that,
    in the first of its bases (followed through the modules' imports) that sets it. LookupError
    when it is not written so (not a literal, a base that cannot be followed)."""
    value = _lookup(f"{module}:{cls}", attr)
    if value is _ABSENT:
        raise LookupError(f"{module}:{cls}.{attr}")
    return value


def _class_attr(module: str, cls: str, attr: str, what: str) -> Any:
    """A built-in class's declaration: from the class when its module is loaded, else from its
    source, else (not written as a literal) from the class, imported."""
    if module not in sys.modules:
        try:
            return _declared(module, cls, attr)
        except (LookupError, SyntaxError):
            pass
    return getattr(getattr(import_builtin(module, what), cls), attr)


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
    "max_util_learned": "policies.baselines:LearnedMaxUtil",
    "ppo": "policies.deep.ppo:PPOLender",
    "dqn": "policies.deep.dqn:DQNLender",
    "lag_ppo": "policies.deep.lag_ppo:LagPPOLender",
    "a_ppo": "policies.deep.a_ppo:APPOLender",
    "elbert_po": "policies.deep.elbert_po:ELBERTLender",
    "bisim_ppo": "policies.deep.bisimulator:BisimPPOLender",
    "bisim_dqn": "policies.deep.bisimulator:BisimDQNLender",
    # ml-fairness-gym's attention baselines for the attention_allocation family (policies/allocation.py)
    "uniform_allocation": "policies.allocation:UniformAllocation",
    "greedy_allocation": "policies.allocation:GreedyAllocation",
    # seed 001 planners on the beta_belief family's exact MDP (policies/fair_mdp/policies.py)
    "fair_lp": "policies.fair_mdp.policies:FairLP",
    "fair_cce": "policies.fair_mdp.policies:FairCCE",
    "optimistic": "policies.fair_mdp.policies:Optimistic",
    "conservative": "policies.fair_mdp.policies:Conservative",
    "race_blind": "policies.fair_mdp.policies:RaceBlind",
    "unconstrained": "policies.fair_mdp.policies:Unconstrained",
    "explore_then_commit": "policies.fair_mdp.policies:ExploreThenCommit",
    # the infectious_disease family's dose-allocation baselines (ml-fairness-gym, A-PPO)
    "most_connected": "policies.infection:MostConnected",
    "uniform_treatment": "policies.infection:UniformTreatment",
}
_PLUGIN_POLICIES: dict[str, type] = {}  # plugin policy name -> its class (resolved or registered)
# every refused policy name begins so, whatever the reason (then ": why")
_UNKNOWN_POLICY = "policy.name: unknown policy {name}"


def _refused(name: str, why: str) -> UserError:
    """A plugin policy name that is refused reads like an unknown name, with the reason."""
    return UserError(f"{_UNKNOWN_POLICY.format(name=repr(name))}: {why}")


def _check_policy_class(obj: Any, name: str, target: str) -> type:
    from policies.base import Policy

    if not (isinstance(obj, type) and issubclass(obj, Policy)):
        got = f"class {obj.__name__}" if isinstance(obj, type) else type(obj).__name__
        raise _refused(name, f"{target} is not a policies.base.Policy subclass (got {got})")
    if inspect.isabstract(obj):
        raise _refused(name, f"{target} is abstract (it must implement _decide)")
    return obj


def _load_policy(name: str) -> type:
    obj, target = resolve("policy", name, _UNKNOWN_POLICY.format(name=repr(name)))
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
        return getattr(import_builtin(module, f"policy {name!r}"), cls)
    if name in _PLUGIN_POLICIES:
        return _PLUGIN_POLICIES[name]
    if isinstance(name, str) and (":" in name or name in entry_points("policy")):
        return _load_policy(name)
    from abm.strict import did_you_mean  # pydantic: not for the light listing

    raise UserError(f"policy.name: unknown policy {name!r}{did_you_mean(name, names())} (registered: "
                    f"{', '.join(names())}; a plugin is module:Class)")


def plugin_modules(policy_name: str | None, family: str | None, objective: str | None = None) -> list[str]:
    """The modules of the plugins a scenario uses (none for built-ins), for the fingerprint:
    its policy's, its family's and its objective's (``scenario.objective``)."""
    from abm import objectives

    found = []
    if policy_name is not None and policy_name not in POLICIES:
        found.append(get(policy_name).__module__)
    if family is not None and not tuple.__contains__(FAMILY_NAMES, family):
        found.append(family_module(family).__name__)
    if objective is not None and objectives.is_plugin(objective):
        found.append(objectives.plugin_class(objective).__module__)
    return sorted(set(found))


def registered_classes(module: str) -> list[type]:
    """Plugin policy and objective classes registered from ``module`` (sources for a module
    without a file)."""
    from abm import objectives

    return [cls for cls in (*_PLUGIN_POLICIES.values(), *objectives.PLUGINS.values()) if cls.__module__ == module]


# -- parameters, building, fit ------------------------------------------------------------------
def validate_params(name: str, params: dict[str, Any]):
    from pydantic import ValidationError

    from abm.strict import did_you_mean, fields_at

    cls = get(name)
    try:
        return cls.Params(**params)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            loc = ".".join(str(x) for x in err.get("loc", ())) or "(params)"
            msg = err.get("msg", "invalid").removeprefix("Value error, ")
            if err.get("type") == "extra_forbidden":  # a misspelled parameter: the closest one
                msg = "unknown parameter of policy " + repr(name) + did_you_mean(loc, fields_at(cls.Params, ()))
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


def family_capabilities(plugins: bool = True) -> dict[str, frozenset[str]]:
    """Each family's ``Scenario.capabilities``: the built-ins' (read without importing one that is
    not loaded yet), then, with ``plugins``, those of the plugin families loaded so far."""
    caps = {name: _class_attr(FAMILIES[name], "Scenario", "capabilities", f"family {name!r}") for name in FAMILY_NAMES}
    if plugins:
        caps.update({name: frozenset(module.Scenario.capabilities) for name, module in _PLUGIN_FAMILIES.items()})
    return caps


def policy_requires(name: str) -> frozenset[str]:
    """A policy's ``requires``; a built-in's is read from its source when its module is not
    loaded (so without torch)."""
    if name not in POLICIES:
        return frozenset(get(name).requires)
    module, cls = POLICIES[name].split(":")
    return frozenset(_class_attr(module, cls, "requires", f"policy {name!r}"))


def families_for(requires: frozenset[str] | set[str], capabilities: dict[str, frozenset[str]] | None = None,
                 ) -> list[str]:
    """The built-in families (and plugin families loaded so far) that provide ``requires`` (of
    ``capabilities``, when already read: ``family_capabilities()``)."""
    return [f for f, caps in (capabilities or family_capabilities()).items() if set(requires) <= caps]


# -- listing (abm policies) ---------------------------------------------------------------------
def listing() -> list[dict[str, Any]]:
    """Every policy name with where it applies, without importing any policy or family: built-ins'
    declarations read from their source, installed plugins from their entry points (families
    unknown until loaded)."""
    rows, capabilities = [], family_capabilities()
    for name in sorted(POLICIES):
        requires = policy_requires(name)
        rows.append({"name": name, "target": POLICIES[name], "source": "built-in",
                     "families": families_for(requires, capabilities), "requires": sorted(requires)})
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
