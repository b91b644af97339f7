"""Seed 001's planners as registered lenders of the `beta_belief` family.

Each policy solves on the exact enumerated MDP of the scenario when it is built (the
context's ``mdp``) and ``decide`` looks the applicant's state up in the solved table
(``abm.families.loan_mdp.lookup.StateIndex``: integer counts, no float matching). Names and
parameters:

* ``fair_lp`` (constraint dp|eo|none, epsilon): Algorithm 1;
* ``fair_cce`` (constraint, epsilon, evaluator exact|rollout, iterations, samples, ...,
  elite_weighting reward|exponential|equal, policy_class linear|extended|tabular):
  Algorithm 2; ``exact`` scores candidates on the enumerated MDP, ``rollout`` on short runs
  of the ABM engine (``rollout.RolloutEvaluator``);
* ``optimistic`` / ``conservative`` (constraint, epsilon[, per_group]), ``race_blind``,
  ``unconstrained``: the baselines;
* ``explore_then_commit`` (constraint, epsilon, explore_episodes, plan_epsilon_factor,
  planning_epsilon, report_regret): seed section 5 inside the engine: uniform offers for the first
  episodes while it records the transitions it sees, then the fair LP on the estimated
  transitions at epsilon / 4 (the seed's guarantee); it reports the exact per-episode regret
  against pi* (the fair LP on the true P at the same tolerance) and whether the committed
  policy breaks epsilon under the true P.
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from abm.errors import UserError
from abm.families.loan_mdp.lookup import StateIndex
from abm.families.loan_mdp.mdp import Action
from abm.world import LoanMDPContext
from policies.base import NoParams, Policy

from .baselines import conservative_policy, optimistic_policy, race_blind_policy, unconstrained_optimum
from .cce import CCEConfig, ExactEvaluator, constrained_cross_entropy, loan_features, sigmoid_policy
from .etc import DEFAULT_PLAN_EPSILON_FACTOR, VIOLATION_TOLERANCE, estimate_transitions, planning_tolerance
from .lp import solve_fair_lp


class _TablePolicy(Policy):
    """Base: a table pi[s] = P(accept | s) over the MDP's states, looked up per observation."""

    requires = frozenset({"loan_mdp"})

    def __init__(self, params, context, rng):
        if not isinstance(context, LoanMDPContext):
            raise UserError(f"policy {self.name!r} plans on seed 001's loan MDP: use it with family "
                            f"'beta_belief'")
        super().__init__(params, context, rng)
        self.mdp = context.mdp
        self.index = StateIndex(self.mdp)
        self.table = np.clip(np.asarray(self.solve(), dtype=float), 0.0, 1.0)
        self.fields = [self.obs_index[f] for f in ("group", "qualified", "repayments", "defaults", "rejections")]

    @abc.abstractmethod
    def solve(self) -> np.ndarray:
        """The decision table over the MDP's states."""

    def states(self, obs: np.ndarray) -> np.ndarray:
        return self.index(*(obs[:, i] for i in self.fields))

    def _decide(self, obs, info):
        return self.table[self.states(obs)]

    def state(self):
        live = ~self.mdp.terminal
        return {"mdp_states": int(self.mdp.n_states), "deterministic_states": int(
            np.sum(live & ((self.table == 0) | (self.table == 1)))), "live_states": int(live.sum())}


class ConstraintParams(NoParams):
    constraint: Literal["dp", "eo"] = Field("dp", description="dp: demographic parity; eo: equal opportunity "
                                                              "(discounted, seed 001 section 2).")
    epsilon: float = Field(0.1, ge=0, le=1, description="Tolerance: |majority - minority| <= epsilon.")


class LPParams(NoParams):
    constraint: Literal["dp", "eo", "none"] = Field("dp", description="dp, eo, or none (unconstrained LP).")
    epsilon: float = Field(0.1, ge=0, le=1, description="Tolerance: |majority - minority| <= epsilon.")


class FairLP(_TablePolicy):
    """Algorithm 1: the optimal fair policy from the dual LP over occupancy measures (HiGHS)."""

    name = "fair_lp"
    Params = LPParams

    def solve(self):
        constraint = None if self.params.constraint == "none" else self.params.constraint
        solution = solve_fair_lp(self.mdp, constraint, self.params.epsilon)
        self.objective = solution.objective
        return solution.policy

    def state(self):
        return {**super().state(), "lp_objective": self.objective}


class CCEParams(ConstraintParams):
    evaluator: Literal["exact", "rollout"] = Field("exact", description="exact: score candidates on the "
                                                   "enumerated MDP; rollout: on short runs of the ABM engine.")
    iterations: int = Field(80, ge=0, le=10_000, description="CE iterations (seed code: 80).")
    samples: int = Field(100, ge=1, le=100_000, description="Policies sampled per iteration (seed code: 100).")
    elite_fraction: float = Field(0.1, gt=0, le=1, description="Fraction of samples kept as elites.")
    smoothing: float = Field(0.5, gt=0, le=1, description="Weight of the elite moments in the update.")
    sigma: float = Field(0.05, ge=0, lt=1, description="Margin: candidates must meet (1 - sigma) epsilon.")
    rollout_applicants: int = Field(200, ge=2, le=1_000_000, description="rollout: cohort size of each "
                                                                        "evaluating run (one episode).")
    elite_weighting: Literal["reward", "exponential", "equal"] = Field(
        "reward", description="Elite weights in the update: reward (the seed: proportional to R, shifted by a "
                              "lower bound of R where R can be negative), exponential (the public code: "
                              "exp((R - R_min) / (0.2 (R_max - R_min)))), equal.")
    policy_class: Literal["linear", "extended", "tabular"] = Field(
        "linear", description="sigmoid(theta . phi(s)): linear (4 features), extended (10 features), tabular "
                              "(one logit per state; exact evaluator only).")

    @model_validator(mode="after")
    def _class_fits_evaluator(self) -> "CCEParams":
        if self.policy_class == "tabular" and self.evaluator == "rollout":
            raise ValueError("policy_class tabular needs evaluator exact (the rollout lender sees observations, "
                             "not state indices)")
        return self


class FairCCE(_TablePolicy):
    """Algorithm 2: constrained cross-entropy over sigmoid(theta . phi(s)) policies."""

    name = "fair_cce"
    Params = CCEParams

    def solve(self):
        p = self.params
        features = loan_features(self.mdp, policy_class=p.policy_class)
        if p.evaluator == "exact":
            evaluate = ExactEvaluator(self.mdp, p.constraint, features)
        else:
            from .rollout import RolloutEvaluator

            evaluate = RolloutEvaluator(self.context.scenario, p.constraint, p.rollout_applicants, self.rng,
                                        policy_class=p.policy_class)
        config = CCEConfig(n_samples=p.samples, elite_fraction=p.elite_fraction, n_iterations=p.iterations,
                           smoothing=p.smoothing, epsilon=p.epsilon, sigma=p.sigma,
                           elite_weighting=p.elite_weighting)
        self.result = constrained_cross_entropy(evaluate, features.shape[1], config, self.rng,
                                                reward_baseline=evaluate.reward_lower_bound)
        return sigmoid_policy(features, self.result.theta)

    def state(self):
        r = self.result
        theta = r.theta.tolist() if self.params.policy_class != "tabular" else \
            {"parameters": int(r.theta.size), "min": float(r.theta.min()), "max": float(r.theta.max())}
        return {**super().state(), "theta": theta, "search_reward": r.reward,
                "search_constraint_value": r.constraint_value, "feasible": r.feasible,
                "evaluator": self.params.evaluator, "policy_class": self.params.policy_class,
                "elite_weighting": self.params.elite_weighting}


class ConservativeParams(ConstraintParams):
    per_group: bool = Field(False, description="One accept probability per group (gap <= epsilon) instead of "
                                               "one for every state (gap 0).")


class Optimistic(_TablePolicy):
    """Baseline (7): constrains only the decisions on the entry distribution (supervised learning)."""

    name = "optimistic"
    Params = ConstraintParams

    def solve(self):
        return optimistic_policy(self.mdp, self.params.constraint, self.params.epsilon).policy


class Conservative(_TablePolicy):
    """Baseline (8): the best state-independent policy (fair whatever the state distribution)."""

    name = "conservative"
    Params = ConservativeParams

    def solve(self):
        solution = conservative_policy(self.mdp, self.params.constraint, self.params.epsilon,
                                       per_group=self.params.per_group)
        self.q = solution.accept_probability
        return solution.policy

    def state(self):
        return {**super().state(), "accept_probability": {"minority": self.q[0], "majority": self.q[1]}}


class RaceBlind(_TablePolicy):
    """Unconstrained optimum among policies that ignore the group (belief and epoch only)."""

    name = "race_blind"

    def solve(self):
        return race_blind_policy(self.mdp)


class Unconstrained(_TablePolicy):
    """Unconstrained optimum (policy iteration), no fairness constraint."""

    name = "unconstrained"

    def solve(self):
        return unconstrained_optimum(self.mdp)


class ETCParams(LPParams):
    explore_episodes: int = Field(2, ge=0, le=1_000_000, description="N0: episodes (cohorts) of uniform offers "
                                                                     "before committing.")
    plan_epsilon_factor: float = Field(DEFAULT_PLAN_EPSILON_FACTOR, gt=0, le=1, description=(
        "The LP on the estimate plans at plan_epsilon_factor x epsilon (the seed's guarantee: epsilon / 4, "
        "promising epsilon with probability 1 - delta); pi*, the regret reference, at the same tolerance."))
    planning_epsilon: float | None = Field(None, ge=0, le=1, description="Tolerance of the LP on the estimate "
                                                                         "(null: plan_epsilon_factor x epsilon).")
    report_regret: bool = Field(True, description="Solve pi* on the true P (one more LP) to report the exact "
                                                  "per-episode regret and whether the committed policy breaks epsilon.")


class ExploreThenCommit(_TablePolicy):
    """Seed section 5: uniform offers for N0 episodes, then the fair LP on the estimated P at epsilon / 4."""

    name = "explore_then_commit"
    Params = ETCParams

    def solve(self):
        p = self.params
        self.committed = False
        self.transitions: dict[int, list[np.ndarray]] = {a: [] for a in (Action.REJECT, Action.ACCEPT)}
        self.previous: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None
        self.tolerance = planning_tolerance(p.epsilon, p.planning_epsilon, p.plan_epsilon_factor)
        self.reference_reward: float | None = None
        self.episode_regret: list[float] = []
        self.committed_value: float | None = None
        self._rewards: dict[str, float] = {}
        uniform = np.full(self.mdp.n_states, 0.5)
        if p.report_regret:
            from abm.families.loan_mdp.evaluate import evaluate_policy

            constraint = None if p.constraint == "none" else p.constraint
            self.reference_reward = evaluate_policy(self.mdp, solve_fair_lp(self.mdp, constraint,
                                                                            self.tolerance).policy).reward
            self._rewards["explore"] = evaluate_policy(self.mdp, uniform).reward
        if p.explore_episodes == 0:
            return self._commit()
        return uniform

    def on_decisions(self, obs, info, probs, approved):
        if self.committed or info is None:
            return
        states = self.states(obs)
        prev = self.previous
        if prev is not None and prev[0] == info.episode:
            # the same applicants one epoch later: (s, a) -> s' for each one seen both times
            common, i_prev, i_now = np.intersect1d(prev[1], info.agent_id, return_indices=True)
            for a in (Action.REJECT, Action.ACCEPT):
                sel = prev[3][i_prev] == bool(a)
                self.transitions[a].append(np.column_stack([prev[2][i_prev][sel], states[i_now][sel]]))
        self.previous = (info.episode, np.asarray(info.agent_id), states, np.asarray(approved, bool))

    def on_episode_end(self, stats):
        if self.reference_reward is not None:  # the episode just ended used pi_0 or pi_hat
            used = self._rewards["committed" if self.committed else "explore"]
            self.episode_regret.append(self.reference_reward - used)
        if not self.committed and stats["episode"] + 1 >= self.params.explore_episodes:
            self.table = self._commit()

    def _commit(self) -> np.ndarray:
        import scipy.sparse as sp

        n = self.mdp.n_states
        counts = []
        for a in (Action.REJECT, Action.ACCEPT):
            pairs = np.concatenate(self.transitions[a]) if self.transitions[a] else np.zeros((0, 2), np.int64)
            counts.append(sp.csr_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n)))
        self.observed = int(sum(c.sum() for c in counts))
        estimate = dataclasses.replace(self.mdp, transition=estimate_transitions(self.mdp, tuple(counts)))
        p = self.params
        constraint = None if p.constraint == "none" else p.constraint
        self.committed = True
        self.transitions = {a: [] for a in self.transitions}
        table = np.clip(solve_fair_lp(estimate, constraint, self.tolerance).policy, 0.0, 1.0)
        if p.report_regret:
            from abm.families.loan_mdp.evaluate import evaluate_policy

            evaluation = evaluate_policy(self.mdp, table)  # under the true P
            self._rewards["committed"] = evaluation.reward
            self.committed_value = None if constraint is None else evaluation.constraint_value(constraint)
        return table

    def state(self):
        out = {**super().state(), "committed": self.committed, "observed_transitions": getattr(self, "observed", 0),
               "planning_epsilon": self.tolerance}
        if self.reference_reward is not None:
            p = self.params
            out.update({"reference_reward": self.reference_reward, "explore_reward": self._rewards["explore"],
                        "committed_reward": self._rewards.get("committed"), "regret": self.episode_regret,
                        "cumulative_regret": float(np.sum(self.episode_regret)),
                        "committed_constraint_value": self.committed_value,
                        "violates_epsilon": None if self.committed_value is None else
                        bool(self.committed_value > p.epsilon + VIOLATION_TOLERANCE)})
        return out
