"""Lag-PPO (Satija et al. 2023, as in hercky/group-fairness-in-RL): PPO under demographic parity
of group returns (seed 002 Definition 5) via Lagrange multipliers on the advantage.

For each group g, with Delta J_g = J_g - mean of the other groups' J (two groups: J_0 - J_1),
two multipliers in [0, nu_max] follow projected steps after every rollout:
``nu_g0 <- clip(nu_g0 - lr (eps - Delta J_g))``, ``nu_g1 <- clip(nu_g1 - lr (eps + Delta J_g))``,
and the advantage of a decision about a group-g applicant is scaled by ``1 - nu_g0 + nu_g1``.
The reference trains one agent per subgroup MDP; here one policy decides for every group, so
the scaling is applied per sample by its group. J_g is the rollout's mean bank reward per
decision about group g (a return rate: the groups' decision counts differ, the rate does not
reward a larger group); eps is in the same units. Defaults: the reference's nu_init 0,
nu_max 2, nu_lr 0.01; eps 0.05 (the reference's 500 is in MuJoCo return units).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from policies.deep.common import DeepLender
from policies.deep.learner import RolloutContext
from policies.deep.ppo import PPOLearner, PPOParams


class LagPPOParams(PPOParams):
    epsilon: float = Field(0.05, ge=0, le=1e6, description="Allowed gap |J_g - J_other| (reward per decision).")
    nu_init: float = Field(0.0, ge=0, le=1e6, description="Initial multipliers.")
    nu_max: float = Field(2.0, ge=0, le=1e6, description="Multipliers are projected onto [0, nu_max].")
    nu_lr: float = Field(0.01, gt=0, le=1e6, description="Multiplier step size.")


def group_returns(rewards: np.ndarray, groups: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean reward per decision for each group, and which groups were seen."""
    counts = np.bincount(groups, minlength=n_groups).astype(float)
    sums = np.bincount(groups, weights=rewards, minlength=n_groups)
    seen = counts > 0
    return np.divide(sums, counts, out=np.zeros(n_groups), where=seen), seen


class LagrangeMultipliers:
    """The (n_groups, 2) multipliers and their projected update: Lag-PPO's advantage adjuster."""

    @classmethod
    def for_env(cls, env, p: LagPPOParams, seed: int) -> "LagrangeMultipliers":
        return cls(env.n_groups, p)

    def __init__(self, n_groups: int, p: LagPPOParams):
        self.p = p
        self.nu = np.full((n_groups, 2), float(p.nu_init))
        self.nu = np.clip(self.nu, 0.0, p.nu_max)

    def bind_learner(self, learner) -> None:
        """Nothing to hook: the multipliers rewrite whole rollouts (``__call__``)."""

    def update(self, J: np.ndarray, seen: np.ndarray) -> None:
        if seen.sum() < 2:
            return  # no gap to measure in this rollout
        p = self.p
        for g in np.nonzero(seen)[0]:
            others = seen.copy()
            others[g] = False
            dJ = J[g] - J[others].mean()
            self.nu[g, 0] = np.clip(self.nu[g, 0] - p.nu_lr * (p.epsilon - dJ), 0.0, p.nu_max)
            self.nu[g, 1] = np.clip(self.nu[g, 1] - p.nu_lr * (p.epsilon + dJ), 0.0, p.nu_max)

    def coefficients(self) -> np.ndarray:
        return 1.0 - self.nu[:, 0] + self.nu[:, 1]

    def __call__(self, adv: np.ndarray, rec: dict[str, np.ndarray], ctx: RolloutContext) -> np.ndarray:
        J, seen = group_returns(rec["reward"], rec["group"], self.nu.shape[0])
        self.update(J, seen)
        return adv * self.coefficients()[rec["group"]]

    def state(self) -> dict[str, Any]:
        return {"nu": self.nu.tolist()}


class LagPPOLender(DeepLender):
    """Lag-PPO: PPO with Lagrange multipliers for demographic parity of group returns."""

    name: ClassVar[str] = "lag_ppo"
    Params = LagPPOParams
    learner_cls = PPOLearner
    adjuster_cls = LagrangeMultipliers
