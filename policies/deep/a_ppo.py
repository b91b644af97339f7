"""A-PPO (Yu et al. 2022, "Policy optimization with advantage regularization for long-term
fairness", repo ericyangyu/pocar): PPO whose advantage is regularised towards equal recall.

With Delta_t = max_g TPR_g - min_g TPR_g of the decisions so far in the episode (TPR_g =
approved repayers / repayers of group g, counted from the true outcomes in ``info``):
``v_t = min(0, omega - Delta_t)`` (a penalty once the gap exceeds omega) and
``div_t = min(0, -1[Delta_t > omega] (Delta_t - Delta_{t-1}))`` (a penalty for widening it);
the advantage becomes ``b0 mm(A) + b1 mm(v) + b2 mm(div)``, mm = min-max scaling, before the
usual normalisation. Defaults b0 = 1, b1 = b2 = 0.25, omega = 0.005 (the reference's).
``normalize: rollout`` (the default, unchanged since the first version) min-max scales over the
whole rollout; ``minibatch`` (the reference's) over each minibatch, then the learner's usual
per-minibatch standardisation.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from policies.deep.common import DeepLender
from policies.deep.elbert_po import bind_minibatch
from policies.deep.learner import RolloutContext
from policies.deep.ppo import PPOLearner, PPOParams


class APPOParams(PPOParams):
    omega: float = Field(0.005, ge=0, le=1, description="Tolerated recall gap.")
    beta_0: float = Field(1.0, ge=0, le=1e6, description="Weight of the task advantage.")
    beta_1: float = Field(0.25, ge=0, le=1e6, description="Weight of the gap penalty v_t.")
    beta_2: float = Field(0.25, ge=0, le=1e6, description="Weight of the gap-widening penalty div_t.")
    normalize: Literal["rollout", "minibatch"] = Field("rollout", description=(
        "Where the three terms are min-max scaled: over the rollout, or over each minibatch (the reference)."))


def min_max(x: np.ndarray) -> np.ndarray:
    lo, hi = float(np.min(x)), float(np.max(x))
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x, dtype=float)


class RecallGapTracker:
    """Running per-group TPR over the current episode, carried across rollouts: A-PPO's
    advantage adjuster."""

    @classmethod
    def for_env(cls, env, p: APPOParams, seed: int) -> "RecallGapTracker":
        return cls(env.n_groups, p)

    def __init__(self, n_groups: int, p: APPOParams):
        self.p = p
        self.tp = np.zeros(n_groups)
        self.pos = np.zeros(n_groups)
        self.prev = 0.0
        self.stash: tuple | None = None  # normalize: minibatch: the rollout's (A, v, div)

    def bind_learner(self, learner) -> None:
        """``normalize: minibatch``: the learner hands each minibatch to ``minibatch``."""
        if self.p.normalize == "minibatch":
            bind_minibatch(learner, self.minibatch, renormalize=True)

    def minibatch(self, rows: np.ndarray, adv: np.ndarray) -> np.ndarray:
        a, v, div = self.stash
        p = self.p
        return p.beta_0 * min_max(a[rows]) + p.beta_1 * min_max(v[rows]) + p.beta_2 * min_max(div[rows])

    def gap(self) -> float:
        seen = self.pos > 0
        if seen.sum() < 2:
            return 0.0
        tpr = self.tp[seen] / self.pos[seen]
        return float(tpr.max() - tpr.min())

    def penalties(self, rec: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        n = len(rec["group"])
        v, div = np.zeros(n), np.zeros(n)
        omega = self.p.omega
        for t in range(n):
            if rec["outcome"][t]:
                g = rec["group"][t]
                self.pos[g] += 1
                self.tp[g] += rec["action"][t]
            delta = self.gap()
            v[t] = min(0.0, omega - delta)
            div[t] = min(0.0, -float(delta > omega) * (delta - self.prev))
            self.prev = delta
            if rec["done"][t]:
                self.tp[:], self.pos[:], self.prev = 0.0, 0.0, 0.0
        return v, div

    def __call__(self, adv: np.ndarray, rec: dict[str, np.ndarray], ctx: RolloutContext) -> np.ndarray:
        v, div = self.penalties(rec)
        p = self.p
        if p.normalize == "minibatch":  # scaled per minibatch by ``minibatch``
            self.stash = (np.asarray(adv, float), v, div)
            return adv
        return p.beta_0 * min_max(adv) + p.beta_1 * min_max(v) + p.beta_2 * min_max(div)

    def state(self) -> dict[str, Any]:
        return {"recall_gap": self.gap()}


class APPOLender(DeepLender):
    """A-PPO: PPO with advantage regularisation towards equal recall across groups."""

    name: ClassVar[str] = "a_ppo"
    Params = APPOParams
    learner_cls = PPOLearner
    adjuster_cls = RecallGapTracker
