"""Helpers of the ``beta_belief`` family: cohort entry draws, the FICO prior fit and the pooled
estimators with their standard errors (docs/MODEL.md, seed 001)."""

from __future__ import annotations

import numpy as np

from abm.families.loan_mdp.mdp import LoanMDPParams


def fit_fico_priors(data_dir: str | None = None) -> tuple[list[float], list[float], float]:
    """Beta(alpha_z, beta_z) by the method of moments on the distribution of P(repay) =
    1 - default rate over TransRisk scores (SSA-count weighted); the majority share from the
    SSA totals. Returns ([alpha_min, alpha_maj], [beta_min, beta_maj], majority share)."""
    from abm.data import load_fico

    tables = load_fico(data_dir)
    cdf, perf, totals = tables["cdf"], tables["performance"], tables["totals"]
    fitted = []
    for groups in (("black", "hispanic", "asian"), ("white",)):
        weights, probs = [], []
        for g in groups:
            pmf = np.diff(np.concatenate([[0.0], cdf[g].to_numpy() / 100.0]))
            weights.append(pmf / pmf.sum() * float(totals[g].iloc[0]))
            probs.append(1.0 - perf[g].to_numpy() / 100.0)
        w, p = np.concatenate(weights), np.concatenate(probs)
        w = w / w.sum()
        mean = float(w @ p)
        var = float(w @ (p - mean) ** 2)
        k = mean * (1.0 - mean) / var - 1.0
        fitted.append((mean * k, (1.0 - mean) * k))
    counts = totals.iloc[0]
    share = float(counts["white"] / counts[["white", "black", "hispanic", "asian"]].sum())
    return [fitted[0][0], fitted[1][0]], [fitted[0][1], fitted[1][1]], share


def draw_cohort(params: LoanMDPParams, groups: np.ndarray, rng: np.random.Generator):
    """Entry states: T_z forced offers from the group prior (sequential Beta updates).
    Returns (repayments, defaults, qualified)."""
    z = groups.astype(np.int64)
    a0, b0 = np.asarray(params.prior_alpha)[z], np.asarray(params.prior_beta)[z]
    steps_z = np.asarray(params.presimulation_steps)[z]
    repays = np.zeros(len(z), np.int64)
    for step in range(int(steps_z.max(initial=0))):
        live = step < steps_z
        p = (a0 + repays) / (a0 + b0 + step)
        repays += (live & (rng.random(len(z)) < p)).astype(np.int64)
    defaults = steps_z - repays
    mean = (a0 + repays) / (a0 + b0 + steps_z)
    return repays, defaults, mean >= params.qualified_threshold


class Pool:
    """Running per-(group, qualified) sums of X_R and X_O for pooled estimates with errors."""

    def __init__(self):
        self.n = np.zeros((2, 2))
        self.r = np.zeros((2, 2, 2))   # [z, y, moment]
        self.o = np.zeros((2, 2, 2))

    def add(self, x_r, x_o, z, q) -> None:
        for g in range(2):
            for y in range(2):
                sel = (z == g) & (q == bool(y))
                self.n[g, y] += sel.sum()
                self.r[g, y] += (x_r[sel].sum(), (x_r[sel] ** 2).sum())
                self.o[g, y] += (x_o[sel].sum(), (x_o[sel] ** 2).sum())

    @staticmethod
    def _mean_var(n, moments):
        if n < 2:
            return float("nan"), float("nan")
        mean = moments[0] / n
        return mean, max(moments[1] / n - mean ** 2, 0.0) * n / (n - 1) / n  # variance of the mean

    def estimates(self, shares) -> dict[str, float]:
        r = [self._mean_var(self.n[g].sum(), self.r[g].sum(axis=0)) for g in range(2)]
        o = [self._mean_var(self.n[g].sum(), self.o[g].sum(axis=0)) for g in range(2)]
        q = [self._mean_var(self.n[g, 1], self.o[g, 1]) for g in range(2)]
        return {
            "sim_reward": float(shares @ [m for m, _ in r]),
            "sim_reward_se": float(np.sqrt(sum(s ** 2 * v for s, (_, v) in zip(shares, r)))),
            "sim_dp_gap": o[1][0] - o[0][0], "sim_dp_gap_se": float(np.sqrt(o[0][1] + o[1][1])),
            "sim_eo_gap": q[1][0] - q[0][0], "sim_eo_gap_se": float(np.sqrt(q[0][1] + q[1][1])),
        }
