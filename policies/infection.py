"""The infectious-disease family's allocation baselines (ml-fairness-gym's and A-PPO's
infectious-disease agents): each day's candidates come as one batch, and a baseline approves
exactly ``budget`` of them (all when fewer), which the world doses.

* ``most_connected``: the candidates with the highest degree (A-PPO's MaxNeighborsAgent,
  ``by: degree``) or eigenvector centrality (ml-fairness-gym's CentralityAgent, ``by:
  centrality``), ties to the lower graph node id (both agents' stable sort);
* ``uniform_treatment``: ``budget`` candidates drawn uniformly without replacement (A-PPO's
  RandomAgent, which vaccinates susceptible people chosen at random).
"""

from __future__ import annotations

import abc
from typing import Literal

import numpy as np
from pydantic import Field

from abm.errors import InvariantError
from policies.base import NoParams, Policy


class DoseAllocation(Policy):
    """Approve ``budget`` candidates of each batch, ranked by ``_scores`` (higher first)."""

    requires = frozenset({"treatment_budget"})

    def __init__(self, params, context, rng):
        super().__init__(params, context, rng)
        if not hasattr(context, "budget"):
            raise InvariantError(f"policy {self.name!r} needs the family's dose budget (infectious_disease)")

    @abc.abstractmethod
    def _scores(self, ids: np.ndarray) -> np.ndarray:
        """Each candidate's priority (higher is dosed first)."""

    def _decide(self, obs, info):
        ids = np.asarray(info["agent_id"], dtype=np.int64)
        # lexsort: the last key is primary: highest score first, then the lower graph node id
        order = np.lexsort((self.context.node[ids], -self._scores(ids)))
        out = np.zeros(len(ids))
        out[order[: self.context.budget]] = 1.0
        return out


class ConnectedParams(NoParams):
    by: Literal["degree", "centrality"] = Field("degree", description=(
        "degree: the most ties first (A-PPO's MaxNeighborsAgent); centrality: the highest eigenvector centrality "
        "first (ml-fairness-gym's CentralityAgent)."))


class MostConnected(DoseAllocation):
    """Dose the best-connected candidates first (the greedy baseline)."""

    name = "most_connected"
    Params = ConnectedParams

    def _scores(self, ids):
        return np.asarray(self.context.degree if self.params.by == "degree" else self.context.centrality,
                          dtype=float)[ids]


class UniformTreatment(DoseAllocation):
    """Dose candidates drawn uniformly at random (the uniform baseline)."""

    name = "uniform_treatment"
    Params = NoParams

    def _scores(self, ids):
        return self.rng.random(len(ids))
