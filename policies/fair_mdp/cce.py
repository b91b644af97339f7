"""Algorithm 2 of seed 001: constrained cross-entropy (CCE) search over parametric policies.

pi_theta(accept | s) = sigmoid(theta . phi(s)), phi(s) = (alpha/(alpha+beta), alpha-beta, z, 1).
The search distribution is a diagonal Gaussian whose moments (E[theta], E[theta^2]) are
smoothed towards those of the elite samples.  Elites are the top ceil(n * elite_fraction)
samples under the CCE order: constraint-satisfying samples (value <= (1 - sigma) epsilon)
first, by decreasing reward; then the others by increasing constraint value.

Candidates are scored by a pluggable `evaluate(theta) -> (reward, constraint_value)`;
`ExactEvaluator` is the exact one (a rollout-based one can be plugged in unchanged).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .evaluate import Constraint, LayeredEvaluator, subpopulation_masks
from .mdp import Action, LoanMDP

Evaluate = Callable[[np.ndarray], tuple[float, float]]
"""theta -> (reward R^(theta), constraint value |gap|)."""


def loan_features(mdp: LoanMDP, include_group: bool = True) -> np.ndarray:
    """phi(s) = (alpha/(alpha+beta), alpha-beta, z, 1); z is dropped when include_group=False."""
    columns = [mdp.repay_probability, mdp.alpha - mdp.beta]
    if include_group:
        columns.append(mdp.group.astype(float))
    columns.append(np.ones(mdp.n_states))
    return np.column_stack(columns)


def sigmoid_policy(features: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """pi[s] = sigmoid(theta . phi(s)), computed without overflow."""
    logits = features @ np.asarray(theta, dtype=float)
    return 0.5 * (1.0 + np.tanh(0.5 * logits))


class ExactEvaluator:
    """evaluate(theta) by exact discounted occupancy on the enumerated MDP."""

    def __init__(self, mdp: LoanMDP, constraint: Constraint, features: np.ndarray):
        if features.shape[0] != mdp.n_states:
            raise ValueError(f"features must have {mdp.n_states} rows, got {features.shape}")
        self.mdp = mdp
        self.constraint = Constraint(constraint)
        self.features = features
        self._layered = LayeredEvaluator(mdp)
        masks = subpopulation_masks(mdp, self.constraint)
        mass = [mdp.initial_distribution[m].sum() for m in masks]
        if min(mass) <= 0:
            raise ValueError(f"constraint {self.constraint.value!r} compares an empty "
                             f"sub-population")
        # gap = Lambda[:, accept] . gap_weight; reward = D . r_reject + Lambda[:, accept] . r_gain
        self._gap_weight = mdp.individual_reward[:, Action.ACCEPT] * (
            masks[1] / mass[1] - masks[0] / mass[0])
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
    """Per-iteration arrays: elite_reward, elite_constraint, feasible_fraction, max_std."""


def elite_indices(rewards: np.ndarray, values: np.ndarray, threshold: float,
                  n_elite: int) -> np.ndarray:
    """CCE order: feasible by decreasing reward, then infeasible by increasing violation."""
    violation = np.maximum(values - threshold, 0.0)
    order = np.lexsort((-rewards, violation))
    return order[:n_elite]


def constrained_cross_entropy(evaluate: Evaluate, dim: int, config: CCEConfig,
                              rng: np.random.Generator) -> CCEResult:
    """Run Algorithm 2; all randomness comes from `rng`."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    n_elite = max(1, math.ceil(config.n_samples * config.elite_fraction))
    mean = np.zeros(dim)
    second = np.full(dim, config.initial_std ** 2)
    best = (None, -np.inf, np.inf)          # feasible: (theta, reward, value)
    least_bad = (None, -np.inf, np.inf)     # fallback: smallest constraint value
    history = {k: [] for k in ("elite_reward", "elite_constraint", "feasible_fraction",
                               "max_std")}

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
        mean = a * elites.mean(axis=0) + (1.0 - a) * mean
        second = a * (elites ** 2).mean(axis=0) + (1.0 - a) * second
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
