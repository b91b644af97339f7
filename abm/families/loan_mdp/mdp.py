"""The Beta-belief loan MDP of seed 001 (Wen, Bastani, Topcu), enumerated as a finite MDP.

An applicant's state is (alpha, beta, z): the bank's Beta(alpha, beta) belief about the
applicant's repayment probability p and the sensitive attribute z (0 = minority, 1 = majority).
Offering a loan (a = 1) is repaid with probability alpha / (alpha + beta) (alpha += 1) or
defaults (beta += 1); denying it (a = 0) sets beta += tau.  The initial distribution is the
distribution after `presimulation_steps[z]` forced offers from the group prior.

The enumerated state also carries y, the applicant's qualification at entry
(alpha / (alpha + beta) >= p0 at the entry state).  y never changes, so the MDP stays
separable in (z, y) and equal opportunity is linear in the occupancy measure (docs/MODEL.md (seed 001)).

States are keyed by integer counts (z, y, repays, defaults, rejections), so the decision
epoch t is a function of the state and the MDP is a DAG of `horizon` live layers followed by
one absorbing, reward-free terminal state per (z, y).  The discounted criterion of the seed
is therefore the finite-horizon sum  sum_{t < horizon} gamma^t R_t.

Conventions (fields of `LoanMDPParams`; the defaults are the seed's definitions, the
alternatives the authors' public code, wmgithub/fairness):
  risk_term         "variance": lambda (I + P)^2 Var_Beta(p);  "sd": lambda (I + P) sd_Beta(p)
  reward_offset     added to R(s, a) for both actions at every decision (public code: +2)
  fairness_average  "discounted": offer rate (1 - gamma) sum_t gamma^t 1[offer at t] (the seed);
                    "undiscounted": sum_t 1[offer at t] / fairness_divisor (public code: 51
                    decisions divided by 50)
Because the epoch is part of the state, the undiscounted statistic is still linear in the
discounted occupancy measure: weight w_s = 1 / ((1 - gamma) gamma^t(s) divisor) (`fairness_weight`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
import scipy.sparse as sp

MINORITY = 0
MAJORITY = 1

RISK_TERMS = ("variance", "sd")
"""variance: lambda (I + P)^2 Var_Beta(p) (docs/MODEL.md); sd: lambda (I + P) sd_Beta(p) (public code)."""
FAIRNESS_AVERAGES = ("discounted", "undiscounted")
"""discounted: the seed's (1 - gamma) sum_t gamma^t; undiscounted: offers / divisor (public code)."""
PUBLIC_CODE_OFFSET = 2.0
"""The public code adds 2 to every reward: the scale of the seed's Figure-1 rewards (10.43, 10.00)."""
UNDERFLOW_GUARD = 1e-250
"""The undiscounted statistic divides by gamma^t: refused where gamma^(horizon - 1) is below this."""


class Action(IntEnum):
    """The bank's decision."""

    REJECT = 0
    ACCEPT = 1


@dataclass(frozen=True)
class LoanMDPParams:
    """Parameters of the loan MDP; the defaults are seed 001's Figure-1 setting (gamma 0.8,
    T = (7, 10)) under the seed's definitions, as is scenarios/beta-belief-loans.yaml and a bare
    ``family: beta_belief`` scenario (docs/MODEL.md (seed 001)); CEM_loan.py's gamma 0.5,
    T = (1, 5) is the named variant scenarios/beta-belief-loans-cem.yaml."""

    prior_alpha: tuple[float, float] = (1.4614873, 1.51578208)
    """Beta prior alpha per group, indexed by z (0 = minority, 1 = majority)."""
    prior_beta: tuple[float, float] = (0.51479711, 0.19009129)
    """Beta prior beta per group, indexed by z."""
    majority_share: float = 0.70705682
    """pZ: probability that an applicant belongs to the majority (z = 1)."""
    presimulation_steps: tuple[int, int] = (7, 10)
    """T_z: forced always-accept steps that produce the initial states (T_maj > T_min; Figure 1: (7, 10))."""
    interest: float = 0.17318629
    """I: interest earned on a repaid loan, in units of the principal."""
    principal: float = 1.0
    """P: principal of one loan (lost on default)."""
    risk_weight: float = 0.01
    """lambda: weight of the risk-aversion term in the bank's reward (see risk_term)."""
    reject_penalty: float = 0.1
    """tau: increase of beta after a denied loan (the detrimental effect of denial)."""
    gamma: float = 0.8
    """Discount factor of the bank reward and of the fairness statistics (Figure 1: 0.8)."""
    horizon: int = 50
    """Number of decision epochs per applicant; the applicant is absorbed afterwards."""
    qualified_threshold: float = 0.82
    """p0: an applicant is qualified when alpha / (alpha + beta) >= p0 at entry."""
    risk_term: str = "variance"
    """Risk term of the offer reward: "variance" (lambda (I+P)^2 Var) or "sd" (lambda (I+P) sd)."""
    reward_offset: float = 0.0
    """Added to R(s, a) for both actions at every live decision (the public code: +2)."""
    fairness_average: str = "discounted"
    """DP/EO statistic: "discounted" (the seed) or "undiscounted" (offers / fairness_divisor)."""
    fairness_divisor: float | None = None
    """undiscounted: divisor of the offer count (None: horizon; the public code: 50 with 51
    decisions).  Must be None with the discounted statistic."""

    def __post_init__(self) -> None:
        for name in ("prior_alpha", "prior_beta"):
            value = getattr(self, name)
            if len(value) != 2 or min(value) <= 0:
                raise ValueError(f"{name} must be two positive numbers, got {value!r}")
        if len(self.presimulation_steps) != 2 or min(self.presimulation_steps) < 0:
            raise ValueError(f"presimulation_steps must be two integers >= 0, "
                             f"got {self.presimulation_steps!r}")
        if not 0.0 < self.majority_share < 1.0:
            raise ValueError(f"majority_share must lie in (0, 1), got {self.majority_share!r}")
        if not 0.0 < self.gamma < 1.0:
            raise ValueError(f"gamma must lie in (0, 1), got {self.gamma!r}")
        if int(self.horizon) != self.horizon or self.horizon < 1:
            raise ValueError(f"horizon must be an integer >= 1, got {self.horizon!r}")
        for name in ("interest", "principal", "risk_weight", "reject_penalty"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if not 0.0 <= self.qualified_threshold <= 1.0:
            raise ValueError(f"qualified_threshold must lie in [0, 1], "
                             f"got {self.qualified_threshold!r}")
        if self.risk_term not in RISK_TERMS:
            raise ValueError(f"risk_term must be one of {', '.join(RISK_TERMS)}, got {self.risk_term!r}")
        if not np.isfinite(self.reward_offset):
            raise ValueError(f"reward_offset must be finite, got {self.reward_offset!r}")
        if self.fairness_average not in FAIRNESS_AVERAGES:
            raise ValueError(f"fairness_average must be one of {', '.join(FAIRNESS_AVERAGES)}, "
                             f"got {self.fairness_average!r}")
        if self.fairness_divisor is not None:
            if self.fairness_average != "undiscounted":
                raise ValueError("fairness_divisor applies to the undiscounted statistic only "
                                 "(fairness_average: undiscounted)")
            if not (np.isfinite(self.fairness_divisor) and self.fairness_divisor > 0):
                raise ValueError(f"fairness_divisor must be a positive number, "
                                 f"got {self.fairness_divisor!r}")
        if self.fairness_average == "undiscounted" and \
                self.gamma ** (int(self.horizon) - 1) < UNDERFLOW_GUARD:
            raise ValueError(f"the undiscounted statistic needs gamma^(horizon - 1) >= "
                             f"{UNDERFLOW_GUARD:g} (gamma {self.gamma}, horizon {self.horizon})")

    def group_share(self, z: int) -> float:
        """P(z) for z in {0, 1}."""
        return self.majority_share if z == MAJORITY else 1.0 - self.majority_share

    @property
    def undiscounted(self) -> bool:
        return self.fairness_average == "undiscounted"

    @property
    def divisor(self) -> float:
        """Divisor of the undiscounted offer count (the horizon unless set)."""
        return float(self.horizon if self.fairness_divisor is None else self.fairness_divisor)

    def full_offer_rate(self) -> float:
        """The fairness statistic of a group offered a loan at every decision:
        1 - gamma^horizon (discounted) or horizon / divisor (undiscounted)."""
        if self.undiscounted:
            return int(self.horizon) / self.divisor
        return 1.0 - self.gamma ** int(self.horizon)

    def paper_scale_shift(self) -> float:
        """What turns a discounted return of these parameters into the public code's scale
        (+2 per decision): (2 - reward_offset) sum_{t < horizon} gamma^t."""
        steps = (1.0 - self.gamma ** int(self.horizon)) / (1.0 - self.gamma)
        return (PUBLIC_CODE_OFFSET - self.reward_offset) * steps


@dataclass(frozen=True, eq=False)
class LoanMDP:
    """A finite, separable MDP with sparse transitions.  Arrays are indexed by state s."""

    params: LoanMDPParams
    transition: tuple[sp.csr_matrix, sp.csr_matrix]
    """P[a][s, s']: CSR matrix per action (at most two successors per (s, a))."""
    reward: np.ndarray
    """R[s, a]: bank reward."""
    individual_reward: np.ndarray
    """rho[s, a] = 1[a = accept] on live states, 0 on terminal states."""
    initial_distribution: np.ndarray
    """D[s]: distribution of the entry state (after pre-simulation)."""
    alpha: np.ndarray
    beta: np.ndarray
    group: np.ndarray
    """z[s] (0 = minority, 1 = majority); constant along trajectories."""
    qualified: np.ndarray
    """y[s]: qualification at entry; constant along trajectories."""
    depth: np.ndarray
    """Decision epoch t of the state; terminal states have depth = horizon."""
    terminal: np.ndarray = field(repr=False)
    """True for the absorbing reward-free state of each (z, y)."""
    counts: np.ndarray | None = field(default=None, repr=False)
    """(repayments, defaults, rejections) per state, pre-simulation included (0 on terminals):
    the integer key by which the ABM family's observations are looked up (lookup.py)."""

    @property
    def gamma(self) -> float:
        return self.params.gamma

    @property
    def n_states(self) -> int:
        return self.reward.shape[0]

    @property
    def repay_probability(self) -> np.ndarray:
        """Posterior mean alpha / (alpha + beta) of each state."""
        return self.alpha / (self.alpha + self.beta)


def bank_reward(alpha: np.ndarray, beta: np.ndarray, params: LoanMDPParams) -> np.ndarray:
    """R(s, accept): E_p[profit] - risk term (+ reward_offset), p ~ Beta(alpha, beta).

    profit = I * P if repaid, -P on default, so E[profit | p] = (I + P) p - P.  Risk term:
    lambda Var_p[E[profit | p]] = lambda (I + P)^2 Var_Beta(p) (risk_term "variance", default)
    or lambda sd_p[E[profit | p]] = lambda (I + P) sd_Beta(p) ("sd", the public code).
    """
    total = alpha + beta
    mean = alpha / total
    variance = alpha * beta / (total ** 2 * (total + 1.0))
    scale = params.interest + params.principal
    if params.risk_term == "sd":
        risk = params.risk_weight * scale * np.sqrt(variance)
    else:
        risk = params.risk_weight * scale ** 2 * variance
    reward = scale * mean - params.principal - risk
    return reward + params.reward_offset if params.reward_offset else reward


def reject_reward(params: LoanMDPParams) -> float:
    """R(s, reject): 0 (+ reward_offset)."""
    return float(params.reward_offset)


def fairness_weight(mdp: "LoanMDP") -> np.ndarray:
    """Per-state weight w_s of the DP/EO statistic on the discounted occupancy measure:
    rho_g = sum_{s in g} w_s Lambda[s, accept] / D_0(g).  Discounted: w = 1; undiscounted:
    w_s = 1 / ((1 - gamma) gamma^t(s) divisor), since Lambda[s, a] = (1 - gamma) gamma^t P(s_t = s,
    a_t = a) when the epoch t(s) is part of the state (terminal states offer nothing: 0)."""
    params = mdp.params
    if not params.undiscounted:
        return np.ones(mdp.n_states)
    weight = 1.0 / ((1.0 - params.gamma) * params.gamma ** mdp.depth.astype(float) * params.divisor)
    return np.where(mdp.terminal, 0.0, weight)


def presimulated_distribution(prior_alpha: float, prior_beta: float,
                              steps: int) -> np.ndarray:
    """P(k repayments in `steps` forced offers) under sequential Beta updates (Beta-binomial)."""
    dist = np.zeros(steps + 1)
    dist[0] = 1.0
    for step in range(steps):
        repays = np.arange(step + 1)
        p_repay = (prior_alpha + repays) / (prior_alpha + prior_beta + step)
        new = np.zeros(steps + 1)
        new[1:step + 2] += dist[:step + 1] * p_repay
        new[:step + 1] += dist[:step + 1] * (1.0 - p_repay)
        dist = new
    return dist


def _encode(keys: np.ndarray, base: int) -> np.ndarray:
    """Injective int64 code of rows (z, y, repays, defaults, rejections)."""
    z, y, a, d, j = keys.T.astype(np.int64)
    return (((z * 2 + y) * base + a) * base + d) * base + j


def build_loan_mdp(params: LoanMDPParams | None = None) -> LoanMDP:
    """Enumerate every state reachable within `params.horizon` epochs of the entry states."""
    params = LoanMDPParams() if params is None else params
    horizon = int(params.horizon)
    base = horizon + max(params.presimulation_steps) + 2

    # Layer 0: entry states after pre-simulation, one per (z, number of repayments k).
    entry_keys, entry_mass = [], []
    for z in (MINORITY, MAJORITY):
        steps = int(params.presimulation_steps[z])
        dist = presimulated_distribution(params.prior_alpha[z], params.prior_beta[z], steps)
        for k in range(steps + 1):
            if dist[k] <= 0.0:
                continue
            mean = (params.prior_alpha[z] + k) / (params.prior_alpha[z] + params.prior_beta[z]
                                                  + steps)
            y = int(mean >= params.qualified_threshold)
            entry_keys.append((z, y, k, steps - k, 0))
            entry_mass.append(params.group_share(z) * dist[k])
    layers = [np.array(entry_keys, dtype=np.int64)]
    for _ in range(1, horizon):
        parents = layers[-1]
        children = np.concatenate([parents + [0, 0, 1, 0, 0], parents + [0, 0, 0, 1, 0],
                                   parents + [0, 0, 0, 0, 1]])
        layers.append(np.unique(children, axis=0))
    live_keys = np.concatenate(layers)
    sink_groups = np.unique(live_keys[:, :2], axis=0)
    n_live = len(live_keys)
    n_states = n_live + len(sink_groups)

    codes = _encode(live_keys, base)
    order = np.argsort(codes)
    sorted_codes = codes[order]

    def index_of(keys: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(sorted_codes, _encode(keys, base))
        return order[pos]

    z = np.concatenate([live_keys[:, 0], sink_groups[:, 0]])
    y = np.concatenate([live_keys[:, 1], sink_groups[:, 1]]).astype(bool)
    depth = np.concatenate([np.repeat(np.arange(horizon), [len(l) for l in layers]),
                            np.full(len(sink_groups), horizon)])
    terminal = depth == horizon
    prior_a = np.asarray(params.prior_alpha)[z]
    prior_b = np.asarray(params.prior_beta)[z]
    counts = np.zeros((n_states, 3))
    counts[:n_live] = live_keys[:, 2:]
    # Terminal states carry the group's prior as a nominal belief; it is never used.
    alpha = prior_a + counts[:, 0]
    beta = prior_b + counts[:, 1] + params.reject_penalty * counts[:, 2]

    sink_code = {tuple(g): n_live + i for i, g in enumerate(sink_groups)}
    sink_of_live = np.array([sink_code[(a, b)] for a, b in live_keys[:, :2]], dtype=np.int64)
    last = depth[:n_live] == horizon - 1
    inner = ~last
    live = np.arange(n_live)
    p_repay = alpha[:n_live] / (alpha[:n_live] + beta[:n_live])

    # Accept: repay or default; reject: beta += tau; last layer and terminals -> terminal.
    acc_rows = [live[inner], live[inner], live[last], n_live + np.arange(len(sink_groups))]
    acc_cols = [index_of(live_keys[inner] + [0, 0, 1, 0, 0]),
                index_of(live_keys[inner] + [0, 0, 0, 1, 0]),
                sink_of_live[last], n_live + np.arange(len(sink_groups))]
    acc_vals = [p_repay[inner], 1.0 - p_repay[inner], np.ones(last.sum()),
                np.ones(len(sink_groups))]
    rej_rows = [live[inner], live[last], n_live + np.arange(len(sink_groups))]
    rej_cols = [index_of(live_keys[inner] + [0, 0, 0, 0, 1]), sink_of_live[last],
                n_live + np.arange(len(sink_groups))]

    def csr(rows, cols, vals) -> sp.csr_matrix:
        return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows),
                                                     np.concatenate(cols))),
                             shape=(n_states, n_states))

    p_accept = csr(acc_rows, acc_cols, acc_vals)
    p_reject = csr(rej_rows, rej_cols, [np.ones(len(r)) for r in rej_rows])

    reward = np.zeros((n_states, 2))
    reward[:n_live, Action.ACCEPT] = bank_reward(alpha[:n_live], beta[:n_live], params)
    reward[:n_live, Action.REJECT] = reject_reward(params)
    individual_reward = np.zeros((n_states, 2))
    individual_reward[:n_live, Action.ACCEPT] = 1.0
    initial = np.zeros(n_states)
    initial[index_of(np.array(entry_keys, dtype=np.int64))] = entry_mass

    return LoanMDP(params=params, transition=(p_reject, p_accept), reward=reward,
                   individual_reward=individual_reward, initial_distribution=initial,
                   alpha=alpha, beta=beta, group=z.astype(np.int64), qualified=y,
                   depth=depth.astype(np.int64), terminal=terminal,
                   counts=counts.astype(np.int64))
