"""The seven heuristic lenders of seed 000 Appendix E.1 (defined in docs/MODEL.md).

All are stateless rules on the observation except the two group-fairness rules, which set
per-group wealth thresholds from the current population (recomputed at each episode end).
"""

from __future__ import annotations

import abc

import numpy as np
from pydantic import Field

from policies.base import NoParams, Policy


class ApproveAll(Policy):
    """Approve every application (a = 1)."""

    name = "approve_all"

    def _decide(self, obs, info):
        return np.ones(len(obs))


class RejectAll(Policy):
    """Reject every application (a = 0): no loans, no profit, no wealth change."""

    name = "reject_all"

    def _decide(self, obs, info):
        return np.zeros(len(obs))


class RandomParams(NoParams):
    p: float = Field(0.5, ge=0, le=1, description="Approval probability for every applicant.")


class RandomApproval(Policy):
    """Approve each application with a fixed probability p (the engine draws the coin)."""

    name = "random"
    Params = RandomParams

    def _decide(self, obs, info):
        return np.full(len(obs), self.params.p)


class WealthThresholdParams(NoParams):
    threshold: float = Field(60.0, ge=0, le=1e9, description="Approve iff the applicant's wealth ($K) >= threshold.")


class WealthThreshold(Policy):
    """Approve iff wealth >= a fixed threshold (group-blind collateral rule)."""

    name = "wealth_threshold"
    Params = WealthThresholdParams
    requires = frozenset({"wealth"})
    twin = "single_threshold"

    def _decide(self, obs, info):
        return (self.column(obs, "wealth") * self.context.obs_scale["wealth"] >= self.params.threshold).astype(float)


class ScoreThresholdParams(NoParams):
    threshold: float = Field(0.5, ge=0, le=1, description="Approve iff the published approval score sigma(h_theta) >= threshold.")


class ScoreThreshold(Policy):
    """Approve iff the published approval score sigma(h_theta(x, g)) >= threshold."""

    name = "score_threshold"
    Params = ScoreThresholdParams
    requires = frozenset({"wealth"})
    twin = "single_threshold"

    def _decide(self, obs, info):
        return (self.column(obs, "approval_score") >= self.params.threshold).astype(float)


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Smallest v with weighted share of values < v at most 1 - ... i.e. P_w(X <= v) >= q."""
    if len(values) == 0:
        return np.inf
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    cum /= cum[-1]
    k = int(np.searchsorted(cum, q, side="left"))
    return float(values[order][min(k, len(values) - 1)])


class _GroupThresholds(Policy):
    """Per-group wealth thresholds computed from the population (application-weighted)."""

    requires = frozenset({"wealth"})

    def __init__(self, params, context, rng):
        super().__init__(params, context, rng)
        self.thresholds = np.zeros(len(context.group_names))
        self._refresh()

    def _members(self, cols, g):  # which rows the target rate is measured on
        return cols["group"] == g

    def _refresh(self) -> None:
        cols = self.context.columns()
        for g in range(len(self.thresholds)):
            rows = self._members(cols, g)
            # approve a `rate` share of the group's expected applicants: threshold at the
            # (1 - rate) quantile of wealth, weighted by each member's application propensity
            self.thresholds[g] = weighted_quantile(cols["wealth"][rows], cols["weight"][rows], 1.0 - self._rate())

    @abc.abstractmethod
    def _rate(self) -> float:
        """The share of each group's expected applicants to approve."""

    def _decide(self, obs, info):
        wealth = self.column(obs, "wealth") * self.context.obs_scale["wealth"]
        group = self.column(obs, "group").astype(int)
        if self._rate() >= 1.0:
            return np.ones(len(obs))
        return (wealth >= self.thresholds[group]).astype(float)

    def on_episode_end(self, stats):
        self._refresh()

    def state(self):
        return {"thresholds": [float(t) for t in self.thresholds]}


class DemographicParityParams(NoParams):
    rate: float = Field(0.5, ge=0, le=1, description="Target approval rate among each group's applicants.")


class DemographicParityQuota(_GroupThresholds):
    """Demographic-parity quota: per-group wealth thresholds approving the same share of each group."""

    name = "demographic_parity"
    twin = "dp_threshold"
    Params = DemographicParityParams

    def _rate(self):
        return self.params.rate


class EqualOpportunityParams(NoParams):
    tpr: float = Field(0.8, ge=0, le=1, description="Target approval rate among each group's creditworthy (label 1) applicants.")


class EqualOpportunityThresholds(_GroupThresholds):
    """Equal-opportunity thresholds: the same true-positive rate on the Loanly label in each group."""

    name = "equal_opportunity"
    requires = frozenset({"wealth", "labels"})
    twin = "eo_threshold"
    Params = EqualOpportunityParams
    privileged = ("label",)

    def _members(self, cols, g):
        qualified = (cols["group"] == g) & cols["label"]
        return qualified if qualified.any() else cols["group"] == g

    def _rate(self):
        return self.params.tpr
