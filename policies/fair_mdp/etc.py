"""Explore-then-commit (seed 001, Section 5) when the transitions P are unknown.

Explore with the uniform policy pi_0 (state-independent, hence fair) for N0 episodes of
`horizon` epochs sampled from the true MDP, estimate
    P_hat[a][s, s'] = n(s, a, s') / n(s, a),
solve the fair LP on P_hat at the planning tolerance and commit to its policy for the
remaining N - N0 episodes.  The seed's guarantee compares with pi*, "the optimal policy for
known P that satisfies pi* in Pi_{DP, epsilon/4}", and shows pi_n in Pi_{DP, epsilon} for every
n with probability >= 1 - delta: so the planning tolerance is epsilon / 4 by default
(``plan_epsilon_factor``), the regret reference pi* is the fair LP on the true P at that
tolerance, and a run *violates* when the committed policy's gap under the true P exceeds
epsilon.  Rewards R and the initial distribution D are known.  A pair (s, a) never tried gets
the uniform distribution over the successors the model structure allows (the state space is
known; only the probabilities are not).  Regret and fairness of every episode are exact
expectations under the true P.

    python -m policies.fair_mdp.etc_violations [--gamma 0.8] [--presimulation 7 10] [--horizon 8]
        [--n0 1000] [--runs 40] [--factor 0.25 1.0] [--seed 0]
prints the violation frequency over repeated runs and the regret per committed episode.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from abm.families.loan_mdp.evaluate import (Constraint, accept_probability, evaluate_policy,
                                           state_occupancy)
from abm.families.loan_mdp.mdp import Action, LoanMDP

from .lp import LPSolution, solve_fair_lp

DEFAULT_PLAN_EPSILON_FACTOR = 0.25
"""The seed's guarantee: plan (and compare) at epsilon / 4, promise epsilon."""
VIOLATION_TOLERANCE = 1e-6
"""A run violates when |gap| > epsilon + this (the LP solver's feasibility tolerance)."""


def planning_tolerance(epsilon: float, planning_epsilon: float | None = None,
                       plan_epsilon_factor: float = DEFAULT_PLAN_EPSILON_FACTOR) -> float:
    """The tolerance ETC plans at: planning_epsilon if given, else plan_epsilon_factor * epsilon."""
    if planning_epsilon is not None:
        return float(planning_epsilon)
    if not 0.0 < plan_epsilon_factor <= 1.0:
        raise ValueError(f"plan_epsilon_factor must lie in (0, 1], got {plan_epsilon_factor!r}")
    return float(plan_epsilon_factor * epsilon)


def _successor_keys(matrix: sp.csr_matrix) -> np.ndarray:
    """row + within-row cumulative probability (last entry of a row exactly row + 1)."""
    matrix = matrix.tocsr()
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    cumulative = np.cumsum(matrix.data)
    row_start = np.concatenate([[0.0], cumulative])[matrix.indptr[:-1]]
    within = cumulative - np.repeat(row_start, np.diff(matrix.indptr))
    last = matrix.indptr[1:][np.diff(matrix.indptr) > 0] - 1
    within[last] = 1.0
    return rows + within


def simulate_transitions(mdp: LoanMDP, policy: np.ndarray, n_episodes: int,
                         rng: np.random.Generator) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Counts n[a][s, s'] of observed transitions in `n_episodes` episodes of `policy`."""
    if n_episodes < 0:
        raise ValueError(f"n_episodes must be >= 0, got {n_episodes!r}")
    policy = accept_probability(mdp, policy)
    horizon = int(mdp.depth.max())
    matrices = [mdp.transition[a].tocsr() for a in (Action.REJECT, Action.ACCEPT)]
    keys = [_successor_keys(m) for m in matrices]
    entry = np.flatnonzero(mdp.initial_distribution)
    states = rng.choice(entry, size=n_episodes, p=mdp.initial_distribution[entry]
                        / mdp.initial_distribution[entry].sum())
    records = {a: ([], []) for a in (Action.REJECT, Action.ACCEPT)}
    for _ in range(horizon):
        accept = rng.random(n_episodes) < policy[states]
        u = rng.random(n_episodes)
        successors = np.empty_like(states)
        for a, chosen in ((Action.REJECT, ~accept), (Action.ACCEPT, accept)):
            s = states[chosen]
            position = np.searchsorted(keys[a], s + u[chosen], side="right")
            successors[chosen] = matrices[a].indices[position]
            records[a][0].append(s)
            records[a][1].append(successors[chosen])
        states = successors
    counts = []
    for a in (Action.REJECT, Action.ACCEPT):
        rows = np.concatenate(records[a][0]) if records[a][0] else np.zeros(0, int)
        cols = np.concatenate(records[a][1]) if records[a][1] else np.zeros(0, int)
        counts.append(sp.csr_matrix((np.ones(len(rows)), (rows, cols)),
                                    shape=(mdp.n_states, mdp.n_states)))
    return counts[0], counts[1]


def estimate_transitions(mdp: LoanMDP, counts: tuple[sp.csr_matrix, sp.csr_matrix]
                         ) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """P_hat from counts; untried (s, a) -> uniform over the structurally possible successors."""
    estimates = []
    for a in (Action.REJECT, Action.ACCEPT):
        count = counts[a].tocsr()
        total = np.asarray(count.sum(axis=1)).ravel()
        tried = total > 0
        support = mdp.transition[a].tocsr().copy()
        support.data = np.ones_like(support.data)
        width = np.asarray(support.sum(axis=1)).ravel()
        uniform = sp.diags(np.where(tried, 0.0, 1.0 / np.maximum(width, 1))) @ support
        empirical = sp.diags(np.where(tried, 1.0 / np.maximum(total, 1), 0.0)) @ count
        estimates.append((empirical + uniform).tocsr())
    return estimates[0], estimates[1]


def transition_error(mdp: LoanMDP, estimate: tuple[sp.csr_matrix, sp.csr_matrix],
                     policy: np.ndarray) -> float:
    """sum_{s,a} Lambda^(pi)[s, a] TV(P[a][s, .], P_hat[a][s, .]) under the true MDP."""
    occupancy = state_occupancy(mdp, policy)
    error = 0.0
    for a, weight in ((Action.REJECT, 1.0 - policy), (Action.ACCEPT, policy)):
        tv = 0.5 * np.asarray(abs(mdp.transition[a] - estimate[a]).sum(axis=1)).ravel()
        error += float((occupancy * weight * tv).sum())
    return error


@dataclass(frozen=True)
class ETCResult:
    """Outcome of explore-then-commit over N episodes."""

    policy: np.ndarray
    """Committed policy pi_hat (LP on P_hat at the planning tolerance)."""
    estimated_mdp: LoanMDP
    optimal_reward: float
    """R^(pi*) of the fair LP optimum on the true P at the planning tolerance (the seed's
    pi* in Pi_{epsilon/4} by default): the regret reference."""
    regret: np.ndarray
    """Per-episode R^(pi*) - R^(pi_n) (exact, true P)."""
    constraint_value: np.ndarray
    """Per-episode |gap| of pi_n under the true P."""
    violation: np.ndarray
    """Per-episode max(0, |gap| - epsilon)."""
    transition_error: float
    """Occupancy-weighted total-variation error of P_hat under pi_0."""
    planning_epsilon: float = float("nan")
    """The tolerance the LP on P_hat (and the reference pi*) used."""

    @property
    def violated(self) -> bool:
        """Whether some episode's policy breaks epsilon under the true P (beyond the LP's
        feasibility tolerance)."""
        return bool(np.any(self.violation > VIOLATION_TOLERANCE))


def reference_solution(mdp: LoanMDP, constraint: Constraint, tolerance: float) -> LPSolution:
    """pi*: the fair LP on the true P at the planning tolerance."""
    return solve_fair_lp(mdp, Constraint(constraint), tolerance)


def explore_then_commit(mdp: LoanMDP, constraint: Constraint, epsilon: float,
                        n_explore: int, n_episodes: int, rng: np.random.Generator,
                        planning_epsilon: float | None = None,
                        plan_epsilon_factor: float = DEFAULT_PLAN_EPSILON_FACTOR,
                        reference: LPSolution | None = None) -> ETCResult:
    """Run ETC with N0 = n_explore uniform episodes out of N = n_episodes, planning at
    planning_epsilon (default plan_epsilon_factor * epsilon); ``reference``: pi* if already
    solved (repeated runs share it)."""
    if not 0 <= n_explore <= n_episodes:
        raise ValueError(f"need 0 <= n_explore <= n_episodes, got {n_explore}, {n_episodes}")
    constraint = Constraint(constraint)
    tolerance = planning_tolerance(epsilon, planning_epsilon, plan_epsilon_factor)
    uniform = np.full(mdp.n_states, 0.5)
    counts = simulate_transitions(mdp, uniform, n_explore, rng)
    estimate = estimate_transitions(mdp, counts)
    estimated_mdp = dataclasses.replace(mdp, transition=estimate)
    committed = solve_fair_lp(estimated_mdp, constraint, tolerance).policy
    optimal = reference_solution(mdp, constraint, tolerance) if reference is None else reference
    optimal_reward = evaluate_policy(mdp, optimal.policy).reward
    rewards, values = [], []
    for policy in (uniform, committed):
        evaluation = evaluate_policy(mdp, policy)
        rewards.append(evaluation.reward)
        values.append(evaluation.constraint_value(constraint))
    phase = np.arange(n_episodes) >= n_explore
    regret = optimal_reward - np.where(phase, rewards[1], rewards[0])
    value = np.where(phase, values[1], values[0])
    return ETCResult(policy=committed, estimated_mdp=estimated_mdp,
                     optimal_reward=optimal_reward, regret=regret, constraint_value=value,
                     violation=np.maximum(value - epsilon, 0.0),
                     transition_error=transition_error(mdp, estimate, uniform),
                     planning_epsilon=tolerance)


@dataclass(frozen=True)
class ETCRepeated:
    """ETC repeated on independent explorations: how often the committed policy breaks epsilon."""

    epsilon: float
    planning_epsilon: float
    n_explore: int
    optimal_reward: float
    """R^(pi*) at the planning tolerance (true P)."""
    constraint_value: np.ndarray
    """|gap| under the true P of each run's committed policy."""
    regret: np.ndarray
    """R^(pi*) - R^(pi_hat) of each run (the regret of one committed episode)."""
    explore_regret: float
    """R^(pi*) - R^(pi_0): the regret of one exploring episode."""

    @property
    def violations(self) -> int:
        return int(np.sum(self.constraint_value > self.epsilon + VIOLATION_TOLERANCE))

    @property
    def runs(self) -> int:
        return len(self.constraint_value)

    @property
    def frequency(self) -> float:
        return self.violations / self.runs

    def upper_bound(self, confidence: float = 0.95) -> float:
        """One-sided Clopper-Pearson upper confidence bound of the violation probability."""
        from scipy.stats import beta

        k, n = self.violations, self.runs
        return 1.0 if k >= n else float(beta.ppf(confidence, k + 1, n - k))


def repeat_explore_then_commit(mdp: LoanMDP, constraint: Constraint, epsilon: float,
                               n_explore: int, runs: int, rng: np.random.Generator,
                               planning_epsilon: float | None = None,
                               plan_epsilon_factor: float = DEFAULT_PLAN_EPSILON_FACTOR
                               ) -> ETCRepeated:
    """`runs` independent explorations of N0 episodes each, each committed and evaluated
    exactly under the true P (pi* solved once)."""
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs!r}")
    constraint = Constraint(constraint)
    tolerance = planning_tolerance(epsilon, planning_epsilon, plan_epsilon_factor)
    reference = reference_solution(mdp, constraint, tolerance)
    values, regrets, explore = [], [], float("nan")
    for _ in range(runs):
        result = explore_then_commit(mdp, constraint, epsilon, n_explore, n_explore + 1, rng,
                                     planning_epsilon=tolerance, reference=reference)
        values.append(result.constraint_value[-1])
        regrets.append(result.regret[-1])
        explore = float(result.regret[0]) if n_explore else explore
    return ETCRepeated(epsilon=float(epsilon), planning_epsilon=tolerance, n_explore=int(n_explore),
                       optimal_reward=float(evaluate_policy(mdp, reference.policy).reward),
                       constraint_value=np.asarray(values), regret=np.asarray(regrets),
                       explore_regret=explore)
