"""An example abm policy plugin: a lender that approves at most ``quota`` applications per
decision batch, chosen at random.

Everything a policy needs: a ``Params`` model (pydantic; its fields are the scenario's
``policy.<field>`` keys, validated when the scenario is), what it ``requires`` of a scenario
family (nothing here: it reads no observation field, so it runs on every family), and
``_decide(obs, info)`` returning approval probabilities in [0, 1], one per row of ``obs``.
Randomness comes from ``self.rng`` (the run's seeded ``policy`` stream), so runs are reproducible.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from abm import NoParams, Policy

__all__ = ["QuotaLender", "QuotaParams"]


class QuotaParams(NoParams):
    quota: int = Field(5, ge=0, le=1_000_000, description="At most this many approvals per decision batch.")


class QuotaLender(Policy):
    """Approve at most `quota` applications per decision batch, chosen uniformly at random."""

    name = "quota"
    Params = QuotaParams
    requires = frozenset()  # capability names (abm.world); e.g. {"wealth"} to read obs["wealth"]

    def __init__(self, params, context, rng):
        super().__init__(params, context, rng)
        self.approved = 0  # a little state, reported in summary.json through state()

    def _decide(self, obs: np.ndarray, info) -> np.ndarray:
        probs = np.zeros(len(obs))
        probs[self.rng.permutation(len(obs))[: self.params.quota]] = 1.0
        return probs

    def on_decisions(self, obs, info, probs, approved) -> None:
        self.approved += int(np.sum(approved))

    def state(self) -> dict:
        return {"approved": self.approved}
