"""Seed 001's planners as registered lenders of the `beta_belief` family.

Each policy solves on the exact enumerated MDP of the scenario when it is built (the
context's ``mdp``) and ``decide`` looks the applicant's state up in the solved table
(``lookup.StateIndex``: integer counts, no float matching). Names and parameters:

* ``fair_lp`` (constraint dp|eo|none, epsilon): Algorithm 1;
* ``fair_cce`` (constraint, epsilon, evaluator exact|rollout, iterations, samples, ...):
  Algorithm 2; ``exact`` scores candidates on the enumerated MDP, ``rollout`` on short runs
  of the ABM engine (``rollout.RolloutEvaluator``);
* ``optimistic`` / ``conservative`` (constraint, epsilon[, per_group]), ``race_blind``,
  ``unconstrained``: the baselines;
* ``explore_then_commit`` (constraint, epsilon, explore_episodes): seed section 5 inside the
  engine: uniform offers for the first episodes while it records the transitions it sees,
  then the fair LP on the estimated transitions.
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Literal

import numpy as np
from pydantic import Field

from abm.errors import UserError
from policies.base import NoParams, Policy

from .baselines import conservative_policy, optimistic_policy, race_blind_policy, unconstrained_optimum
from .cce import CCEConfig, ExactEvaluator, constrained_cross_entropy, loan_features, sigmoid_policy
from .etc import estimate_transitions
from .lp import solve_fair_lp
from .lookup import StateIndex
from .mdp import Action


class _TablePolicy(Policy):
    """Base: a table pi[s] = P(accept | s) over the MDP's states, looked up per observation."""

    def __init__(self, params, context, rng):
        if getattr(context, "family", None) != "beta_belief":
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


class FairCCE(_TablePolicy):
    """Algorithm 2: constrained cross-entropy over sigmoid(theta . phi(s)) policies."""

    name = "fair_cce"
    Params = CCEParams

    def solve(self):
        p = self.params
        features = loan_features(self.mdp)
        if p.evaluator == "exact":
            evaluate = ExactEvaluator(self.mdp, p.constraint, features)
        else:
            from .rollout import RolloutEvaluator

            evaluate = RolloutEvaluator(self.context.scenario, p.constraint, p.rollout_applicants, self.rng)
        config = CCEConfig(n_samples=p.samples, elite_fraction=p.elite_fraction, n_iterations=p.iterations,
                           smoothing=p.smoothing, epsilon=p.epsilon, sigma=p.sigma)
        self.result = constrained_cross_entropy(evaluate, features.shape[1], config, self.rng)
        return sigmoid_policy(features, self.result.theta)

    def state(self):
        r = self.result
        return {**super().state(), "theta": r.theta.tolist(), "search_reward": r.reward,
                "search_constraint_value": r.constraint_value, "feasible": r.feasible,
                "evaluator": self.params.evaluator}


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
    planning_epsilon: float | None = Field(None, ge=0, le=1, description="Tolerance of the LP on the estimate "
                                                                         "(null: epsilon).")


class ExploreThenCommit(_TablePolicy):
    """Seed section 5: uniform offers for N0 episodes, then the fair LP on the estimated P."""

    name = "explore_then_commit"
    Params = ETCParams

    def solve(self):
        self.committed = False
        self.transitions: dict[int, list[np.ndarray]] = {a: [] for a in (Action.REJECT, Action.ACCEPT)}
        self.previous: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None
        if self.params.explore_episodes == 0:
            return self._commit()
        return np.full(self.mdp.n_states, 0.5)

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
        eps = p.epsilon if p.planning_epsilon is None else p.planning_epsilon
        self.committed = True
        self.transitions = {a: [] for a in self.transitions}
        return np.clip(solve_fair_lp(estimate, constraint, eps).policy, 0.0, 1.0)

    def state(self):
        return {**super().state(), "committed": self.committed, "observed_transitions": getattr(self, "observed", 0)}
