"""Unconstrained optimal planning: exact policy iteration on the discounted criterion."""
from __future__ import annotations

import numpy as np

from abm.families.loan_mdp.evaluate import value_function
from abm.families.loan_mdp.mdp import Action, LoanMDP


def action_values(mdp: LoanMDP, values: np.ndarray) -> np.ndarray:
    """Q[s, a] = R[s, a] + gamma * sum_s' P[a][s, s'] V[s']."""
    return np.column_stack([mdp.reward[:, a] + mdp.gamma * (mdp.transition[a] @ values)
                            for a in (Action.REJECT, Action.ACCEPT)])


def greedy_policy(q_values: np.ndarray, tie_tolerance: float = 1e-12) -> np.ndarray:
    """Deterministic accept probability; ties (within tolerance) are denied."""
    return (q_values[:, Action.ACCEPT] > q_values[:, Action.REJECT] + tie_tolerance).astype(float)


def optimal_policy(mdp: LoanMDP, max_iterations: int = 1000) -> np.ndarray:
    """Unconstrained optimum pi*[s] = P(accept | s) by policy iteration (exact solves)."""
    policy = greedy_policy(mdp.reward)
    for _ in range(max_iterations):
        improved = greedy_policy(action_values(mdp, value_function(mdp, policy)))
        if np.array_equal(improved, policy):
            return policy
        policy = improved
    raise RuntimeError(f"policy iteration did not converge in {max_iterations} iterations")
