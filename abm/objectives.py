"""Learning objectives of seed 000: fairness perspectives x reward families -> per-episode reward.

Group statistics (from ``World.episode_stats()``), both in $K per group member so that the two
sides share one scale (a dollar of a member's wealth weighs as much as a dollar the bank earns
per member):
  outcome side   mu_g   group g's mean wealth (a level; the seed's mu_t^g)
  DM side        r_g    bank profit earned from group g in the episode, divided by N_g (a flow)
Families F on a per-group vector s (G groups, sizes N_g, mean size Nbar):
  utilitarian      sum_g (N_g / Nbar) s_g    group-blind total (outcome: total wealth / Nbar,
                                             = social_welfare when the groups have equal size)
  social_welfare   sum_g s_g                 (DM: = utilitarian when the groups have equal size)
  rawlsian         min_g s_g
  lagrangian(l)    sum_g s_g - l * (max_g s_g - min_g s_g)     (l = 0 -> social_welfare;
                                             two groups and l = 1 -> 2 * rawlsian)
Per-episode reward (what a learner maximises each episode):
  outcome         F(mu_end) - F(mu_start)    the change over the episode of the level objective,
                                             so episode rewards telescope to F(mu_T) - F(mu_0);
                                             for the linear families this is F(Delta mu)
  dm              F(r)                       the episode's profit flow
  two_sided(a)    a * outcome + (1 - a) * dm (a = 0: DM, a = 1: outcome)
String form: ``perspective:family[:param]``, e.g. ``outcome:lagrangian:1.0``,
``two_sided:rawlsian`` (alpha 0.5), ``two_sided(0.3):social_welfare``,
``two_sided:social_welfare:0.3`` (alpha), ``two_sided(0.3):lagrangian:2``. See docs/MODEL.md,
"Learning objectives".

Your own objective (a plugin): a ``CustomObjective`` subclass implementing ``reward(stats)``,
named ``module:Class`` (or by an entry point of the group ``abm.objectives``) wherever an
objective string goes. ``parse`` builds it with no arguments; it is loaded by the plugin seam
(``abm.plugins``), checked and remembered here (``plugin_class``, ``register``), and fingerprinted
as a policy plugin is (``abm.registry.plugin_modules``).
"""

from __future__ import annotations

import inspect
import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from abm import plugins
from abm.errors import UserError

PERSPECTIVES = ("outcome", "dm", "two_sided")
FAMILIES = ("utilitarian", "social_welfare", "rawlsian", "lagrangian")
FORMS = ("outcome|dm|two_sided[(alpha)] : utilitarian|social_welfare|rawlsian|lagrangian[:lambda], "
         "or a plugin module:Class")
DEFAULT_ALPHA = 0.5
DEFAULT_LAMBDA = 1.0
_UNKNOWN = "objective: unknown objective {name}"  # every refused plugin name begins so (then ": why")
PLUGINS: dict[str, type] = {}  # plugin objective name -> its class (resolved or registered)
_PATTERN = re.compile(r"^\s*(?P<perspective>\w+)\s*(?:\((?P<alpha>[^)]*)\))?\s*:\s*(?P<family>\w+)\s*"
                      r"(?::\s*(?P<param>[^:]+?))?\s*$")


def family_value(family: str, s: np.ndarray, sizes: np.ndarray, lam: float = DEFAULT_LAMBDA) -> float:
    """F(s) for one reward family on a per-group vector ``s``."""
    s = np.asarray(s, dtype=float)
    sizes = np.asarray(sizes, dtype=float)
    if family == "utilitarian":
        return float(np.sum(sizes / sizes.mean() * s))
    if family == "social_welfare":
        return float(np.sum(s))
    if family == "rawlsian":
        return float(np.min(s))
    if family == "lagrangian":
        return float(np.sum(s) - lam * (np.max(s) - np.min(s)))
    raise UserError(f"objective: unknown family {family!r} (forms: {FORMS})")


@dataclass(frozen=True)
class Objective:
    perspective: str
    family: str
    alpha: float = DEFAULT_ALPHA  # two_sided: weight of the outcome side
    lam: float = DEFAULT_LAMBDA  # lagrangian multiplier

    def outcome_reward(self, stats: dict) -> float:
        sizes = np.asarray(stats["sizes"], dtype=float)
        end = np.asarray(stats["mean_wealth"], dtype=float)
        start = end - np.asarray(stats["mean_wealth_change"], dtype=float)
        return family_value(self.family, end, sizes, self.lam) - family_value(self.family, start, sizes, self.lam)

    def dm_reward(self, stats: dict) -> float:
        sizes = np.asarray(stats["sizes"], dtype=float)
        return family_value(self.family, np.asarray(stats["profit"], dtype=float) / sizes, sizes, self.lam)

    def value(self, stats: dict) -> float:
        """The episode's reward under this objective."""
        if self.perspective == "outcome":
            return self.outcome_reward(stats)
        if self.perspective == "dm":
            return self.dm_reward(stats)
        return self.alpha * self.outcome_reward(stats) + (1.0 - self.alpha) * self.dm_reward(stats)

    def __str__(self) -> str:
        head = f"two_sided({self.alpha:g})" if self.perspective == "two_sided" else self.perspective
        tail = f":{self.lam:g}" if self.family == "lagrangian" else ""
        return f"{head}:{self.family}{tail}"


class CustomObjective(ABC):
    """Base of your own objective: implement ``reward(stats)``, the episode's reward from the
    world's ``episode_stats()`` (per-group numpy arrays ``sizes``, ``mean_wealth``,
    ``mean_wealth_change`` (not in beta_belief), ``profit``, ``applications``, ``approvals``;
    ``groups``, ``episode``; a family's extras). Name it ``module:Class`` in a scenario's
    ``objective`` (``--objective``, a study's ``objectives``); it is built with no arguments, so
    a parameter is a class attribute (a subclass per setting). A learning policy calls
    ``value(stats)``, which checks that the reward is a finite number."""

    #: the name it was given (``module:Class``), set by ``parse``; ``str(objective)`` is it
    name: str = ""

    @abstractmethod
    def reward(self, stats: dict[str, Any]) -> float:
        """The reward of the episode just ended (what a learner maximises each episode)."""

    def value(self, stats: dict[str, Any]) -> float:
        """The episode's reward under this objective (``reward``, checked)."""
        got = self.reward(stats)
        try:
            value = float(got)
        except (TypeError, ValueError):
            raise UserError(f"objective {self}: reward() returned {type(got).__name__} {got!r:.60}, "
                            f"not a number") from None
        if not math.isfinite(value):
            raise UserError(f"objective {self}: reward() returned {value} (it must be a finite number)")
        return value

    def __str__(self) -> str:
        return self.name or f"{type(self).__module__}:{type(self).__qualname__}"


def is_plugin(text: str) -> bool:
    """Whether an objective string names a plugin rather than a built-in form: ``module:Class``
    whose first part is no built-in perspective and whose second no built-in reward family (so
    ``dm:Foo`` is a bad built-in, never a module ``dm``), a registered class's name, or an
    ``abm.objectives`` entry point's name."""
    if not isinstance(text, str):
        return False
    name = text.strip()
    if name in PLUGINS:
        return True
    if ":" not in name:
        return bool(name) and name in plugins.entry_points("objective")
    head, _, rest = name.partition(":")
    return head.split("(")[0].strip() not in PERSPECTIVES and rest.split(":")[0].strip() not in FAMILIES


def _check_class(obj: Any, name: str, target: str) -> type:
    what = _UNKNOWN.format(name=repr(name))
    if not (isinstance(obj, type) and issubclass(obj, CustomObjective)):
        got = f"class {obj.__name__}" if isinstance(obj, type) else type(obj).__name__
        raise UserError(f"{what}: {target} is not an abm.objectives.CustomObjective subclass (got {got})")
    if inspect.isabstract(obj):
        raise UserError(f"{what}: {target} is abstract (it must implement reward)")
    return obj


def plugin_class(name: str) -> type:
    """The class of a plugin objective: ``module:Class``, a registered class's name or an
    ``abm.objectives`` entry point's name (loaded once, refused in one line)."""
    name = name.strip()
    if name in PLUGINS:
        return PLUGINS[name]
    obj, target = plugins.resolve("objective", name, _UNKNOWN.format(name=repr(name)))
    PLUGINS[name] = _check_class(obj, name, target)
    return PLUGINS[name]


def register(cls: type) -> str:
    """Register a CustomObjective subclass given as an object; returns its name
    ``module:QualName``, usable as a scenario's ``objective`` like any plugin name."""
    name = f"{cls.__module__}:{cls.__qualname__}" if isinstance(cls, type) else repr(cls)
    _check_class(cls, name, name)
    if "<locals>" in cls.__qualname__:
        raise UserError(f"{_UNKNOWN.format(name=repr(name))}: a class defined inside a function has no "
                        f"importable name; define it at the top level of a module or notebook")
    PLUGINS[name] = cls
    return name


def _plugin(name: str) -> CustomObjective:
    cls = plugin_class(name)
    try:
        objective = cls()
    except Exception as exc:  # noqa: BLE001  the user's constructor: theirs to fix, in one line
        why = " ".join(str(exc).split()) or "no message"
        raise UserError(f"objective: unknown objective {name!r}: {cls.__qualname__}() failed "
                        f"({type(exc).__name__}: {why}); it is built with no arguments") from None
    objective.name = name
    return objective


def _number(text: str, what: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"objective: {what} must be a number, got {text.strip()!r} (forms: {FORMS})") from None
    if not np.isfinite(value) or not (low <= value <= high):
        raise UserError(f"objective: {what} must be in [{low:g}, {high:g}], got {text.strip()} (forms: {FORMS})")
    return value


def parse(text: str) -> Objective | CustomObjective:
    """Parse ``perspective:family[:param]``, or build the plugin objective ``module:Class``; or
    raise a UserError naming the allowed forms (a plugin: naming why it was refused)."""
    if not isinstance(text, str):
        raise UserError(f"objective: expected a string like 'outcome:lagrangian:1.0', got {text!r} (forms: {FORMS})")
    if is_plugin(text):
        return _plugin(text.strip())
    m = _PATTERN.match(text)
    if not m:
        raise UserError(f"objective: cannot parse {text!r} (forms: {FORMS})")
    perspective, family = m.group("perspective"), m.group("family")
    if perspective not in PERSPECTIVES:
        raise UserError(f"objective: unknown perspective {perspective!r} in {text!r} (forms: {FORMS})")
    if family not in FAMILIES:
        raise UserError(f"objective: unknown family {family!r} in {text!r} (forms: {FORMS})")
    alpha, lam = DEFAULT_ALPHA, DEFAULT_LAMBDA
    if m.group("alpha") is not None:
        if perspective != "two_sided":
            raise UserError(f"objective: only two_sided takes (alpha), got {text!r} (forms: {FORMS})")
        alpha = _number(m.group("alpha"), "two_sided alpha", 0.0, 1.0)
    param = m.group("param")
    if param is not None:
        if family == "lagrangian":
            lam = _number(param, "lagrangian lambda", 0.0, 1e6)
        elif perspective == "two_sided" and m.group("alpha") is None:
            alpha = _number(param, "two_sided alpha", 0.0, 1.0)
        else:
            raise UserError(f"objective: {perspective}:{family} takes no parameter, got {text!r} (forms: {FORMS})")
    return Objective(perspective, family, alpha, lam)
