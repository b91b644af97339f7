"""Baselines of seed 001 (Section 6) on the enumerated MDP, each solved exactly.

* unconstrained optimum: policy iteration, no fairness constraint;
* race-blind: the unconstrained optimum over policies that see only the belief (alpha, beta)
  and the epoch (the seed: "the state is a sufficient statistic", so it is the optimum);
* optimistic: pretends D^(pi,t) = D for all t, i.e. constrains only the decision on the
  initial distribution, eq. (7), while maximising the true discounted reward (an LP);
* conservative: the best state-independent policy, eq. (8) -- one accept probability q for
  every state (gap exactly 0), or one q_z per group with |q_maj - q_min| small enough.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from abm.families.loan_mdp.evaluate import Constraint, LayeredEvaluator, value_function
from abm.families.loan_mdp.mdp import MAJORITY, MINORITY, Action, LoanMDP

from .lp import LPSolution, gap_row, solve_occupancy_lp
from .planning import action_values, greedy_policy, optimal_policy


def unconstrained_optimum(mdp: LoanMDP) -> np.ndarray:
    """pi*[s] = P(accept | s) maximising R^(pi) with no constraint."""
    return optimal_policy(mdp)


def belief_key(mdp: LoanMDP, decimals: int = 9) -> np.ndarray:
    """Integer label of (alpha, beta, epoch): states a race-blind policy cannot tell apart."""
    keys = np.column_stack([np.round(mdp.alpha, decimals), np.round(mdp.beta, decimals),
                            mdp.depth, mdp.terminal])
    return np.unique(keys, axis=0, return_inverse=True)[1].ravel()


def race_blind_policy(mdp: LoanMDP) -> np.ndarray:
    """Unconstrained optimum among policies that depend on (alpha, beta, epoch) only.

    Optimal Q-values depend on the state only through (alpha, beta, epoch), so the greedy
    policy of the belief-averaged Q of the unconstrained optimum is optimal and blind.
    """
    q_values = action_values(mdp, value_function(mdp, optimal_policy(mdp)))
    key = belief_key(mdp)
    counts = np.bincount(key)
    blind_q = np.column_stack([np.bincount(key, weights=q_values[:, a]) / counts
                               for a in (Action.REJECT, Action.ACCEPT)])
    return greedy_policy(blind_q[key])


def depends_only_on_belief(mdp: LoanMDP, policy: np.ndarray, atol: float = 0.0) -> bool:
    """True when states with equal (alpha, beta, epoch) get the same accept probability."""
    key = belief_key(mdp)
    low = np.full(key.max() + 1, np.inf)
    high = np.full(key.max() + 1, -np.inf)
    np.minimum.at(low, key, policy)
    np.maximum.at(high, key, policy)
    return bool(np.all(high - low <= atol))


def optimistic_policy(mdp: LoanMDP, constraint: Constraint, epsilon: float) -> LPSolution:
    """Maximise R^(pi) s.t. the gap on the initial distribution alone is <= epsilon (7).

    At an entry state (depth 0, no inflow) sum_a Lambda[s, a] = (1 - gamma) D_s, so
    pi(accept | s) D_s = Lambda[s, accept] / (1 - gamma) and the static gap is linear.
    """
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    entry = mdp.depth == 0
    if np.any(mdp.initial_distribution[~entry] != 0):
        raise ValueError("the initial distribution must live on depth-0 states")
    row = gap_row(mdp, Constraint(constraint), states=entry,
                  per_state_scale=np.full(mdp.n_states, 1.0 / (1.0 - mdp.gamma)))
    return solve_occupancy_lp(mdp, np.vstack([row, -row]), np.array([epsilon, epsilon]))


@dataclass(frozen=True)
class ConservativeSolution:
    """Best state-independent policy."""

    policy: np.ndarray
    accept_probability: tuple[float, float]
    """(q_min, q_maj); equal when the policy is shared by both groups."""
    reward: float


class _GroupReward:
    """q -> R^(pi) contributed by group z when every state of z accepts with probability q."""

    def __init__(self, mdp: LoanMDP):
        self.mdp = mdp
        self.layered = LayeredEvaluator(mdp)

    def __call__(self, q_min: float, q_maj: float) -> tuple[float, float]:
        accept = np.where(self.mdp.group == MAJORITY, q_maj, q_min).astype(float)
        occupancy = self.layered.state_occupancy(accept)
        r_pi = (1.0 - accept) * self.mdp.reward[:, Action.REJECT] \
            + accept * self.mdp.reward[:, Action.ACCEPT]
        per_state = occupancy * r_pi
        return (float(per_state[self.mdp.group == MINORITY].sum()),
                float(per_state[self.mdp.group == MAJORITY].sum()))


def conservative_policy(mdp: LoanMDP, constraint: Constraint, epsilon: float,
                        per_group: bool = False, grid_size: int = 101) -> ConservativeSolution:
    """Best policy with pi(accept | s) = q for all s (per_group: q_z within a group).

    A shared q gives every sub-population the offer rate q (1 - gamma^H) (undiscounted
    statistic: q H / divisor), so the gap is 0 for DP and EO.  With per_group=True the gap is
    |q_maj - q_min| times that factor and must be <= epsilon.  Search: a grid over [0, 1] (the reward is not concave in q in general),
    then a bounded local refinement from the best grid point.
    """
    Constraint(constraint)
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    group_reward = _GroupReward(mdp)
    grid = np.linspace(0.0, 1.0, grid_size)
    table = np.array([group_reward(q, q) for q in grid])     # (q, group) rewards
    live_fraction = mdp.params.full_offer_rate()  # the statistic of offering at every decision
    if not per_group:
        best = int(np.argmax(table.sum(axis=1)))
        lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, grid_size - 1)]
        refined = minimize_scalar(lambda q: -sum(group_reward(q, q)), bounds=(lo, hi),
                                  method="bounded", options={"xatol": 1e-10})
        candidates = [(float(table[best].sum()), grid[best])]
        if refined.success:
            candidates.append((-float(refined.fun), float(refined.x)))
        reward, q = max(candidates)
        q_pair = (q, q)
    else:
        width = epsilon / live_fraction
        pairs = [(table[i, 0] + table[j, 1], grid[i], grid[j])
                 for i in range(grid_size) for j in range(grid_size)
                 if abs(grid[j] - grid[i]) <= width]
        reward, q0, q1 = max(pairs)
        refined = minimize(lambda x: -sum(group_reward(x[0], x[1])), x0=[q0, q1],
                           method="SLSQP", bounds=[(0, 1), (0, 1)],
                           constraints=[{"type": "ineq", "fun": lambda x: width - (x[1] - x[0])},
                                        {"type": "ineq", "fun": lambda x: width + (x[1] - x[0])}])
        if refined.success and -refined.fun > reward and abs(refined.x[1] - refined.x[0]) <= width:
            reward, q0, q1 = -float(refined.fun), *np.clip(refined.x, 0.0, 1.0)
        q_pair = (float(q0), float(q1))
    policy = np.where(mdp.group == MAJORITY, q_pair[1], q_pair[0]).astype(float)
    return ConservativeSolution(policy=policy, accept_probability=q_pair, reward=float(reward))
