"""LOANLY (seed 000 §3.2): a performative population built from UCI Adult.

Pure functions of (config, rng): the wealth-score regression, the sampled population with its
fixed financial types, and the initial linear approval model. See docs/MODEL.md, "Loanly".
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from abm.data import load_adult
from abm.errors import UserError

FEATURES = ("age", "education_num", "hours_per_week", "log_capital_gain", "log_capital_loss")
GROUPS = ("M", "F")  # index 0 = male ("red"), 1 = female ("blue"); the indicator g is the index


@dataclass(frozen=True)
class ApprovalModel:
    """h_theta(x, g) = theta_g * g + theta_x * (w - wealth_mean) / wealth_std + b."""

    theta_g: float
    theta_x: float
    bias: float
    wealth_mean: float
    wealth_std: float

    def logit(self, wealth: np.ndarray, group: np.ndarray) -> np.ndarray:
        return self.theta_g * group + self.theta_x * (wealth - self.wealth_mean) / self.wealth_std + self.bias

    def prob(self, wealth: np.ndarray, group: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.logit(wealth, group)))

    def with_theta(self, theta_g: float, theta_x: float, bias: float) -> "ApprovalModel":
        return ApprovalModel(float(theta_g), float(theta_x), float(bias), self.wealth_mean, self.wealth_std)


def adult_features(adult: pd.DataFrame) -> pd.DataFrame:
    """The regression's inputs: age, education (years), hours/week, log(1+capital gain/loss)."""
    return pd.DataFrame({
        "age": adult["age"].astype(float),
        "education_num": adult["education_num"].astype(float),
        "hours_per_week": adult["hours_per_week"].astype(float),
        "log_capital_gain": np.log1p(adult["capital_gain"].astype(float)),
        "log_capital_loss": np.log1p(adult["capital_loss"].astype(float)),
    })


@lru_cache(maxsize=4)
def wealth_scores(data_dir: str | None = None) -> pd.DataFrame:
    """Every Adult row with its wealth score sc = P(income > 50K | features) and group.

    The logistic regression is fit on all 48,842 rows (train + test), standardised features,
    L2 penalty C = 1 (scikit-learn's default); sex is excluded from the features.
    """
    adult = load_adult(data_dir)
    x = adult_features(adult).to_numpy()
    y = (adult["income"] == ">50K").to_numpy().astype(int)
    mean, std = x.mean(axis=0), x.std(axis=0)
    from sklearn.linear_model import LogisticRegression  # here: scikit-learn costs ~0.5 s to import

    model = LogisticRegression(C=1.0, max_iter=1000).fit((x - mean) / std, y)
    score = model.predict_proba((x - mean) / std)[:, 1]
    group = np.where(adult["sex"] == "Male", 0, 1)
    return pd.DataFrame({"adult_row": np.arange(len(adult)), "group": group, "score": score})


def fit_approval_model(wealth: np.ndarray, group: np.ndarray, target: np.ndarray,
                       wealth_mean: float, wealth_std: float) -> ApprovalModel | None:
    """Logistic regression of ``target`` on (standardised wealth, group indicator); None when
    the target has a single class (nothing to learn from)."""
    target = np.asarray(target).astype(int)
    if target.min() == target.max():
        return None
    x = np.column_stack([group.astype(float), (wealth - wealth_mean) / wealth_std])
    if np.ptp(x[:, 0]) == 0:  # one group only: its coefficient is not identified
        x[:, 0] = 0.0
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1.0, max_iter=1000).fit(x, target)
    theta_g, theta_x = model.coef_[0]
    return ApprovalModel(float(theta_g), float(theta_x), float(model.intercept_[0]), wealth_mean, wealth_std)


def fit_approval_model_prior(wealth: np.ndarray, group: np.ndarray, target: np.ndarray,
                             prior: ApprovalModel, precision: float = 1.0) -> ApprovalModel:
    """MAP logistic regression of ``target`` on (group, standardised wealth, 1) with a Gaussian
    prior N(prior's (theta_g, theta_x, b), I / precision): minimises

        sum_i [log(1 + e^{z_i}) - y_i z_i] + precision / 2 * ||theta - theta_prior||^2.

    The objective is strictly convex and smooth in the targets, so the fit is continuous in the
    decisions: a single-class episode moves the model towards that class by a finite step
    instead of being skipped, and 99% approvals publish nearly what 100% does. Newton's method
    with step halving (3 parameters; deterministic). The standardisation is the prior's."""
    y = np.asarray(target, dtype=float)
    x = np.column_stack([np.asarray(group, dtype=float), (np.asarray(wealth, dtype=float) - prior.wealth_mean)
                         / prior.wealth_std, np.ones(len(y))])
    theta0 = np.array([prior.theta_g, prior.theta_x, prior.bias], dtype=float)

    def loss(theta: np.ndarray) -> float:
        z = x @ theta
        return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * precision * np.sum((theta - theta0) ** 2))

    theta, current = theta0.copy(), loss(theta0)
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(x @ theta)))
        grad = x.T @ (p - y) + precision * (theta - theta0)
        hess = (x * (p * (1.0 - p))[:, None]).T @ x + precision * np.eye(3)
        step = np.linalg.solve(hess, grad)
        size = 1.0
        while True:
            trial = theta - size * step
            value = loss(trial)
            if value <= current or size < 1e-8:
                break
            size /= 2.0
        theta, done = trial, abs(current - value) <= 1e-12 * max(1.0, abs(current))
        current = value
        if done or np.max(np.abs(size * step)) < 1e-10:
            break
    return ApprovalModel(float(theta[0]), float(theta[1]), float(theta[2]), prior.wealth_mean, prior.wealth_std)


def generate(pop, rng: np.random.Generator) -> tuple[pd.DataFrame, ApprovalModel]:
    """Sample the population (one row per applicant, sorted by group) and fit the approval model.

    ``pop`` is the scenario's ``population`` section (LoanlyPopulation).
    """
    scores = wealth_scores(pop.data_dir)
    sizes = (pop.n_male, pop.n_female)
    parts = []
    for g, n in enumerate(sizes):
        pool = scores[scores["group"] == g]
        if n > len(pool) and not pop.sample_with_replacement:
            raise UserError(
                f"population.n_{'male' if g == 0 else 'female'}: {n} exceeds the {len(pool)} {GROUPS[g]} rows "
                f"of UCI Adult (set population.sample_with_replacement: true to resample)")
        take = rng.choice(len(pool), size=n, replace=pop.sample_with_replacement)
        parts.append(pool.iloc[take])
    sampled = pd.concat(parts, ignore_index=True)
    n_total = len(sampled)
    score = sampled["score"].to_numpy()
    group = sampled["group"].to_numpy().astype(np.int16)
    wealth = pop.wealth_min + pop.wealth_span * score
    loan = np.clip(rng.normal(pop.loan_mean, pop.loan_sd, n_total), pop.loan_min, pop.loan_max)
    low, high = pop.default_range
    p_default = (low + high) / 2.0
    default = rng.random(n_total) < p_default
    gain = (pop.tau_inv - pop.tau_interest) * loan
    label = score >= 0.5
    frame = pd.DataFrame({
        "agent_id": np.arange(n_total, dtype=np.int64),
        "group": group,
        "group_name": pd.Categorical.from_codes(group, categories=list(GROUPS)),
        "adult_row": sampled["adult_row"].to_numpy(),
        "score": score,
        "wealth": wealth,
        "label": label,
        "loan_amount": loan,
        "default": default,
        "gain": gain,
    })
    w_mean, w_std = float(wealth.mean()), float(wealth.std()) or 1.0
    model = fit_approval_model(wealth, group, label, w_mean, w_std)
    if model is None:  # a population with a single label class: a flat prior
        model = ApprovalModel(0.0, 0.0, 0.0, w_mean, w_std)
    frame["approval_score"] = model.prob(wealth, group)
    frame["application_weight"] = 1.0 + pop.selection_strength * frame["approval_score"]
    return frame, model
