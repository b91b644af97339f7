"""Exact evaluation of a stochastic policy on a finite MDP by sparse linear solves.

Definitions (seed 001, Preliminaries and Fairness; docs/MODEL.md (seed 001)):
  D^(pi)      = (1 - gamma) sum_t gamma^t D^(pi,t)  solves (I - gamma P_pi^T) D = (1 - gamma) D_0
  Lambda^(pi) = D^(pi)_s pi_{s,a}                    (sums to 1)
  R^(pi)      = <Lambda^(pi), R>                     (normalised; discounted_return = R / (1-gamma))
  rho_g^(pi)  = E_{(s,a) ~ Lambda_g}[rho_{s,a}]      for the sub-population g, where by
                separability Lambda_g = Lambda restricted to g, divided by D_0(g).
  DP gap      = rho_maj - rho_min  (g = z);   EO gap: same with g = (z, qualified).
With the public code's undiscounted statistic (params.fairness_average "undiscounted") rho_g is
sum_t P(offer at t | g) / divisor, computed with the per-state weights of `mdp.fairness_weight`.
A policy is an array pi[s] = P(accept | s) or pi[s, a].
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .mdp import MAJORITY, MINORITY, Action, LoanMDP, fairness_weight


class Constraint(str, Enum):
    """Fairness constraint on discounted individual rewards."""

    DEMOGRAPHIC_PARITY = "dp"
    EQUAL_OPPORTUNITY = "eo"


def accept_probability(mdp: LoanMDP, policy: np.ndarray) -> np.ndarray:
    """Validate a policy (pi[s] or pi[s, a]) and return pi[s] = P(accept | s)."""
    policy = np.asarray(policy, dtype=float)
    if policy.ndim == 2:
        if policy.shape != (mdp.n_states, 2):
            raise ValueError(f"policy must have shape ({mdp.n_states}, 2), got {policy.shape}")
        if np.abs(policy.sum(axis=1) - 1.0).max() > 1e-8:
            raise ValueError("policy rows must sum to 1")
        policy = policy[:, Action.ACCEPT]
    if policy.shape != (mdp.n_states,):
        raise ValueError(f"policy must have shape ({mdp.n_states},), got {policy.shape}")
    if policy.min() < -1e-12 or policy.max() > 1 + 1e-12 or not np.isfinite(policy).all():
        raise ValueError(f"accept probabilities must lie in [0, 1], got range "
                         f"[{policy.min()}, {policy.max()}]")
    return np.clip(policy, 0.0, 1.0)


def induced_transition(mdp: LoanMDP, accept: np.ndarray) -> sp.csr_matrix:
    """P^(pi)[s, s'] = sum_a pi[s, a] P[a][s, s']."""
    p_reject, p_accept = mdp.transition
    return (sp.diags(1.0 - accept) @ p_reject + sp.diags(accept) @ p_accept).tocsr()


def _solve(system: sp.csr_matrix, rhs: np.ndarray, lower: bool) -> np.ndarray:
    """Solve a sparse system; triangular (the DAG order of build_loan_mdp) is solved directly."""
    triangle = sp.tril(system) if lower else sp.triu(system)
    if triangle.nnz == system.nnz:
        return spla.spsolve_triangular(system.tocsr(), rhs, lower=lower)
    return spla.spsolve(system.tocsc(), rhs)


def state_occupancy(mdp: LoanMDP, accept: np.ndarray) -> np.ndarray:
    """Discounted state distribution D^(pi) (sums to 1)."""
    p_pi = induced_transition(mdp, accept)
    system = sp.identity(mdp.n_states, format="csr") - mdp.gamma * p_pi.T
    return _solve(system, (1.0 - mdp.gamma) * mdp.initial_distribution, lower=True)


def occupancy_measure(mdp: LoanMDP, policy: np.ndarray) -> np.ndarray:
    """Discounted state-action distribution Lambda^(pi)[s, a] (sums to 1)."""
    accept = accept_probability(mdp, policy)
    d_pi = state_occupancy(mdp, accept)
    return np.column_stack([d_pi * (1.0 - accept), d_pi * accept])


def value_function(mdp: LoanMDP, policy: np.ndarray) -> np.ndarray:
    """V^(pi)[s] = E[sum_t gamma^t R_t | s_0 = s] (unnormalised)."""
    accept = accept_probability(mdp, policy)
    p_pi = induced_transition(mdp, accept)
    r_pi = (1.0 - accept) * mdp.reward[:, Action.REJECT] + accept * mdp.reward[:, Action.ACCEPT]
    system = sp.identity(mdp.n_states, format="csr") - mdp.gamma * p_pi
    return _solve(system, r_pi, lower=False)


def subpopulation_masks(mdp: LoanMDP, constraint: Constraint) -> tuple[np.ndarray, np.ndarray]:
    """State masks of the (minority, majority) sub-populations the constraint compares."""
    constraint = Constraint(constraint)
    masks = []
    for z in (MINORITY, MAJORITY):
        mask = mdp.group == z
        if constraint is Constraint.EQUAL_OPPORTUNITY:
            mask = mask & mdp.qualified
        masks.append(mask)
    return masks[0], masks[1]


def subpopulation_rates(mdp: LoanMDP, occupancy: np.ndarray,
                        constraint: Constraint) -> tuple[float, float]:
    """(rho_min, rho_maj): individual reward rate of each compared sub-population (discounted,
    or undiscounted / divisor: the MDP's ``fairness_average``)."""
    rates = []
    rho = mdp.individual_reward
    if mdp.params.undiscounted:
        rho = rho * fairness_weight(mdp)[:, None]
    for mask in subpopulation_masks(mdp, constraint):
        mass = mdp.initial_distribution[mask].sum()
        if mass <= 0.0:
            raise ValueError(f"constraint {Constraint(constraint).value!r} compares an empty "
                             f"sub-population (zero initial mass)")
        rates.append(float((occupancy[mask] * rho[mask]).sum() / mass))
    return rates[0], rates[1]


@dataclass(frozen=True)
class PolicyEvaluation:
    """Exact reward and fairness statistics of one policy."""

    reward: float
    """R^(pi) = <Lambda, R> (seed normalisation, includes 1 - gamma)."""
    discounted_return: float
    """E[sum_t gamma^t R_t] = reward / (1 - gamma)."""
    offer_rate: tuple[float, float]
    """DP statistic rho_z per group (minority, majority), in the MDP's fairness_average."""
    qualified_offer_rate: tuple[float, float]
    """EO statistic rho_(z, qualified) per group (minority, majority), likewise."""
    occupancy: np.ndarray

    @property
    def dp_gap(self) -> float:
        """Signed majority-minus-minority discounted offer rate."""
        return self.offer_rate[1] - self.offer_rate[0]

    @property
    def eo_gap(self) -> float:
        """Signed majority-minus-minority discounted offer rate among the qualified."""
        return self.qualified_offer_rate[1] - self.qualified_offer_rate[0]

    def constraint_value(self, constraint: Constraint) -> float:
        """Smallest epsilon with pi in Pi_{constraint, epsilon}: |gap|."""
        if Constraint(constraint) is Constraint.DEMOGRAPHIC_PARITY:
            return abs(self.dp_gap)
        return abs(self.eo_gap)


def evaluate_policy(mdp: LoanMDP, policy: np.ndarray) -> PolicyEvaluation:
    """Exact reward value, occupancy measure and DP/EO statistics of `policy`."""
    occupancy = occupancy_measure(mdp, policy)
    reward = float((occupancy * mdp.reward).sum())
    try:
        eo = subpopulation_rates(mdp, occupancy, Constraint.EQUAL_OPPORTUNITY)
    except ValueError:
        eo = (float("nan"), float("nan"))
    return PolicyEvaluation(
        reward=reward, discounted_return=reward / (1.0 - mdp.gamma),
        offer_rate=subpopulation_rates(mdp, occupancy, Constraint.DEMOGRAPHIC_PARITY),
        qualified_offer_rate=eo, occupancy=occupancy)


class LayeredEvaluator:
    """Forward pass over the epoch layers of a DAG-shaped MDP (as built by build_loan_mdp).

    Gives the same D^(pi) as `state_occupancy` in O(nnz) without forming P^(pi); used where
    thousands of policies are evaluated (cross-entropy search).
    """

    def __init__(self, mdp: LoanMDP):
        depth = mdp.depth
        if np.any(np.diff(depth) < 0):
            raise ValueError("states must be ordered by depth for layered evaluation")
        if np.any(mdp.initial_distribution[depth > 0] != 0):
            raise ValueError("the initial distribution must live on depth-0 states")
        horizon = int(depth.max())
        bounds = np.searchsorted(depth, np.arange(horizon + 2))
        self.mdp = mdp
        self.layers = [slice(int(bounds[t]), int(bounds[t + 1])) for t in range(horizon + 1)]
        self.blocks = []
        for a in (Action.REJECT, Action.ACCEPT):
            matrix = mdp.transition[a].tocsr()
            per_layer = []
            for t in range(horizon):
                rows, nxt = self.layers[t], self.layers[t + 1]
                block = matrix[rows]
                if abs(block[:, nxt].sum() - block.sum()) > 1e-9 * max(1.0, block.sum()):
                    raise ValueError(f"transitions from depth {t} leave depth {t + 1}")
                per_layer.append(block[:, nxt].T.tocsr())
            self.blocks.append(per_layer)

    def state_occupancy(self, accept: np.ndarray) -> np.ndarray:
        """D^(pi) for accept probabilities pi[s] (no validation: hot path)."""
        gamma = self.mdp.gamma
        occupancy = np.empty(self.mdp.n_states)
        first = self.layers[0]
        current = (1.0 - gamma) * self.mdp.initial_distribution[first]
        occupancy[first] = current
        for t in range(len(self.layers) - 1):
            pi_t = accept[self.layers[t]]
            current = gamma * (self.blocks[Action.REJECT][t] @ ((1.0 - pi_t) * current)
                               + self.blocks[Action.ACCEPT][t] @ (pi_t * current))
            occupancy[self.layers[t + 1]] = current
        # The last layer is absorbing: D = gamma * inflow / (1 - gamma).
        occupancy[self.layers[-1]] = current / (1.0 - gamma)
        return occupancy
