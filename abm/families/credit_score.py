"""Seed 002 lending (§5.1, Appendix B.1, Table 3): discrete credit scores, k groups, optional
latent conscientiousness.

Scores 1..C_max (C_max = len(repay_probs)). An approved applicant repays with probability
``P(c)`` (credit only) or ``(1 - w) P(c) + w * clip(k_i, 0, 1)`` with conscientiousness
``k_i ~ N(0.55, 0.1)`` drawn once per applicant independently of the group (credit +
conscientiousness). Repayment moves the score by ``score_change_repay`` (+1), default by
``score_change_default`` (-1), clipped to [1, C_max]; the bank earns ``reward_repay`` (+1) or
``reward_default`` (-1), nothing on rejection. Initial score distributions default to
ml-fairness-gym's (seed 002's Figure 4 gives no numbers). See docs/MODEL.md.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_serializer, model_validator

from abm.config import Section
from abm.errors import InvariantError
from abm.families import steps
from abm.families.score_lending import OBS_FIELDS, SCORE_METRICS, SCORE_OBSERVATIONS, ObservationDynamics, Population, \
    ScoreLendingWorld, check_observation_lengths
from abm.world import Lever

SEED_REPAY_PROBS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # seed 002 Table 3
# ml-fairness-gym lending_params.py: group 0 advantaged, group 1 disadvantaged (7 bins)
MLFG_DISTRIBUTIONS = ((0.0, 0.1, 0.1, 0.2, 0.3, 0.3, 0.0), (0.1, 0.1, 0.2, 0.3, 0.3, 0.0, 0.0))
DEFAULT_EPISODES = {"count": 10, "horizon": 1000.0, "decision_interval": 1.0, "review": "immediate"}


class CreditGroup(Section):
    name: str = Field(..., min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_.-]+$",
                      description="Group name (used in metric column names).")
    share: float = Field(0.5, gt=0, le=1e6, description="Relative population share (normalised over groups).")
    initial_distribution: list[float] = Field(
        ..., min_length=2, description="p_0(c | g) for c = 1..C_max (sums to 1).")

    @field_validator("initial_distribution")
    @classmethod
    def _simplex(cls, value: list[float]) -> list[float]:
        negative = next((i for i, v in enumerate(value) if v < 0), None)
        if negative is not None:
            raise ValueError(f"entry [{negative}] is negative ({value[negative]:.6g}): a distribution's entries "
                             f"are probabilities, non-negative and summing to 1")
        if abs(sum(value) - 1.0) > 1e-6:
            raise ValueError(f"must sum to 1, got sum {sum(value):.6g}")
        return value


def _default_groups() -> list[CreditGroup]:
    return [CreditGroup(name=f"G{g + 1}", share=0.5, initial_distribution=list(d))
            for g, d in enumerate(MLFG_DISTRIBUTIONS)]


class Conscientiousness(Section):
    enabled: bool = Field(False, description="Credit + conscientiousness variant (seed 002 §5.1).")
    mean: float = Field(0.55, ge=0, le=1, description="Mean of the latent conscientiousness k_i ~ N(mean, sd^2).")
    sd: float = Field(0.1, ge=0, le=1, description="Standard deviation of k_i.")
    weight: float = Field(0.5, ge=0, le=1, description="w in P(repay) = (1 - w) P(c) + w clip(k_i, 0, 1).")

    def mean_clipped(self) -> float:
        """E[clip(k, 0, 1)] for k ~ N(mean, sd^2), in closed form."""
        if self.sd == 0:
            return float(np.clip(self.mean, 0, 1))
        from scipy.stats import norm  # here: scipy.stats costs ~0.4 s to import

        a, b = (0 - self.mean) / self.sd, (1 - self.mean) / self.sd
        inside = self.mean * (norm.cdf(b) - norm.cdf(a)) + self.sd * (norm.pdf(a) - norm.pdf(b))
        return float(inside + norm.sf(b))


class CreditPopulation(Section):
    size: int = Field(1000, ge=2, le=10_000_000, description="Number of applicants (seed 002: 1000).")
    groups: list[CreditGroup] = Field(default_factory=_default_groups, min_length=1,
                                      description="The groups: name, share, initial score distribution.")
    repay_probs: list[float] = Field(list(SEED_REPAY_PROBS), min_length=2, max_length=1000,
                                     description="P(repay | c) for c = 1..C_max (its length sets C_max).")
    conscientiousness: Conscientiousness = Field(default_factory=Conscientiousness)

    @field_validator("repay_probs")
    @classmethod
    def _probs(cls, value: list[float]) -> list[float]:
        if any(not 0 <= v <= 1 for v in value):
            raise ValueError("every probability must be in [0, 1]")
        return value

    @model_validator(mode="after")
    def _shapes(self) -> "CreditPopulation":
        c_max = len(self.repay_probs)
        for g in self.groups:
            if len(g.initial_distribution) != c_max:
                raise ValueError(f"group {g.name}: initial_distribution has {len(g.initial_distribution)} "
                                 f"entries, repay_probs has {c_max} (one per credit score)")
        names = [g.name for g in self.groups]
        if len(set(names)) != len(names):
            raise ValueError(f"group names must be unique, got {names}")
        if self.size < len(self.groups):
            raise ValueError(f"size {self.size} is smaller than the number of groups {len(self.groups)}")
        return self


class CreditDynamics(Section):
    score_change_repay: int = Field(1, ge=0, le=1000, description="c+: true score change on repayment.")
    score_change_default: int = Field(-1, ge=-1000, le=0, description="-c-: true score change on default.")
    model: Literal["individual", "mass_shift"] = Field("individual", description=(
        "individual: the applicant's own score moves by c+/c- (seed 002 B.1); mass_shift: ml-fairness-gym's "
        "DelayedImpactEnv (each applicant's score drawn afresh from the group's score distribution, a loan "
        "outcome moves shift_increment of that distribution's mass one score up or down)."))
    shift_increment: float = Field(0.01, gt=0, le=1, description=(
        "mass_shift: probability mass moved per loan outcome (ml-fairness-gym's cluster_shift_increment)."))

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        """The ml-fairness-gym options are left out of the dump at their defaults (no existing run's
        configuration hash changed when they were added)."""
        return steps.omit_defaults(self, handler(self), ("model", "shift_increment"))


class CreditObservation(ObservationDynamics):
    encoding: Literal["raw", "one_hot"] = Field("raw", description=(
        "raw: (credit_score, group, repay_ratio, default_ratio) (seed 002 B.1); one_hot: the same columns "
        "followed by the observed score and the group one-hot encoded (ml-fairness-gym's observation), "
        "score_1..score_C and group_<name>."))

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        return steps.omit_defaults(self, handler(self), ("encoding",))


class CreditMetrics(Section):
    credit_gap_w2: bool = Field(False, description=(
        "Also report credit_gap_w2 and observed_credit_gap_w2: the credit gap with the squared ground cost "
        "(W2^2) beside credit_gap (W1, seed 002's 'Kantorovich distance')."))


class CreditBank(Section):
    reward_repay: float = Field(1.0, ge=-1e6, le=1e6, description="r+: bank reward when a loan is repaid.")
    reward_default: float = Field(-1.0, ge=-1e6, le=1e6, description="-r-: bank reward when a loan defaults.")


class Scenario(steps.StepScenario):
    default_episodes: ClassVar[dict[str, Any]] = DEFAULT_EPISODES
    capabilities: ClassVar[frozenset[str]] = frozenset({"score_curve", "decision_env"})
    state: ClassVar[str] = "score"  # events' score_after, agents' initial_score / final_score: the true score
    units: ClassVar[dict[str, str]] = {"wealth": "credit score (points)", "wealth_unit": "score points",
                                       "money": "reward units", "score": "credit score (points)"}
    live_parameters: ClassVar[tuple] = (
        ("dynamics.score_change_repay", "score change on repayment c+", 0, 3, 1),
        ("dynamics.score_change_default", "score change on default -c-", -3, 0, 1),
        ("bank.reward_default", "bank reward on default -r-", -3.0, 0.0, 0.1))
    live_plots: ClassVar[tuple[str, ...]] = ("mean_score", "credit_gap", "recall", "cumulative_profit")
    metric_definitions: ClassVar[dict[str, tuple[str, str]]] = SCORE_METRICS
    #: observation.encoding one_hot appends score_1..score_C and group_<name> indicator columns
    observation_definitions: ClassVar[dict[str, str]] = SCORE_OBSERVATIONS
    family: Literal["credit_score"] = "credit_score"
    population: CreditPopulation = Field(default_factory=CreditPopulation)
    arrivals: steps.StepArrivals = Field(default_factory=steps.StepArrivals)
    dynamics: CreditDynamics = Field(default_factory=CreditDynamics)
    observation: CreditObservation = Field(default_factory=CreditObservation)
    bank: CreditBank = Field(default_factory=CreditBank)
    metrics: CreditMetrics = Field(default_factory=CreditMetrics)

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        """``metrics`` is left out of the dump while it has its defaults (added later: no existing
        run's configuration hash or folder name changed)."""
        return steps.omit_defaults(self, handler(self), ("metrics",))

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        check_observation_lengths(self.observation, len(self.population.groups))
        if self.dynamics.model == "mass_shift":
            obs = self.observation
            if obs.score_change_repay is not None or obs.score_change_default is not None:
                raise ValueError("observation.score_change_*: dynamics.model mass_shift has no applicant-level "
                                 "observed score to move; leave them null")
            params = self.policy.params
            if self.policy.name in ("bisim_ppo", "bisim_dqn") and params.get("variant", "full") == "full":
                raise ValueError("policy.variant: the Bisimulator's observation lever (per-group c+/c-) needs "
                                 "dynamics.model individual; use variant: reward_only with mass_shift")
        return self


def generate(pop: CreditPopulation, rng: np.random.Generator) -> Population:
    """Group sizes by largest remainder of the shares; scores ~ p_0(c | g); k_i ~ N(mean, sd^2)."""
    sizes = steps.allocate(pop.size, [g.share for g in pop.groups])
    group = np.repeat(np.arange(len(sizes), dtype=np.int16), sizes)
    c_max = len(pop.repay_probs)
    score = np.concatenate([rng.choice(np.arange(1, c_max + 1), size=int(n), p=np.asarray(g.initial_distribution))
                            for g, n in zip(pop.groups, sizes)]).astype(float)
    extra = {}
    if pop.conscientiousness.enabled:
        extra["conscientiousness"] = rng.normal(pop.conscientiousness.mean, pop.conscientiousness.sd, size=len(group))
    return Population(tuple(g.name for g in pop.groups), group, score, extra)


class World(ScoreLendingWorld):
    """Seed 002 lending: the score-lending world with a discrete score and conscientiousness."""

    family = "credit_score"
    integer_scores = True

    def generate(self, scenario, rng) -> Population:
        pop = scenario.population
        self.p_table = np.asarray(pop.repay_probs, dtype=float)
        self.score_range = (1.0, float(len(self.p_table)))
        self.cons = pop.conscientiousness
        self.known = self.p_table if not self.cons.enabled else \
            (1 - self.cons.weight) * self.p_table + self.cons.weight * self.cons.mean_clipped()
        self.report_w2 = scenario.metrics.credit_gap_w2
        c_max = len(self.p_table)
        self.one_hot = scenario.observation.encoding == "one_hot"
        if self.one_hot:
            self.obs_fields = OBS_FIELDS + tuple(f"score_{k}" for k in range(1, c_max + 1)) + \
                tuple(f"group_{g.name}" for g in pop.groups)
        # ml-fairness-gym's mass-shift dynamics: the state is each group's score distribution
        self.mass = None
        if scenario.dynamics.model == "mass_shift":
            self.hooks = True
            self.increment = float(scenario.dynamics.shift_increment)
            self.mass = np.array([g.initial_distribution for g in pop.groups], dtype=float)
        return generate(pop, rng)

    # -- ml-fairness-gym's mass-shift dynamics (dynamics.model: mass_shift) -------------------------
    def _on_arrival(self, i: int, rng) -> None:
        """The applicant's score is drawn afresh from their group's current distribution (as
        ml-fairness-gym samples a new applicant from the group's mixture every step)."""
        g = self.cols["group"].item(i)
        w = self.mass[g]
        k = int(np.searchsorted(np.cumsum(w), rng.random() * w.sum(), side="right"))
        score = float(min(k, len(w) - 1) + 1)
        self.cols["score"][i] = self.cols["observed_score"][i] = score

    def _after_loan(self, idx, groups, repaid, before) -> None:
        """ml-fairness-gym's ``_CreditShift``: ``min(shift_increment, mass of the bin)`` moves from the
        applicant's bin to the next one up (repaid) or down (default), none past the ends."""
        top = self.mass.shape[1] - 1
        for g, good, score in zip(groups, repaid, before):
            k = int(score) - 1
            new = min(k + 1, top) if good else max(k - 1, 0)
            moved = min(self.increment, self.mass[g, k])
            self.mass[g, k] -= moved
            self.mass[g, new] += moved

    def score_counts(self):
        """With mass-shift dynamics the applicant distribution is each group's score distribution
        (its mass times the group's size)."""
        if self.mass is None:
            return super().score_counts()
        grid = np.arange(1, self.mass.shape[1] + 1, dtype=float)
        return [(grid[w > 0], (w * n)[w > 0]) for w, n in zip(self.mass, self.sizes)]

    def mean_scores(self, column: str = "score") -> np.ndarray:
        if self.mass is None:
            return super().mean_scores(column)
        grid = np.arange(1, self.mass.shape[1] + 1, dtype=float)
        # fsum, not ``@`` (BLAS: its order of additions is the processor's), as steps.wasserstein1
        return np.array([math.fsum(w * grid) for w in self.mass]) / self.mass.sum(axis=1)

    def credit_gap(self, column: str = "score", squared: bool = False) -> float:
        """With mass-shift dynamics, the distance between the groups' score distributions themselves
        (observed = true there); otherwise between the applicants' scores."""
        if self.mass is None:
            return super().credit_gap(column, squared)
        grid = np.arange(1, self.mass.shape[1] + 1, dtype=float)
        pairs = [(a, b) for a in range(self.n_groups) for b in range(a + 1, self.n_groups)]
        dist = steps.wasserstein2_squared if squared else steps.wasserstein1
        return float(max((dist(grid, grid, self.mass[a], self.mass[b]) for a, b in pairs), default=0.0))

    def observation_lever(self, scale: float) -> Lever:
        if self.mass is not None:
            raise InvariantError("the observation lever needs dynamics.model individual")  # refused at validation
        return super().observation_lever(scale)

    def copy_state_from(self, other) -> None:
        super().copy_state_from(other)
        if self.mass is not None:
            self.mass = other.mass.copy()

    # -- ml-fairness-gym's one-hot observation (observation.encoding: one_hot) -----------------------
    def observe(self, idx: np.ndarray) -> np.ndarray:
        raw = super().observe(idx)
        if not self.one_hot:
            return raw
        c_max = len(self.p_table)
        k = np.clip(np.rint(raw[:, 0]), 1, c_max).astype(np.int64) - 1  # nearest whole observed score
        return np.hstack([raw, np.eye(c_max)[k], np.eye(self.n_groups)[raw[:, 1].astype(np.int64)]])

    @property
    def obs_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = super().obs_bounds
        if not self.one_hot:
            return lo, hi
        extra = len(self.obs_fields) - len(lo)
        return np.concatenate([lo, np.zeros(extra)]), np.concatenate([hi, np.ones(extra)])

    def repay_prob(self, idx: np.ndarray) -> np.ndarray:
        p = self.p_table[self.cols["score"][idx].astype(np.int64) - 1]
        if self.cons.enabled:
            k = np.clip(self.cols["conscientiousness"][idx], 0.0, 1.0)
            p = (1 - self.cons.weight) * p + self.cons.weight * k
        return p

    def repay_prob_one(self, i: int) -> float:
        """``repay_prob`` of one applicant in Python floats (the same float64 operations, so the
        same value): the arrival's hot path. A subclass that redefines ``repay_prob`` (a plugin
        family) is read through its own ``repay_prob``."""
        if type(self).repay_prob is not World.repay_prob:
            return super().repay_prob_one(i)
        p = self.p_table.item(int(self.cols["score"].item(i)) - 1)  # astype(int64) truncates as int() does
        if self.cons.enabled:
            k = min(max(self.cols["conscientiousness"].item(i), 0.0), 1.0)  # np.clip, NaN kept
            p = (1 - self.cons.weight) * p + self.cons.weight * k
        return p

    def known_curve(self, scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
        """P(repay | observed score): the table (averaged over conscientiousness), linear
        between whole scores (observed scores move by fractional amounts under the
        Bisimulator's observation dynamics)."""
        grid = np.arange(1, len(self.known) + 1, dtype=float)
        return np.interp(np.asarray(scores, dtype=float), grid, self.known)

    def reward_table(self) -> steps.RewardTable:
        bank = self.model.scenario.bank
        return steps.RewardTable(approve_good=bank.reward_repay, approve_bad=bank.reward_default)


def population_table(scenario, rng: np.random.Generator):
    """The generated population (``abm population``), one row per applicant."""
    return generate(scenario.population, rng).frame()
