"""Threshold and classifier baselines of seed 002 and Liu et al. (2018) for the score families.

They read a ``ThresholdContext`` (``abm.families.steps``): the known curve P(good | score, g),
the bank's reward table and the current per-group distribution of observed scores. Let
``gain(s, g) = E[reward | approve] - E[reward | reject]`` at P(good | s, g).

* ``max_util``: approve iff gain > 0 (Liu et al.'s MaxUtil: per-group profit-maximising
  thresholds, read off the known curves);
* ``eo_threshold`` / ``dp_threshold``: per-group thresholds, randomised on the boundary
  score, that give every group the same true-positive rate (equal opportunity) / approval rate
  (demographic parity) and, among those, the largest expected reward (or a fixed target rate);
* ``single_threshold``: one group-blind threshold (fixed, or profit-maximising on the pool);
* ``max_util_learned``: after a burn-in that approves everyone, per group (or pooled) the score
  cut with the largest realised reward on the loans seen so far: Max-util without the known curve;
* ``classifier``: logistic regression on the observation after a burn-in, frozen or retrained.

Registered under their own names: Eutopia's ``equal_opportunity``/``demographic_parity`` are
different rules (wealth quantiles on Loanly labels). See docs/MODEL.md.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from abm.errors import UserError
from abm.world import ScoreCurveContext
from policies.base import NoParams, Policy


def _require_scores(name: str, context) -> None:
    if not isinstance(context, ScoreCurveContext):
        raise UserError(f"policy {name!r} needs a family with a known score curve "
                        f"(credit_score, fico, admissions), not this one")


class _ScorePolicy(Policy):
    """Base: reads the observed score and group columns named by the context."""

    requires = frozenset({"score_curve"})

    def __init__(self, params, context, rng):
        _require_scores(self.name, context)
        super().__init__(params, context, rng)
        self.n_groups = len(context.group_names)

    def scores_groups(self, obs):
        return self.column(obs, self.context.score_field), self.column(obs, "group").astype(np.int64)

    def gain(self, scores, groups):
        return self.context.rewards.gain(self.context.p_good(scores, groups))


class MaxUtilParams(NoParams):
    burn_in: int = Field(0, ge=0, le=10**9, description="Decisions approved unconditionally first "
                                                        "(ml-fairness-gym's agent: burnin 50).")


class MaxUtil(_ScorePolicy):
    """Profit-maximising per-group thresholds: approve iff the expected reward gain is positive."""

    name = "max_util"
    Params = MaxUtilParams

    def __init__(self, params, context, rng):
        super().__init__(params, context, rng)
        self.decisions = 0

    def _decide(self, obs, info):
        if self.decisions < self.params.burn_in:
            return np.ones(len(obs))
        s, g = self.scores_groups(obs)
        return (self.gain(s, g) > 0).astype(float)

    def on_decisions(self, obs, info, probs, approved):
        self.decisions += len(obs)

    def state(self):
        out = {}
        for g, (values, _) in enumerate(self.context.score_counts()):
            good = values[self.gain(values, np.full(len(values), g)) > 0]
            out[self.context.group_names[g]] = float(good.min()) if len(good) else None
        return {"lowest_approved_score": out}


class LearnedMaxUtilParams(NoParams):
    burn_in: int = Field(50, ge=0, le=10**9, description="Decisions approved unconditionally before the "
                                                         "learned thresholds are used (ml-fairness-gym's burnin: 50).")
    pooled: bool = Field(False, description="false: a threshold per group from its own loans (group-aware); "
                                            "true: one threshold from everyone's (group-blind).")


class LearnedMaxUtil(_ScorePolicy):
    """Max-util with thresholds learned from outcomes: per group (or pooled), the score cut with the
    largest reward on the group's own resolved loans, summed over the scores at or above it."""

    name = "max_util_learned"
    Params = LearnedMaxUtilParams

    def __init__(self, params, context, rng):
        super().__init__(params, context, rng)
        self.decisions = 0
        self.value: dict[tuple[int, float], float] = {}  # (group or 0, score) -> summed reward gain of its loans
        self.thresholds = np.full(1 if params.pooled else self.n_groups, -np.inf)

    def _keys(self, groups):
        return np.zeros(len(groups), np.int64) if self.params.pooled else groups

    def _decide(self, obs, info):
        if self.decisions < self.params.burn_in:
            return np.ones(len(obs))
        s, g = self.scores_groups(obs)
        return (s >= self.thresholds[self._keys(g)]).astype(float)

    def on_decisions(self, obs, info, probs, approved):
        self.decisions += len(obs)

    def on_outcomes(self, outcomes):
        s, g = self.scores_groups(np.asarray(outcomes.obs, dtype=float))
        gain = self.context.rewards.gain(np.asarray(outcomes.repaid, float))  # the realised gain of each loan
        keys = self._keys(g)
        for k, score, value in zip(keys.tolist(), s.tolist(), gain.tolist()):
            self.value[(k, score)] = self.value.get((k, score), 0.0) + value
        for k in set(keys.tolist()):
            cells = sorted((score, v) for (key, score), v in self.value.items() if key == k)
            tail = np.cumsum([v for _, v in cells][::-1])[::-1]  # gain of approving every seen score >= cut
            best = np.nonzero(tail >= tail.max() - 1e-9)[0][-1]  # ties -> the higher cut (single_threshold's)
            self.thresholds[k] = cells[best][0] if tail.max() > 0 else np.inf

    def state(self):
        names = ["all"] if self.params.pooled else self.context.group_names
        return {"thresholds": {n: (float(t) if np.isfinite(t) else None) for n, t in zip(names, self.thresholds)},
                "decisions": self.decisions}


class GroupThresholdParams(NoParams):
    target: float | None = Field(None, ge=0, le=1, description="Common rate every group gets; null: the "
                                                                 "rate with the largest expected reward.")
    refresh_every: int = Field(100, ge=0, le=10**9, description="Recompute the thresholds from the current "
                                                               "score distribution every N decisions (0: each episode end only).")


class _GroupThresholds(_ScorePolicy):
    """Per-group thresholds (t_g, gamma_g): approve s > t_g, approve s == t_g with prob. gamma_g."""

    Params = GroupThresholdParams
    weight_kind = "good"  # the rate equalised: 'good' -> TPR, 'all' -> approval rate

    def __init__(self, params, context, rng):
        super().__init__(params, context, rng)
        self.thresholds = np.full(self.n_groups, np.inf)
        self.boundary = np.zeros(self.n_groups)
        self.rate = 0.0
        self._since = 0
        self.refresh()

    def _curves(self):
        curves = []
        for g, (values, counts) in enumerate(self.context.score_counts()):
            order = np.argsort(-values, kind="stable")
            v, n = values[order], counts[order].astype(float)
            p = self.context.p_good(v, np.full(len(v), g))
            w = n * p if self.weight_kind == "good" else n
            total = w.sum()
            rate = np.cumsum(w) / total if total > 0 else np.zeros(len(v))
            gain_n = self.context.rewards.gain(p) * n
            curves.append((v, rate, np.cumsum(gain_n), gain_n, total > 0))
        return curves

    @staticmethod
    def _place(curve, tau):
        """(k, fraction, expected reward) of the cheapest top-down threshold reaching rate tau."""
        v, rate, cum, gain_n, ok = curve
        if tau <= 0 or not ok or len(v) == 0:
            return -1, 0.0, 0.0
        k = int(min(np.searchsorted(rate, tau - 1e-12, side="left"), len(v) - 1))
        prev = rate[k - 1] if k > 0 else 0.0
        frac = 1.0 if rate[k] <= prev else float(np.clip((tau - prev) / (rate[k] - prev), 0.0, 1.0))
        return k, frac, (cum[k - 1] if k > 0 else 0.0) + frac * gain_n[k]

    def refresh(self) -> None:
        curves = self._curves()
        if self.params.target is not None:
            tau = self.params.target
        else:
            # the total reward is linear in tau between consecutive breakpoints of any group,
            # so its maximum over tau sits at a breakpoint: try them all (ties -> smaller rate)
            candidates = np.unique(np.concatenate([[0.0], *[c[1] for c in curves]]))
            totals = [sum(self._place(c, t)[2] for c in curves) for t in candidates]
            tau = float(candidates[int(np.argmax(np.asarray(totals) > max(totals) - 1e-9))])
        self.rate = tau
        for g, curve in enumerate(curves):
            if not curve[4]:  # no good applicant in the group: its TPR is undefined, be profit-maximal
                gains = curve[3]
                positive = curve[0][gains > 0]
                self.thresholds[g] = positive.min() if len(positive) else np.inf
                self.boundary[g] = 1.0
                continue
            k, frac, _ = self._place(curve, tau)
            self.thresholds[g] = np.inf if k < 0 else curve[0][k]
            self.boundary[g] = frac if k >= 0 else 0.0

    def _decide(self, obs, info):
        s, g = self.scores_groups(obs)
        t = self.thresholds[g]
        return np.where(s > t, 1.0, np.where(s == t, self.boundary[g], 0.0))

    def on_decisions(self, obs, info, probs, approved):
        self._since += len(obs)
        if self.params.refresh_every and self._since >= self.params.refresh_every:
            self._since = 0
            self.refresh()

    def on_episode_end(self, stats):
        self._since = 0
        self.refresh()

    def state(self):
        names = self.context.group_names
        return {"rate": self.rate,
                "thresholds": {n: (float(t) if np.isfinite(t) else None) for n, t in zip(names, self.thresholds)},
                "boundary_probability": {n: float(b) for n, b in zip(names, self.boundary)}}


class EqualOpportunity(_GroupThresholds):
    """Equal opportunity: per-group thresholds equalising the true-positive rate (reward-maximal)."""

    name = "eo_threshold"
    weight_kind = "good"


class DemographicParity(_GroupThresholds):
    """Demographic parity: per-group thresholds equalising the approval rate (reward-maximal)."""

    name = "dp_threshold"
    weight_kind = "all"


class SingleThresholdParams(NoParams):
    threshold: float | None = Field(None, description="Approve iff observed score >= threshold; null: the "
                                                      "group-blind threshold with the largest expected reward.")
    refresh_every: int = Field(100, ge=0, le=10**9, description="With threshold null: recompute every N "
                                                               "decisions (0: each episode end only).")


class SingleThreshold(_ScorePolicy):
    """One group-blind score threshold for everyone."""

    name = "single_threshold"
    Params = SingleThresholdParams

    def __init__(self, params, context, rng):
        super().__init__(params, context, rng)
        self.threshold = np.inf if params.threshold is None else float(params.threshold)
        self._since = 0
        self.refresh()

    def refresh(self) -> None:
        if self.params.threshold is not None:
            return
        values, gains = [], []
        for g, (v, n) in enumerate(self.context.score_counts()):
            values.append(v)
            gains.append(self.gain(v, np.full(len(v), g)) * n)
        pooled, where = np.unique(np.concatenate(values), return_inverse=True)
        total = np.bincount(where, weights=np.concatenate(gains))
        tail = np.cumsum(total[::-1])[::-1]  # reward of approving every score >= pooled[k]
        if len(tail) == 0 or tail.max() <= 0:
            self.threshold = np.inf  # nothing pays: approve nobody
            return
        best = np.nonzero(tail >= tail.max() - 1e-9)[0][-1]  # ties -> the highest threshold
        self.threshold = float(pooled[best])

    def _decide(self, obs, info):
        s, _ = self.scores_groups(obs)
        return (s >= self.threshold).astype(float)

    def on_decisions(self, obs, info, probs, approved):
        self._since += len(obs)
        if self.params.refresh_every and self._since >= self.params.refresh_every:
            self._since = 0
            self.refresh()

    def on_episode_end(self, stats):
        self.refresh()

    def state(self):
        return {"threshold": float(self.threshold) if np.isfinite(self.threshold) else None}


class ClassifierParams(NoParams):
    burn_in: int = Field(1000, ge=0, le=10**9, description="Decisions taken before the first fit.")
    explore: float = Field(1.0, ge=0, le=1, description="Approval probability during the burn-in.")
    mode: Literal["frozen", "retrain"] = Field("frozen", description="frozen: fit once after the burn-in; "
                                                                     "retrain: refit at every episode end.")
    rule: Literal["reward", "accuracy"] = Field("reward", description="reward: approve iff the expected reward "
                                                                      "gain is positive; accuracy: iff P(good) >= 0.5.")
    regularisation: float = Field(1.0, gt=0, le=1e6, description="Inverse L2 strength C of the logistic regression.")


class Classifier(_ScorePolicy):
    """Logistic-regression lender: learns P(good | observation) from the outcomes it sees."""

    name = "classifier"
    Params = ClassifierParams

    def __init__(self, params, context, rng):
        super().__init__(params, context, rng)
        self.decisions = 0
        self._x: list[np.ndarray] = []
        self._y: list[np.ndarray] = []
        self.model = None  # a fitted sklearn LogisticRegression
        self.constant: float | None = None
        self.fits = 0

    def features(self, obs: np.ndarray) -> np.ndarray:
        """The observation with the group column one-hot encoded (groups are categories)."""
        g = self.column(obs, "group").astype(np.int64)
        rest = np.delete(obs, self.obs_index["group"], axis=1)
        return np.hstack([rest, np.eye(self.n_groups)[g]])

    @property
    def fitted(self) -> bool:
        return self.model is not None or self.constant is not None

    def fit(self) -> None:
        if not self._x:
            return
        x, y = np.concatenate(self._x), np.concatenate(self._y)
        self._x, self._y = [x], [y]
        if y.min() == y.max():
            self.model, self.constant = None, float(y[0])
        else:
            from sklearn.linear_model import LogisticRegression  # here: ~0.5 s to import, for this policy only

            self.model = LogisticRegression(C=self.params.regularisation, max_iter=500).fit(x, y)
            self.constant = None
        self.fits += 1

    def predict(self, obs: np.ndarray) -> np.ndarray:
        if self.model is not None:  # the fitted logit by hand: predict_proba costs ~1 ms a call
            z = self.features(obs) @ self.model.coef_[0] + self.model.intercept_[0]
            return 1.0 / (1.0 + np.exp(-z))
        return np.full(len(obs), self.constant)

    def _decide(self, obs, info):
        if not self.fitted:
            return np.full(len(obs), self.params.explore)
        p = self.predict(obs)
        if self.params.rule == "accuracy":
            return (p >= 0.5).astype(float)
        return (self.context.rewards.gain(p) > 0).astype(float)

    def on_decisions(self, obs, info, probs, approved):
        self.decisions += len(obs)
        if not self.fitted and self.decisions >= self.params.burn_in:
            self.fit()

    def on_outcomes(self, outcomes):
        if self.params.mode == "frozen" and self.fitted:
            return
        self._x.append(self.features(np.asarray(outcomes.obs, dtype=float)))
        self._y.append(np.asarray(outcomes.repaid, dtype=int))

    def on_episode_end(self, stats):
        if self.params.mode == "retrain" and self.decisions >= self.params.burn_in:
            self.fit()

    def state(self):
        n = int(sum(len(y) for y in self._y))
        return {"outcomes_seen": n, "fits": self.fits, "decisions": self.decisions}
