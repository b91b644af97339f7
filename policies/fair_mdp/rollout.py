"""Algorithm 2's rollout evaluator: score theta on a short run of the ABM engine.

``RolloutEvaluator(scenario, constraint, applicants, rng)(theta)`` runs one episode of the
``beta_belief`` scenario (a cohort of ``applicants``, every one decided ``horizon`` times, no
event log, no exact evaluation) with the policy sigmoid(theta . phi(obs)) and returns the
episode's estimates (reward, |gap|): the seed's "m sampled rollouts [...] each of length T".
Each call gets a fresh seed from ``rng``, so repeated calls are independent estimates.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from policies.base import Policy

from .cce import sigmoid_policy
from .evaluate import Constraint
from .lookup import OBS_FIELDS

_CONTEXT = SimpleNamespace(obs_fields=OBS_FIELDS)  # all the sigmoid lender reads


class SigmoidLender(Policy):
    """pi(accept | obs) = sigmoid(theta . (alpha/(alpha+beta), alpha-beta, z, 1)): the CCE class."""

    name = "sigmoid"

    def __init__(self, theta: np.ndarray, context, rng):
        super().__init__(None, context, rng)
        self.theta = np.asarray(theta, dtype=float)

    def _decide(self, obs, info):
        alpha, beta = self.column(obs, "alpha"), self.column(obs, "beta")
        features = np.column_stack([alpha / (alpha + beta), alpha - beta, self.column(obs, "group"),
                                    np.ones(len(obs))])
        return sigmoid_policy(features, self.theta)


class RolloutEvaluator:
    """theta -> (simulated reward, simulated |gap|) from one episode of the engine."""

    def __init__(self, scenario, constraint, applicants: int, rng: np.random.Generator):
        self.constraint = Constraint(constraint)
        self.rng = rng
        self.scenario = scenario.model_copy(update={
            "population": scenario.population.model_copy(update={"size": int(applicants)}),
            "episodes": scenario.episodes.model_copy(update={"count": 1}),
            "outputs": scenario.outputs.model_copy(update={"events": False}),
            "evaluation": scenario.evaluation.model_copy(update={"exact": False}),
        })
        self.calls = 0

    def __call__(self, theta: np.ndarray) -> tuple[float, float]:
        from abm.engine import Simulation

        seed = int(self.rng.integers(2**63 - 1))
        scenario = self.scenario.model_copy(update={"seed": seed})
        sim = Simulation(scenario, policy=SigmoidLender(theta, _CONTEXT, self.rng))
        row = sim.run_episode()
        self.calls += 1
        gap = row["dp_gap"] if self.constraint is Constraint.DEMOGRAPHIC_PARITY else row["eo_gap"]
        if not np.isfinite(gap):  # a cohort without qualified members of a group: no EO estimate
            gap = 1.0
        return float(row["reward"]), float(abs(gap))

