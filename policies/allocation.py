"""Allocation baselines of the budgeted families (attention_allocation): ml-fairness-gym's uniform
and greedy attention agents, stated as a target allocation per step.

Each step a policy fixes how many units each site should get (``target``) and approves an offer
of one more unit at site s while ``placed_here < target[s]``. The family offers every site once
per round until the budget is spent, so the target is met whenever it sums to the budget.

* ``uniform_allocation``: the budget split evenly, the remainder to the sites first in the step's
  offer order (it rotates with the step), so over steps every site gets the same share;
* ``greedy_allocation``: ml-fairness-gym's ``MLEGreedyAgent`` with ``alpha = 1`` (no fairness
  constraint, pocar's "Purely Greedy" baseline): each unit goes where it most likely discovers
  one more incident, ``P(C_s >= a_s + 1)`` for ``C_s ~ Poisson(lambda_s)``; lambda_s is the mean
  of the site's observed incident counts over the last ``window`` steps (ml-fairness-gym fits a
  censored Poisson to the discovered counts; the occurred counts pocar's agents observe need no
  censoring), uniform for the first ``burn_steps`` steps, and with probability ``epsilon`` a
  step's allocation is drawn at random (ml-fairness-gym's exploration). See docs/MODEL.md.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np
from pydantic import Field

from abm.errors import UserError
from policies.base import NoParams, Policy


def even_split(units: int, n_sites: int, first: int) -> np.ndarray:
    """``units`` split over ``n_sites`` as evenly as whole units allow, the remainder going to the
    sites ``first``, ``first + 1``, ... (mod ``n_sites``)."""
    target = np.full(n_sites, units // n_sites, dtype=np.int64)
    target[(first + np.arange(units % n_sites)) % n_sites] += 1
    return target


def greedy_split(units: int, rates: np.ndarray) -> np.ndarray:
    """The allocation maximising the expected discoveries sum_s E[min(C_s, a_s)], C_s ~ Poisson(rate_s):
    unit by unit to the largest marginal P(C_s >= a_s + 1) (decreasing in a_s, so greedy is optimal);
    ties to the lower site index."""
    from scipy.stats import poisson  # here: scipy.stats costs ~0.4 s to import

    gains = poisson.sf(np.arange(units)[None, :], np.asarray(rates, float)[:, None])  # (sites, units)
    target = np.zeros(len(rates), dtype=np.int64)
    for _ in range(units):
        s = int(np.argmax(gains[np.arange(len(rates)), np.minimum(target, units - 1)] * (target < units)))
        target[s] += 1
    return target


class _TargetAllocation(Policy):
    """Base: approve an offer while its site is below the step's target."""

    requires = frozenset({"attention_budget"})

    def __init__(self, params, context, rng):
        if not hasattr(context, "units") or not hasattr(context, "history"):
            raise UserError(f"policy {self.name!r} needs a family with an attention budget per step "
                            f"(attention_allocation), not this one")
        super().__init__(params, context, rng)
        self.n_sites = len(context.group_names)
        self._step, self._target = -1, np.zeros(self.n_sites, dtype=np.int64)

    @abc.abstractmethod
    def target(self, step: int) -> np.ndarray:
        """The step's units per site."""

    def _decide(self, obs, info):
        step = self.context.step()
        if step != self._step:
            self._step, self._target = step, self.target(step)
        sites = self.column(obs, "group").astype(np.int64)
        return (self.column(obs, "placed_here") < self._target[sites]).astype(float)

    def state(self) -> dict[str, Any]:
        return {"last_target": dict(zip(self.context.group_names, self._target.tolist()))}


class UniformAllocation(_TargetAllocation):
    """The budget split evenly over the sites (the remainder rotating with the step)."""

    name = "uniform_allocation"

    def target(self, step):
        return even_split(self.context.units, self.n_sites, step % self.n_sites)


class GreedyParams(NoParams):
    window: int = Field(100, ge=0, le=10**9, description=(
        "Steps of observed incident counts the rate estimates average (0: all; pocar's evaluation: 100)."))
    burn_steps: int = Field(25, ge=0, le=10**9, description=(
        "Steps allocated uniformly before the first estimate (pocar's evaluation: 25)."))
    epsilon: float = Field(0.1, ge=0, le=1, description=(
        "Chance a step's allocation is drawn at random, uniformly over sites (ml-fairness-gym: 0.1)."))


class GreedyAllocation(_TargetAllocation):
    """Each unit where it most likely finds one more incident, on the estimated rates."""

    name = "greedy_allocation"
    Params = GreedyParams

    def target(self, step):
        p, units = self.params, self.context.units
        if self.rng.random() < p.epsilon:
            return self.rng.multinomial(units, np.full(self.n_sites, 1.0 / self.n_sites)).astype(np.int64)
        occurred = self.context.history()[0]
        if step < p.burn_steps or len(occurred) == 0:
            return even_split(units, self.n_sites, step % self.n_sites)
        recent = occurred[-p.window:] if p.window else occurred
        self.rates = recent.mean(axis=0)
        return greedy_split(units, self.rates)

    def state(self) -> dict[str, Any]:
        rates = getattr(self, "rates", None)
        out = super().state()
        if rates is not None:
            out["estimated_rates"] = dict(zip(self.context.group_names, np.round(rates, 6).tolist()))
        return out
