"""The one-step (myopic) predictor: a repayment classifier retrained every episode on the
outcomes the bank has observed, approving iff the expected one-step profit is positive."""

from __future__ import annotations

import numpy as np
from pydantic import Field
from sklearn.linear_model import LogisticRegression

from policies.base import NoParams, Policy


class OneStepParams(NoParams):
    regularisation: float = Field(1.0, gt=0, le=1e6, description="Inverse L2 strength C of the logistic regression.")
    prior_strength: float = Field(1.0, ge=0, le=1e6, description="Laplace pseudo-counts for the repayment rate when outcomes are one-class.")


class OneStepPredictor(Policy):
    """Myopic classifier: approve iff p_repay * tau_interest * l - (1 - p_repay) * l > 0.

    Before any outcome is observed it approves everyone (it must explore to learn at all).
    """

    name = "one_step"
    requires = frozenset({"wealth"})
    twin = "classifier"
    Params = OneStepParams

    def __init__(self, params, context, rng):
        super().__init__(params, context, rng)
        self.threshold = 1.0 / (1.0 + context.tau_interest)  # p_repay above this -> profit > 0
        self._x: list[np.ndarray] = []
        self._y: list[np.ndarray] = []
        # a warm start: the refit on the growing outcome set starts from the last solution
        self.model = LogisticRegression(C=self.params.regularisation, max_iter=500, warm_start=True)
        self.fitted = False
        self.center = self.scale = None
        self.constant: float | None = None  # repayment rate when outcomes are one-class

    def predict_repay(self, obs: np.ndarray) -> np.ndarray:
        if self.fitted:
            z = (obs - self.center) / self.scale @ self.model.coef_[0] + self.model.intercept_[0]
            return 1.0 / (1.0 + np.exp(-z))
        if self.constant is not None:
            return np.full(len(obs), self.constant)
        return np.ones(len(obs))  # nothing observed yet: optimistic

    def _decide(self, obs, info):
        return (self.predict_repay(obs) > self.threshold).astype(float)

    def on_outcomes(self, outcomes):
        self._x.append(np.asarray(outcomes.obs, dtype=float))
        self._y.append(np.asarray(outcomes.repaid, dtype=int))

    def on_episode_end(self, stats):
        if not self._x:
            return
        x, y = np.concatenate(self._x), np.concatenate(self._y)
        self._x, self._y = [x], [y]
        k = self.params.prior_strength
        if y.min() == y.max():
            self.fitted = False
            self.constant = (y.sum() + k) / (len(y) + 2 * k)
        else:
            # raw observation scale (the penalty C acts on it: a strong prior towards the base rate,
            # which is right here since no feature predicts Loanly's latent defaults)
            self.center, self.scale = np.zeros(x.shape[1]), np.ones(x.shape[1])
            self.model.fit(x, y)
            self.fitted = True

    def state(self):
        n = int(sum(len(y) for y in self._y))
        return {"outcomes_seen": n, "threshold": self.threshold}
