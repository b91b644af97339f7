"""Algorithm 2 of seed 001: constrained cross-entropy (CCE) search over parametric policies.

pi_theta(accept | s) = sigmoid(theta . phi(s)).  Policy classes (``policy_class``):
  linear    phi(s) = (alpha/(alpha+beta), alpha-beta, z, 1): the public code's "version 1"
            inputs with a linear layer (4 parameters; the default);
  extended  the linear features plus y (qualified at entry), t/H (epoch), z mu, z (alpha-beta),
            mu^2 and log(alpha+beta) (10 parameters);
  tabular   one logit per live state (phi = the indicator of the state): the class contains
            every deterministic policy, but the search has as many dimensions as states.
The search distribution is a diagonal Gaussian whose moments (E[theta], E[theta^2]) are
smoothed towards the weighted moments of the elite samples.  Elites are the top
ceil(n * elite_fraction) samples under the CCE order: constraint-satisfying samples (value <=
(1 - sigma) epsilon) first, by decreasing reward; then the others by increasing constraint
value.  Elite weights (``elite_weighting``):
  reward       proportional to R(theta) - b (the seed: "directly weighting the probability of
               theta by R(theta)"); b = min(0, a lower bound of R over all policies) when the
               evaluator knows one (``reward_lower_bound``), so on the public code's +2 scale,
               where every R > 0, the weights are R itself; without a bound, b = 0 and an
               iteration whose elites have a reward <= 0 falls back to equal weights (default);
  exponential  exp((R - R_min) / (0.2 (R_max - R_min))) over the elites (the public code;
               scale 1 when the range is below 1e-5);
  equal        1 / n' each.

Candidates are scored by a pluggable `evaluate(theta) -> (reward, constraint_value)`;
`ExactEvaluator` is the exact one (a rollout-based one can be plugged in unchanged).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.sparse as sp

from abm.families.loan_mdp.evaluate import Constraint, LayeredEvaluator, subpopulation_masks
from abm.families.loan_mdp.mdp import Action, LoanMDP, fairness_weight

POLICY_CLASSES = ("linear", "extended", "tabular")
ELITE_WEIGHTINGS = ("reward", "exponential", "equal")

Evaluate = Callable[[np.ndarray], tuple[float, float]]
"""theta -> (reward R^(theta), constraint value |gap|)."""


def belief_features(policy_class: str, alpha, beta, z, qualified, epoch, horizon: int,
                    include_group: bool = True) -> np.ndarray:
    """phi for the ``linear`` and ``extended`` classes from belief, group, qualification and
    epoch arrays (shared by the exact evaluator and the rollout lender); z-terms are dropped
    when include_group=False."""
    if policy_class not in ("linear", "extended"):
        raise ValueError(f"belief_features: policy_class must be linear or extended, got {policy_class!r}")
    alpha, beta = np.asarray(alpha, dtype=float), np.asarray(beta, dtype=float)
    z = np.asarray(z, dtype=float)
    mean = alpha / (alpha + beta)
    columns = [mean, alpha - beta]
    if include_group:
        columns.append(z)
    columns.append(np.ones(len(alpha)))
    if policy_class == "extended":
        columns += [np.asarray(qualified, dtype=float), np.asarray(epoch, dtype=float) / max(int(horizon), 1)]
        if include_group:
            columns += [z * mean, z * (alpha - beta)]
        columns += [mean ** 2, np.log(alpha + beta)]
    return np.column_stack(columns)


def loan_features(mdp: LoanMDP, include_group: bool = True, policy_class: str = "linear"):
    """phi(s) for every state: linear (alpha/(alpha+beta), alpha-beta, z, 1), extended, or
    tabular (a sparse indicator of each live state; terminal rows are empty)."""
    if policy_class not in POLICY_CLASSES:
        raise ValueError(f"policy_class must be one of {', '.join(POLICY_CLASSES)}, got {policy_class!r}")
    if policy_class == "tabular":
        live = np.flatnonzero(~mdp.terminal)
        return sp.csr_matrix((np.ones(len(live)), (live, np.arange(len(live)))),
                             shape=(mdp.n_states, len(live)))
    return belief_features(policy_class, mdp.alpha, mdp.beta, mdp.group, mdp.qualified, mdp.depth,
                           mdp.params.horizon, include_group)


def sigmoid_policy(features, theta: np.ndarray) -> np.ndarray:
    """pi[s] = sigmoid(theta . phi(s)), computed without overflow (dense or sparse phi)."""
    logits = np.asarray(features @ np.asarray(theta, dtype=float)).ravel()
    return 0.5 * (1.0 + np.tanh(0.5 * logits))


def reward_lower_bound(mdp: LoanMDP) -> float:
    """min_{s live, a} R[s, a]: no policy's <Lambda, R> is below it (Lambda is a distribution
    over the live and terminal states, and terminal states earn 0)."""
    live = ~mdp.terminal
    return float(min(mdp.reward[live].min(), 0.0))


def elite_weights(rewards: np.ndarray, weighting: str, baseline: float | None = None,
                  temperature: float = 0.2) -> np.ndarray | None:
    """Normalised weights of the elites' rewards; None means equal weights."""
    if weighting == "equal":
        return None
    if weighting == "exponential":
        scale = (rewards.max() - rewards.min()) * temperature
        if scale < 1e-5:   # the public code's guard
            scale = 1.0
        weights = np.exp((rewards - rewards.min()) / scale)
    elif weighting == "reward":
        weights = rewards - (0.0 if baseline is None else min(baseline, 0.0))
        if not np.all(np.isfinite(weights)) or weights.min() <= 0.0:
            return None    # R-weighting undefined for a reward <= 0: equal weights
    else:
        raise ValueError(f"elite_weighting must be one of {', '.join(ELITE_WEIGHTINGS)}, got {weighting!r}")
    return weights / weights.sum()


class ExactEvaluator:
    """evaluate(theta) by exact discounted occupancy on the enumerated MDP."""

    def __init__(self, mdp: LoanMDP, constraint: Constraint, features):
        if features.shape[0] != mdp.n_states:
            raise ValueError(f"features must have {mdp.n_states} rows, got {features.shape}")
        self.mdp = mdp
        self.constraint = Constraint(constraint)
        self.features = features
        self.reward_lower_bound = reward_lower_bound(mdp)
        self._layered = LayeredEvaluator(mdp)
        masks = subpopulation_masks(mdp, self.constraint)
        mass = [mdp.initial_distribution[m].sum() for m in masks]
        if min(mass) <= 0:
            raise ValueError(f"constraint {self.constraint.value!r} compares an empty "
                             f"sub-population")
        # gap = Lambda[:, accept] . gap_weight; reward = D . r_reject + Lambda[:, accept] . r_gain
        self._gap_weight = mdp.individual_reward[:, Action.ACCEPT] * (
            masks[1] / mass[1] - masks[0] / mass[0])
        if mdp.params.undiscounted:
            self._gap_weight = self._gap_weight * fairness_weight(mdp)
        self._reward_reject = mdp.reward[:, Action.REJECT].copy()
        self._reward_gain = mdp.reward[:, Action.ACCEPT] - mdp.reward[:, Action.REJECT]

    def policy(self, theta: np.ndarray) -> np.ndarray:
        return sigmoid_policy(self.features, theta)

    def __call__(self, theta: np.ndarray) -> tuple[float, float]:
        accept = self.policy(theta)
        occupancy = self._layered.state_occupancy(accept)
        accepted = occupancy * accept
        reward = float(occupancy @ self._reward_reject + accepted @ self._reward_gain)
        return reward, float(abs(accepted @ self._gap_weight))


@dataclass(frozen=True)
class CCEConfig:
    """Hyper-parameters of Algorithm 2 (defaults: seed 001 public code, REFERENCE.md)."""

    n_samples: int = 100
    """n: policies sampled per iteration."""
    elite_fraction: float = 0.1
    """mu: fraction of samples kept as elites (n' = ceil(n mu))."""
    n_iterations: int = 80
    """Iterations of the search-distribution update."""
    smoothing: float = 0.5
    """alpha: weight of the elite moments in the smoothed update."""
    epsilon: float = 0.1
    """Fairness tolerance of the constraint |gap| <= epsilon."""
    sigma: float = 0.05
    """Constraint margin: samples must satisfy value <= (1 - sigma) epsilon."""
    initial_std: float = 1.0
    """Standard deviation of the initial Gaussian (mean 0)."""
    min_std: float = 1e-4
    """Floor on the search standard deviation (keeps the Gaussian proper)."""
    elite_weighting: str = "reward"
    """reward (the seed: proportional to R), exponential (the public code) or equal."""
    temperature: float = 0.2
    """exponential: weights exp((R - R_min) / (temperature (R_max - R_min)))."""

    def __post_init__(self) -> None:
        if self.n_samples < 1 or self.n_iterations < 0:
            raise ValueError(f"n_samples >= 1 and n_iterations >= 0 required, got "
                             f"{self.n_samples!r}, {self.n_iterations!r}")
        for name in ("elite_fraction", "smoothing"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in (0, 1], got {getattr(self, name)!r}")
        if not 0.0 <= self.sigma < 1.0:
            raise ValueError(f"sigma must lie in [0, 1), got {self.sigma!r}")
        if self.epsilon < 0 or self.initial_std <= 0 or self.min_std <= 0:
            raise ValueError("epsilon >= 0, initial_std > 0 and min_std > 0 required")
        if self.elite_weighting not in ELITE_WEIGHTINGS:
            raise ValueError(f"elite_weighting must be one of {', '.join(ELITE_WEIGHTINGS)}, "
                             f"got {self.elite_weighting!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")

    @property
    def threshold(self) -> float:
        """The shrunk tolerance (1 - sigma) epsilon used in the feasibility check."""
        return (1.0 - self.sigma) * self.epsilon


@dataclass(frozen=True)
class CCEResult:
    """Outcome of a CCE run."""

    theta: np.ndarray
    """Highest-reward feasible parameter seen (samples and iterate means); if none was
    feasible, the one with the smallest constraint value."""
    reward: float
    constraint_value: float
    feasible: bool
    mean: np.ndarray
    """Mean of the final search distribution."""
    history: dict = field(repr=False)
    """Per-iteration arrays: elite_reward, elite_constraint, feasible_fraction, max_std,
    weight_max (the largest normalised elite weight)."""


def elite_indices(rewards: np.ndarray, values: np.ndarray, threshold: float,
                  n_elite: int) -> np.ndarray:
    """CCE order: feasible by decreasing reward, then infeasible by increasing violation."""
    violation = np.maximum(values - threshold, 0.0)
    order = np.lexsort((-rewards, violation))
    return order[:n_elite]


def constrained_cross_entropy(evaluate: Evaluate, dim: int, config: CCEConfig,
                              rng: np.random.Generator,
                              reward_baseline: float | None = None) -> CCEResult:
    """Run Algorithm 2; all randomness comes from `rng`.  ``reward_baseline``: a lower bound of
    the reward over all policies (the ``reward`` weighting uses R - min(0, baseline))."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    n_elite = max(1, math.ceil(config.n_samples * config.elite_fraction))
    mean = np.zeros(dim)
    second = np.full(dim, config.initial_std ** 2)
    best = (None, -np.inf, np.inf)          # feasible: (theta, reward, value)
    least_bad = (None, -np.inf, np.inf)     # fallback: smallest constraint value
    history = {k: [] for k in ("elite_reward", "elite_constraint", "feasible_fraction",
                               "max_std", "weight_max")}

    def consider(theta: np.ndarray, reward: float, value: float) -> None:
        nonlocal best, least_bad
        if value <= config.threshold and reward > best[1]:
            best = (theta.copy(), reward, value)
        if value < least_bad[2]:
            least_bad = (theta.copy(), reward, value)

    for _ in range(config.n_iterations):
        std = np.sqrt(np.maximum(second - mean ** 2, config.min_std ** 2))
        thetas = mean + std * rng.standard_normal((config.n_samples, dim))
        scores = np.array([evaluate(theta) for theta in thetas], dtype=float)
        rewards, values = scores[:, 0], scores[:, 1]
        for theta, reward, value in zip(thetas, rewards, values):
            consider(theta, reward, value)
        chosen = elite_indices(rewards, values, config.threshold, n_elite)
        elites = thetas[chosen]
        a = config.smoothing
        weights = elite_weights(rewards[chosen], config.elite_weighting, reward_baseline,
                                config.temperature)
        if weights is None:
            mean = a * elites.mean(axis=0) + (1.0 - a) * mean
            second = a * (elites ** 2).mean(axis=0) + (1.0 - a) * second
        else:
            mean = a * (weights @ elites) + (1.0 - a) * mean
            second = a * (weights @ elites ** 2) + (1.0 - a) * second
        history["weight_max"].append(1.0 / len(chosen) if weights is None else float(weights.max()))
        reward_mean, value_mean = evaluate(mean)
        consider(mean, reward_mean, value_mean)
        history["elite_reward"].append(rewards[chosen].mean())
        history["elite_constraint"].append(values[chosen].mean())
        history["feasible_fraction"].append(float(np.mean(values <= config.threshold)))
        history["max_std"].append(float(std.max()))

    feasible = best[0] is not None
    if not feasible and least_bad[0] is None:
        reward_mean, value_mean = evaluate(mean)
        least_bad = (mean.copy(), reward_mean, value_mean)
    theta, reward, value = best if feasible else least_bad
    return CCEResult(theta=theta, reward=float(reward), constraint_value=float(value),
                     feasible=feasible, mean=mean,
                     history={k: np.asarray(v) for k, v in history.items()})
