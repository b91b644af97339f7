"""Explore-then-commit (seed 001, Section 5) when the transitions P are unknown.

Explore with the uniform policy pi_0 (state-independent, hence fair) for N0 episodes of
`horizon` epochs sampled from the true MDP, estimate
    P_hat[a][s, s'] = n(s, a, s') / n(s, a),
solve the fair LP on P_hat and commit to its policy for the remaining N - N0 episodes.
Rewards R and the initial distribution D are known.  A pair (s, a) never tried gets the
uniform distribution over the successors the model structure allows (the state space is
known; only the probabilities are not).  Regret and fairness of every episode are exact
expectations under the true P.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .evaluate import Constraint, accept_probability, evaluate_policy, state_occupancy
from .lp import solve_fair_lp
from .mdp import Action, LoanMDP


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
    """Committed policy pi_hat (LP on P_hat)."""
    estimated_mdp: LoanMDP
    optimal_reward: float
    """R^(pi*) of the fair LP optimum on the true P (regret reference)."""
    regret: np.ndarray
    """Per-episode R^(pi*) - R^(pi_n) (exact, true P)."""
    constraint_value: np.ndarray
    """Per-episode |gap| of pi_n under the true P."""
    violation: np.ndarray
    """Per-episode max(0, |gap| - epsilon)."""
    transition_error: float
    """Occupancy-weighted total-variation error of P_hat under pi_0."""


def explore_then_commit(mdp: LoanMDP, constraint: Constraint, epsilon: float,
                        n_explore: int, n_episodes: int, rng: np.random.Generator,
                        planning_epsilon: float | None = None) -> ETCResult:
    """Run ETC with N0 = n_explore uniform episodes out of N = n_episodes."""
    if not 0 <= n_explore <= n_episodes:
        raise ValueError(f"need 0 <= n_explore <= n_episodes, got {n_explore}, {n_episodes}")
    constraint = Constraint(constraint)
    uniform = np.full(mdp.n_states, 0.5)
    counts = simulate_transitions(mdp, uniform, n_explore, rng)
    estimate = estimate_transitions(mdp, counts)
    estimated_mdp = dataclasses.replace(mdp, transition=estimate)
    committed = solve_fair_lp(estimated_mdp, constraint,
                              epsilon if planning_epsilon is None else planning_epsilon).policy
    optimal = solve_fair_lp(mdp, constraint, epsilon)
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
                     transition_error=transition_error(mdp, estimate, uniform))
