"""Algorithm 1 of seed 001: the fair dual LP over discounted state-action occupancy measures.

    maximise   <Lambda, R>
    subject to sum_a Lambda[s', a] = (1 - gamma) D[s'] + gamma sum_{s,a} P[a][s, s'] Lambda[s, a]
               Lambda >= 0
               | rho_maj(Lambda) - rho_min(Lambda) | <= epsilon
where rho_g(Lambda) = sum_{s in g} rho[s, a] Lambda[s, a] / D(g) is linear because the MDP is
separable: the sub-population g (z, or (z, qualified) for EO) never changes, so
sum_{s in g} D^(pi)_s = D(g) for every policy.  Solved with HiGHS via scipy.optimize.linprog.

With the public code's undiscounted statistic (``params.fairness_average: undiscounted``) the
gap row weights state s by 1 / ((1 - gamma) gamma^t(s) divisor) (``fairness_weight``), still
linear; the LP is then solved in the variables y = Lambda / ((1 - gamma) gamma^t) (the
undiscounted occupancy, a change of variables that keeps the coefficients O(1) however deep
the horizon) and mapped back.  The discounted LP is solved in Lambda as before.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from abm.families.loan_mdp.evaluate import Constraint, subpopulation_masks
from abm.families.loan_mdp.mdp import Action, LoanMDP, fairness_weight
from .planning import optimal_policy

OCCUPANCY_TOLERANCE = 1e-13
"""States with D^(pi)_s below this are treated as unvisited by the LP solution."""


@dataclass(frozen=True)
class LPSolution:
    """Optimal occupancy measure and the policy it induces."""

    policy: np.ndarray
    """pi[s] = P(accept | s); unvisited states take the unconstrained-optimal action."""
    occupancy: np.ndarray
    """Lambda[s, a] returned by the LP."""
    objective: float
    """<Lambda, R> at the optimum (seed normalisation)."""


def flow_constraints(mdp: LoanMDP) -> tuple[sp.csr_matrix, np.ndarray]:
    """A_eq x = b_eq for x = [Lambda[:, reject]; Lambda[:, accept]]."""
    identity = sp.identity(mdp.n_states, format="csr")
    a_eq = sp.hstack([identity - mdp.gamma * mdp.transition[a].T
                      for a in (Action.REJECT, Action.ACCEPT)]).tocsr()
    return a_eq, (1.0 - mdp.gamma) * mdp.initial_distribution


def gap_row(mdp: LoanMDP, constraint: Constraint, states: np.ndarray | None = None,
            per_state_scale: np.ndarray | None = None) -> np.ndarray:
    """Coefficients c with c . x = rho_maj - rho_min (restricted to `states` if given).

    ``per_state_scale`` weights each state's offers; by default the MDP's fairness weight
    (1 for the discounted statistic)."""
    if per_state_scale is None and mdp.params.undiscounted:
        per_state_scale = fairness_weight(mdp)
    row = np.zeros(2 * mdp.n_states)
    for sign, population in zip((-1.0, 1.0), subpopulation_masks(mdp, constraint)):
        mass = mdp.initial_distribution[population].sum()
        if mass <= 0.0:
            raise ValueError(f"constraint {Constraint(constraint).value!r} compares an empty "
                             f"sub-population (zero initial mass)")
        mask = population if states is None else population & states
        scale = 1.0 if per_state_scale is None else per_state_scale
        for a in (Action.REJECT, Action.ACCEPT):
            coef = sign * mdp.individual_reward[:, a] * mask * scale / mass
            row[a * mdp.n_states:(a + 1) * mdp.n_states] += coef
    return row


def policy_from_occupancy(mdp: LoanMDP, occupancy: np.ndarray,
                          default: np.ndarray | None = None) -> np.ndarray:
    """pi[s] = Lambda[s, accept] / sum_a Lambda[s, a]; `default` where D_s is ~0."""
    mass = occupancy.sum(axis=1)
    visited = mass > OCCUPANCY_TOLERANCE
    if default is None:
        default = optimal_policy(mdp)
    policy = np.array(default, dtype=float, copy=True)
    policy[visited] = occupancy[visited, Action.ACCEPT] / mass[visited]
    return np.clip(policy, 0.0, 1.0)


def solve_occupancy_lp(mdp: LoanMDP, a_ub: np.ndarray | None = None,
                       b_ub: np.ndarray | None = None) -> LPSolution:
    """Maximise <Lambda, R> over occupancy measures with extra rows a_ub x <= b_ub (rows in
    Lambda; with the undiscounted statistic solved in y = Lambda / ((1 - gamma) gamma^t))."""
    a_eq, b_eq = flow_constraints(mdp)
    # a reward offset on every live decision adds offset * sum_live Lambda = offset (1 - gamma^H)
    # to every feasible objective: solve without it (HiGHS is several times slower with it)
    offset = float(mdp.params.reward_offset)
    live = ~mdp.terminal
    reward = mdp.reward - offset * live[:, None] if offset else mdp.reward
    cost = -np.concatenate([reward[:, Action.REJECT], reward[:, Action.ACCEPT]])
    a_ub = None if a_ub is None else sp.csr_matrix(a_ub)
    scale = None
    if mdp.params.undiscounted:
        scale = 1.0 / ((1.0 - mdp.gamma) * mdp.gamma ** mdp.depth.astype(float))
        inverse = sp.diags(np.concatenate([1.0 / scale, 1.0 / scale]))
        a_eq = (sp.diags(scale) @ a_eq @ inverse).tocsr()
        b_eq = scale * b_eq
        cost = cost / np.concatenate([scale, scale])
        a_ub = None if a_ub is None else (a_ub @ inverse).tocsr()
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub,
                     A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"fair LP failed (status {result.status}): {result.message}")
    x = np.clip(result.x, 0.0, None)
    occupancy = np.column_stack([x[:mdp.n_states], x[mdp.n_states:]])
    # in y, "visited" means reached with probability > tolerance, not discounted mass > tolerance
    policy = policy_from_occupancy(mdp, occupancy)
    if scale is not None:
        occupancy = occupancy / scale[:, None]
    objective = float(-result.fun) + (offset * float(occupancy[live].sum()) if offset else 0.0)
    return LPSolution(policy=policy, occupancy=occupancy, objective=objective)


def solve_fair_lp(mdp: LoanMDP, constraint: Constraint | None,
                  epsilon: float) -> LPSolution:
    """Optimal policy with |gap| <= epsilon (Algorithm 1); constraint=None is unconstrained."""
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    if constraint is None:
        return solve_occupancy_lp(mdp)
    row = gap_row(mdp, Constraint(constraint))
    return solve_occupancy_lp(mdp, np.vstack([row, -row]), np.array([epsilon, epsilon]))
