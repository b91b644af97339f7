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

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator
from scipy.stats import norm

from abm.config import Section
from abm.families import steps
from abm.families.score_lending import ObservationDynamics, Population, ScoreLendingWorld, check_observation_lengths

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
        if any(v < 0 for v in value) or abs(sum(value) - 1.0) > 1e-6:
            raise ValueError(f"must be non-negative and sum to 1, got sum {sum(value):.6g}")
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


class CreditBank(Section):
    reward_repay: float = Field(1.0, ge=-1e6, le=1e6, description="r+: bank reward when a loan is repaid.")
    reward_default: float = Field(-1.0, ge=-1e6, le=1e6, description="-r-: bank reward when a loan defaults.")


class Scenario(steps.StepScenario):
    default_episodes: ClassVar[dict[str, Any]] = DEFAULT_EPISODES
    capabilities: ClassVar[frozenset[str]] = frozenset({"score_curve", "decision_env"})
    family: Literal["credit_score"] = "credit_score"
    population: CreditPopulation = Field(default_factory=CreditPopulation)
    arrivals: steps.StepArrivals = Field(default_factory=steps.StepArrivals)
    dynamics: CreditDynamics = Field(default_factory=CreditDynamics)
    observation: ObservationDynamics = Field(default_factory=ObservationDynamics)
    bank: CreditBank = Field(default_factory=CreditBank)

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        check_observation_lengths(self.observation, len(self.population.groups))
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
        return generate(pop, rng)

    def repay_prob(self, idx: np.ndarray) -> np.ndarray:
        p = self.p_table[self.cols["score"][idx].astype(np.int64) - 1]
        if self.cons.enabled:
            k = np.clip(self.cols["conscientiousness"][idx], 0.0, 1.0)
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
