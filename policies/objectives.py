"""Learning objectives of seed 000: perspectives x families over per-episode group signals.

Per-episode group signals (both in $K per group member, so the two sides share one scale):
  outcome side  s_g = Delta mu_g      change of group g's mean wealth over the episode
  DM side       s_g = r_g / N_g       bank profit earned from group g, per group member
  two_sided(a)  s_g = a * outcome_g + (1 - a) * dm_g     (a = 0: DM, a = 1: outcome)
Families on the vector s (G groups, sizes N_g, mean size Nbar):
  utilitarian      sum_g (N_g / Nbar) s_g   (total, group-blind; = social_welfare when the
                                             groups have equal size, as the seed notes for outcome)
  social_welfare   sum_g s_g
  rawlsian         min_g s_g
  lagrangian(l)    sum_g s_g - l * (max_g s_g - min_g s_g)     (l = 0 -> social_welfare)
String form: ``perspective:family[:param]``, e.g. ``outcome:lagrangian:1.0``,
``two_sided:rawlsian`` (alpha 0.5), ``two_sided(0.3):social_welfare``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from abm.errors import UserError

PERSPECTIVES = ("outcome", "dm", "two_sided")
FAMILIES = ("utilitarian", "social_welfare", "rawlsian", "lagrangian")
FORMS = ("outcome|dm|two_sided[(alpha)] : utilitarian|social_welfare|rawlsian|lagrangian[:lambda]")
_PATTERN = re.compile(r"^\s*(outcome|dm|two_sided)(?:\((?P<alpha>[^)]*)\))?\s*:\s*(\w+)\s*(?::\s*(?P<param>[^:]+))?\s*$")


@dataclass(frozen=True)
class Objective:
    perspective: str
    family: str
    alpha: float = 0.5  # two_sided mixing weight (outcome share)
    lam: float = 1.0  # lagrangian multiplier

    def signals(self, stats: dict) -> np.ndarray:
        """The per-group signal vector s_g of this perspective."""
        sizes = np.asarray(stats["sizes"], dtype=float)
        outcome = np.asarray(stats["mean_wealth_change"], dtype=float)
        dm = np.asarray(stats["profit"], dtype=float) / sizes
        if self.perspective == "outcome":
            return outcome
        if self.perspective == "dm":
            return dm
        return self.alpha * outcome + (1.0 - self.alpha) * dm

    def value(self, stats: dict) -> float:
        s = self.signals(stats)
        sizes = np.asarray(stats["sizes"], dtype=float)
        if self.family == "utilitarian":
            return float(np.sum(sizes / sizes.mean() * s))
        if self.family == "social_welfare":
            return float(np.sum(s))
        if self.family == "rawlsian":
            return float(np.min(s))
        return float(np.sum(s) - self.lam * (np.max(s) - np.min(s)))

    def __str__(self) -> str:
        head = f"two_sided({self.alpha:g})" if self.perspective == "two_sided" else self.perspective
        tail = f":{self.lam:g}" if self.family == "lagrangian" else ""
        return f"{head}:{self.family}{tail}"


def _number(text: str, what: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"objective: {what} must be a number, got {text!r} (forms: {FORMS})") from None
    if not (low <= value <= high) or not np.isfinite(value):
        raise UserError(f"objective: {what} must be in [{low:g}, {high:g}], got {value:g}")
    return value


def parse(text: str) -> Objective:
    """Parse ``perspective:family[:param]`` or raise a UserError naming the allowed forms."""
    if not isinstance(text, str):
        raise UserError(f"objective: expected a string like 'outcome:lagrangian:1.0', got {text!r}")
    m = _PATTERN.match(text)
    if not m:
        raise UserError(f"objective: cannot parse {text!r} (forms: {FORMS})")
    perspective, family = m.group(1), m.group(3)
    if family not in FAMILIES:
        raise UserError(f"objective: unknown family {family!r} (allowed: {', '.join(FAMILIES)})")
    alpha, lam = 0.5, 1.0
    if m.group("alpha") is not None:
        if perspective != "two_sided":
            raise UserError(f"objective: only two_sided takes (alpha), got {text!r}")
        alpha = _number(m.group("alpha"), "two_sided alpha", 0.0, 1.0)
    param = m.group("param")
    if param is not None:
        if family == "lagrangian":
            lam = _number(param, "lagrangian lambda", 0.0, 1e6)
        elif perspective == "two_sided" and m.group("alpha") is None:
            alpha = _number(param, "two_sided alpha", 0.0, 1.0)
        else:
            raise UserError(f"objective: {family} takes no parameter, got {text!r} (forms: {FORMS})")
    return Objective(perspective, family, alpha, lam)
