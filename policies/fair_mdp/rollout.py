"""Algorithm 2's rollout evaluator: score theta on a short run of the ABM engine.

``RolloutEvaluator(scenario, constraint, applicants, rng)(theta)`` runs one episode of the
``beta_belief`` scenario (a cohort of ``applicants``, every one decided ``horizon`` times, no
event log, no exact evaluation) with the policy sigmoid(theta . phi(obs)) and returns the
episode's estimates (reward, |gap|): the seed's "m sampled rollouts [...] each of length T".
Each call gets a fresh seed from ``rng``, so repeated calls are independent estimates.
"""
from __future__ import annotations

import numpy as np

from abm.build import simulation
from abm.families.beta_belief import GROUP_NAMES
from abm.families.loan_mdp.evaluate import Constraint
from abm.families.loan_mdp.lookup import OBS_FIELDS
from abm.world import PolicyContext
from policies.base import Policy

from .cce import belief_features, sigmoid_policy

_CONTEXT = PolicyContext(OBS_FIELDS, GROUP_NAMES, family="beta_belief")  # all the sigmoid lender reads


class SigmoidLender(Policy):
    """pi(accept | obs) = sigmoid(theta . phi(obs)): the CCE class (``linear``: phi =
    (alpha/(alpha+beta), alpha-beta, z, 1); ``extended``: see cce.belief_features)."""

    name = "sigmoid"

    def __init__(self, theta: np.ndarray, context, rng, policy_class: str = "linear", horizon: int = 1):
        super().__init__(None, context, rng)
        self.theta = np.asarray(theta, dtype=float)
        self.policy_class, self.horizon = policy_class, int(horizon)

    def _decide(self, obs, info):
        c = self.column
        features = belief_features(self.policy_class, c(obs, "alpha"), c(obs, "beta"), c(obs, "group"),
                                   c(obs, "qualified"), c(obs, "step"), self.horizon)
        return sigmoid_policy(features, self.theta)


def reward_bound(params) -> float:
    """A lower bound of any policy's normalised reward: min(0, min_{s, a} R[s, a]), with the risk
    term at its largest (Var_Beta <= 1/4, sd_Beta <= 1/2)."""
    scale = params.interest + params.principal
    risk = params.risk_weight * (scale / 2 if params.risk_term == "sd" else scale ** 2 / 4)
    worst = params.reward_offset + min(0.0, -params.principal - risk)
    return float(min(worst, 0.0))


class RolloutEvaluator:
    """theta -> (simulated reward, simulated |gap|) from one episode of the engine."""

    def __init__(self, scenario, constraint, applicants: int, rng: np.random.Generator,
                 policy_class: str = "linear"):
        if policy_class not in ("linear", "extended"):
            raise ValueError(f"the rollout evaluator supports the linear and extended classes, "
                             f"not {policy_class!r}")
        self.constraint = Constraint(constraint)
        self.rng = rng
        self.policy_class = policy_class
        self.horizon = int(scenario.episodes.horizon)
        self.reward_lower_bound = reward_bound(scenario.mdp_params())
        self.scenario = scenario.model_copy(update={
            "population": scenario.population.model_copy(update={"size": int(applicants)}),
            "episodes": scenario.episodes.model_copy(update={"count": 1}),
            "outputs": scenario.outputs.model_copy(update={"events": False}),
            "evaluation": scenario.evaluation.model_copy(update={"exact": False}),
        })
        self.calls = 0

    def __call__(self, theta: np.ndarray) -> tuple[float, float]:
        seed = int(self.rng.integers(2**63 - 1))
        scenario = self.scenario.model_copy(update={"seed": seed})
        sim = simulation(scenario, SigmoidLender(theta, _CONTEXT, self.rng, self.policy_class, self.horizon))
        row = sim.run_episode()
        self.calls += 1
        gap = row["dp_gap"] if self.constraint is Constraint.DEMOGRAPHIC_PARITY else row["eo_gap"]
        if not np.isfinite(gap):  # a cohort without qualified members of a group: no EO estimate
            gap = 1.0
        return float(row["reward"]), float(abs(gap))

