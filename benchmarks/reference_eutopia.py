"""A vectorised, discrete-time numpy implementation of the Eutopia dynamics: the benchmark's
reference, written independently of the event-driven engine (``abm.engine`` +
``abm.families.eutopia``) and sharing with it only the LOANLY population generator, the
approval-model fit and the policy objects.

Time advances in fixed steps of ``dt = episodes.decision_interval``: the step *is* the bank's
decision epoch. In each step every applicant i applies with probability
``1 - exp(-Lambda_i)``, where ``Lambda_i`` is the exact integral of the individual Hawkes rate
``lambda_g(t) w_i / N_g`` over the step. Between epochs nothing moves the rate except the
deterministic decay of the excitation (approvals, wealth and weights change only at epochs when
loans resolve at once), so ``Lambda_i = (w_i / N_g) (f(mu_g) dt + E_g (1 - exp(-beta dt)) / beta)``
and the reference samples the same process as the engine, up to the probability that one
applicant applies twice within one step (O(Lambda_i^2), about 1e-8 at the default rates).

The cost is O(N) per step whatever the number of applications: agents x time, the cost model
the event-driven engine is built to avoid. Supported: ``review: batch``,
``excite_on: approvals``, ``loan_term: 0`` (the defaults); anything else raises UserError.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from abm.engine import STREAMS, Batch
from abm.errors import UserError
from abm.families import eutopia, loanly


class ReferenceEutopia:
    """Discrete-time Eutopia on the scenario's population with the scenario's policy."""

    def __init__(self, scenario, policy=None, population: tuple[pd.DataFrame, Any] | None = None):
        ep, arr, dyn = scenario.episodes, scenario.arrivals, scenario.dynamics
        if scenario.family != "eutopia":
            raise UserError(f"reference: family must be eutopia, got {scenario.family!r}")
        if ep.review != "batch" or arr.excite_on != "approvals" or dyn.loan_term != 0:
            raise UserError("reference: supports episodes.review=batch, arrivals.excite_on=approvals, "
                            "dynamics.loan_term=0 only")
        # The engine's stream layout, so the population (and only the population) is identical
        # for the same seed; arrivals and decisions use this module's own streams.
        seeds = np.random.SeedSequence(scenario.seed).spawn(len(STREAMS))
        rngs = {name: np.random.default_rng(s) for name, s in zip(STREAMS, seeds)}
        self.rng = np.random.default_rng(seeds[STREAMS.index("arrivals")].spawn(1)[0])
        self.sc, self.pop, self.arr, self.dyn = scenario, scenario.population, arr, dyn
        frame, self.approval = population if population is not None else loanly.generate(self.pop, rngs["population"])
        self.group = frame["group"].to_numpy(np.int64)
        self.wealth = frame["wealth"].to_numpy(np.float64).copy()
        self.loan = frame["loan_amount"].to_numpy(np.float64)
        self.default = frame["default"].to_numpy(bool)
        self.gain = frame["gain"].to_numpy(np.float64)
        self.label = frame["label"].to_numpy(bool)
        self.sizes = np.bincount(self.group, minlength=2).astype(float)
        self.dt = ep.decision_interval
        self.steps_per_episode = ep.epochs_per_episode
        self.decay_step = np.exp(-arr.decay * self.dt)
        self.excitation = np.zeros(2)  # E_g at the start of the current step
        self.mu0 = self._mean_wealth()
        self.mu_episode_start = self.mu0.copy()
        self.cum_defaults = np.zeros(2)
        self.cum_resolved = np.zeros(2)
        self.cumulative_profit = 0.0
        self.episode = 0
        self.time = 0.0
        self.rows: list[dict[str, Any]] = []
        self._refresh_weights()
        if policy is None:
            from abm.registry import build

            policy = build(scenario.policy, self._context(), rngs["policy"])
        self.policy = policy
        self.decision_rng = rngs["decisions"]
        theta = policy.approval_model()
        if theta is not None:
            self.approval = self.approval.with_theta(*theta)
            self._refresh_weights()

    def _context(self) -> eutopia.LoanlyContext:
        def columns() -> dict[str, np.ndarray]:
            return {"group": self.group.astype(np.int16), "wealth": self.wealth, "label": self.label,
                    "weight": self.weight, "loan_amount": self.loan, "default": self.default}

        return eutopia.LoanlyContext(eutopia.OBS_FIELDS, loanly.GROUPS, self.pop.repay_rate, columns,
                                     family="eutopia", obs_scale=eutopia.OBS_SCALE)

    def _mean_wealth(self) -> np.ndarray:
        return np.bincount(self.group, weights=self.wealth, minlength=2) / self.sizes

    def _refresh_weights(self) -> None:
        self.score = self.approval.prob(self.wealth, self.group)
        self.weight = 1.0 + self.pop.selection_strength * self.score

    def _base(self) -> np.ndarray:
        return np.maximum(0.0, self.arr.base_intercept + self.arr.base_slope * self._mean_wealth())

    # -- one decision epoch -------------------------------------------------------------------
    def step(self) -> None:
        base = self._base()
        integral = base * self.dt + self.excitation * (1.0 - self.decay_step) / self.arr.decay
        per_capita = integral / self.sizes
        p_apply = -np.expm1(-per_capita[self.group] * self.weight)
        applied = np.flatnonzero(self.rng.random(len(p_apply)) < p_apply)
        self.time += self.dt
        decayed = self.excitation * self.decay_step
        self._counts["applications"] += np.bincount(self.group[applied], minlength=2)
        approvals = np.zeros(2)
        if len(applied):
            approvals = self._decide(applied, base + decayed)
        self.excitation = decayed + self.arr.excitation * approvals

    def _observe(self, idx: np.ndarray, intensity: np.ndarray) -> np.ndarray:
        mu = self._mean_wealth()
        rho = np.divide(self.cum_defaults, self.cum_resolved, out=np.zeros(2), where=self.cum_resolved > 0)
        g = self.group[idx]
        return np.column_stack([
            self.wealth[idx] / eutopia.WEALTH_SCALE, g.astype(float),
            np.full(len(idx), mu[0] / eutopia.WEALTH_SCALE), np.full(len(idx), mu[1] / eutopia.WEALTH_SCALE),
            np.full(len(idx), intensity[0]), np.full(len(idx), intensity[1]),
            np.full(len(idx), rho[0]), np.full(len(idx), rho[1]),
            self.score[idx], np.full(len(idx), self.approval.theta_g), np.full(len(idx), self.approval.theta_x),
            self.loan[idx] / eutopia.LOAN_SCALE,
        ])

    def _decide(self, idx: np.ndarray, intensity: np.ndarray) -> np.ndarray:
        obs = self._observe(idx, intensity)
        g = self.group[idx]
        names = getattr(self.policy, "privileged", ())
        cols = {"default": self.default, "label": self.label, "gain": self.gain, "wealth": self.wealth}
        info = Batch(idx, g.astype(np.int16), self.time, self.episode, {n: cols[n][idx] for n in names if n in cols})
        probs = np.asarray(self.policy.decide(obs, info), dtype=float)
        approved = self.decision_rng.random(len(idx)) < probs
        self.policy.on_decisions(obs, info, probs, approved)
        self._decisions.append((self.wealth[idx].copy(), g, approved))
        won = idx[approved]
        won_g = g[approved]
        approvals = np.bincount(won_g, minlength=2).astype(float)
        self._counts["approvals"] += approvals
        self._recipients[won] = True
        if len(won):
            repaid = ~self.default[won]
            profit = np.where(repaid, self.pop.tau_interest * self.loan[won], -self.loan[won])
            np.add.at(self.wealth, won[repaid], self.gain[won[repaid]])
            payers = won[repaid]
            self.score[payers] = self.approval.prob(self.wealth[payers], self.group[payers])
            self.weight[payers] = 1.0 + self.pop.selection_strength * self.score[payers]
            self._counts["repayments"] += np.bincount(won_g[repaid], minlength=2)
            self._counts["defaults"] += np.bincount(won_g[~repaid], minlength=2)
            self._counts["profit"] += np.bincount(won_g, weights=profit, minlength=2)
            self.cum_defaults += np.bincount(won_g[~repaid], minlength=2)
            self.cum_resolved += np.bincount(won_g, minlength=2)
            self.policy.on_outcomes(eutopia.Outcomes(won, won_g.astype(np.int16), obs[approved], repaid, profit))
        return approvals

    # -- episodes -------------------------------------------------------------------------------
    def run_episode(self) -> dict[str, Any]:
        self._counts = {k: np.zeros(2) for k in ("applications", "approvals", "repayments", "defaults", "profit")}
        self._recipients = np.zeros(len(self.wealth), bool)
        self._decisions: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for _ in range(self.steps_per_episode):
            self.step()
        row = self._metrics()
        self.rows.append(row)
        mu = self._mean_wealth()
        self.policy.on_episode_end({
            "groups": loanly.GROUPS, "sizes": self.sizes.copy(), "mean_wealth": mu.copy(),
            "mean_wealth_change": mu - self.mu_episode_start, "profit": self._counts["profit"].copy(),
            "applications": self._counts["applications"].copy(), "approvals": self._counts["approvals"].copy(),
            "episode": self.episode,
        })
        self._republish()
        self.mu_episode_start = mu
        self.episode += 1
        return row

    def _republish(self) -> None:
        published = getattr(self.policy, "approval_model", None)
        theta = published() if callable(published) else None
        if theta is not None:
            self.approval = self.approval.with_theta(*theta)
        elif self.dyn.approval_model == "refit" and self._decisions:
            wealth = np.concatenate([d[0] for d in self._decisions])
            if len(wealth) < self.dyn.refit_min_decisions:
                return
            fitted = loanly.fit_approval_model(wealth, np.concatenate([d[1] for d in self._decisions]),
                                               np.concatenate([d[2] for d in self._decisions]),
                                               self.approval.wealth_mean, self.approval.wealth_std)
            if fitted is None:
                return
            self.approval = fitted
        else:
            return
        self._refresh_weights()

    def _metrics(self) -> dict[str, Any]:
        mu = self._mean_wealth()
        c = self._counts
        profit = float(c["profit"].sum())
        self.cumulative_profit += profit
        row: dict[str, Any] = {"episode": self.episode, "time": self.time, "profit": profit,
                               "cumulative_profit": self.cumulative_profit, "wealth_gap": mu[0] - mu[1]}
        for g, name in enumerate(loanly.GROUPS):
            row[f"mean_wealth_{name}"] = mu[g]
            row[f"applications_{name}"] = int(c["applications"][g])
            row[f"approvals_{name}"] = int(c["approvals"][g])
            row[f"defaults_{name}"] = int(c["defaults"][g])
            row[f"reach_{name}"] = float(np.sum(self._recipients & (self.group == g))) / self.sizes[g]
        return row

    def run(self, episodes: int | None = None) -> list[dict[str, Any]]:
        for _ in range(self.sc.episodes.count if episodes is None else episodes):
            self.run_episode()
        return self.rows
