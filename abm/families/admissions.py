"""Seed 002 college admissions (§5.2, Appendix B.2, Table 4): strategic test-score manipulation.

Applicants have a true test score 1..10 (group-specific N(8, 1) / N(5, 1), rounded and
clipped) and an unobservable budget 0..5 (N(4, 1) / N(2, 1), rounded and clipped). Each step
one applicant still in the pool is drawn uniformly; with probability epsilon = 0.5 they may
manipulate: if the budget covers their group's cost they pay it and their *observed* score
rises by ``manipulation_gain`` (capped at 10). Success ~ Bernoulli(P(true score)), P = (0.0,
0.1, ..., 0.9). The college earns +1 for admitting a success and -1 for rejecting one, 0
otherwise (``bank.admit_failure``, default 0, sets the reward of admitting a failure);
admitted applicants leave the pool for good. See docs/MODEL.md.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator, model_serializer, model_validator

from abm.config import Section
from abm.errors import InvariantError
from abm.eventlog import kind_code
from abm.families import steps
from abm.world import Lever

OBS_FIELDS = ("test_score", "group")
SEED_SUCCESS_PROBS = tuple(round(0.1 * k, 1) for k in range(10))  # Table 4
DEFAULT_EPISODES = {"count": 10, "horizon": 100.0, "decision_interval": 1.0, "review": "immediate"}


class AdmissionsGroup(Section):
    name: str = Field(..., min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_.-]+$", description="Group name.")
    share: float = Field(0.5, gt=0, le=1e6, description="Relative population share.")
    score_mean: float = Field(..., ge=-100, le=100, description="Test score ~ N(mean, sd^2), rounded, clipped to 1..C_max.")
    score_sd: float = Field(1.0, ge=0, le=100, description="See score_mean.")
    budget_mean: float = Field(..., ge=-100, le=100, description="Budget ~ N(mean, sd^2), rounded, clipped to 0..B_max.")
    budget_sd: float = Field(1.0, ge=0, le=100, description="See budget_mean.")
    manipulation_cost: float = Field(1.0, gt=0, le=1e6, description="True cost of one manipulation (budget units).")


def _default_groups() -> list[AdmissionsGroup]:
    return [AdmissionsGroup(name="G1", score_mean=8.0, budget_mean=4.0),
            AdmissionsGroup(name="G2", score_mean=5.0, budget_mean=2.0)]


class AdmissionsPopulation(Section):
    size: int = Field(1000, ge=2, le=10_000_000, description="Number of applicants (seed 002: 1000).")
    groups: list[AdmissionsGroup] = Field(default_factory=_default_groups, min_length=1,
                                          description="Groups with their score and budget distributions.")
    success_probs: list[float] = Field(list(SEED_SUCCESS_PROBS), min_length=2, max_length=1000,
                                       description="P(success | true score c) for c = 1..C_max (length sets C_max).")
    budget_max: int = Field(5, ge=0, le=10**6, description="B_max: budgets are clipped to 0..B_max.")

    @field_validator("success_probs")
    @classmethod
    def _probs(cls, value):
        if any(not 0 <= v <= 1 for v in value):
            raise ValueError("every probability must be in [0, 1]")
        return value

    @model_validator(mode="after")
    def _names(self) -> "AdmissionsPopulation":
        names = [g.name for g in self.groups]
        if len(set(names)) != len(names):
            raise ValueError(f"group names must be unique, got {names}")
        return self


class AdmissionsDynamics(Section):
    manipulation_prob: float = Field(0.5, ge=0, le=1, description="epsilon: chance an applicant may manipulate at a visit.")
    manipulation_gain: float = Field(1.0, ge=0, le=1000, description="Observed-score increase bought by one manipulation.")


class AdmissionsObservation(Section):
    manipulation_cost: list[float] | None = Field(
        None, description="Per group: the cost charged per manipulation in the agent's view (a subsidy; "
                          "null: the groups' true costs). Success still follows the true score.")


class AdmissionsRewards(Section):
    admit_success: float = Field(1.0, ge=-1e6, le=1e6, description="r+: admitting an applicant who succeeds.")
    reject_success: float = Field(-1.0, ge=-1e6, le=1e6, description="r-: rejecting an applicant who would succeed.")
    admit_failure: float = Field(0.0, ge=-1e6, le=1e6, description=(
        "Admitting an applicant who fails (seed 002 B.2: 'otherwise its reward is zero'; with 0, admitting "
        "everyone is optimal: see docs/MODEL.md)."))

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        """``admit_failure`` is left out of the dump while it is 0 (its default): adding it changed
        no existing run's configuration hash or folder name."""
        return steps.omit_defaults(self, handler(self), ("admit_failure",))


class Scenario(steps.StepScenario):
    default_episodes: ClassVar[dict[str, Any]] = DEFAULT_EPISODES
    capabilities: ClassVar[frozenset[str]] = frozenset({"score_curve", "decision_env"})
    state: ClassVar[str] = "budget"  # events' budget_after: the engine's state seam is the budget here
    units: ClassVar[dict[str, str]] = {"wealth": "budget (units)", "wealth_unit": "budget units",
                                       "money": "reward units", "score": "budget (units)"}
    event_kinds: ClassVar[tuple[str, ...]] = ("admit", "manipulate", "leave")
    live_parameters: ClassVar[tuple] = (
        ("dynamics.manipulation_prob", "manipulation chance epsilon", 0.0, 1.0, 0.05),
        ("dynamics.manipulation_gain", "score gain per manipulation", 0.0, 3.0, 0.5),
        ("bank.reject_success", "reward for rejecting a success r-", -2.0, 0.0, 0.1))
    live_plots: ClassVar[tuple[str, ...]] = ("recall", "recall_gap", "social_burden", "cumulative_profit")
    observation_definitions: ClassVar[dict[str, str]] = {
        "test_score": "The applicant's test score as observed (after any manipulation bought).",
        "group": "The applicant's group index (info[\"group_name\"] has its name).",
    }
    metric_definitions: ClassVar[dict[str, tuple[str, str]]] = {
        "return": ("{money}", "The institution's reward summed over the episode's decisions."),
        "profit": ("{money}", "Same as return (the profit column every family has)."),
        "cumulative_profit": ("{money}", "Sum of profit over episodes 0..episode."),
        "cumulative_return": ("{money}", "Same as cumulative_profit."),
        "average_return": ("{money} per episode", "cumulative_return / (episode + 1)."),
        "recall_{g}": ("share (0-1)", "Of group g's applicants who would succeed, the share admitted, cumulative "
                                      "since the run began; empty until the group's first such applicant."),
        "recall_gap": ("share (0-1)", "Largest minus smallest recall_{g} over groups; empty while any recall is."),
        "social_burden_{g}": ("{wealth_unit} per admission", "Manipulation cost paid by group g's admitted "
                                                             "applicants per admission, cumulative since the run "
                                                             "began; empty before the group's first admission."),
        "cumulative_admissions_{g}": ("admissions", "Group g's applicants admitted since the run began."),
        "applications_{g}": ("applications", "Applications from group g in the episode."),
        "approvals_{g}": ("admissions", "Applications from group g admitted in the episode."),
        "manipulations_{g}": ("manipulations", "Score manipulations bought by group g's applicants in the episode."),
        "remaining_{g}": ("applicants", "Group g's applicants still in the pool at the episode's end."),
        "mean_budget_{g}": ("{wealth_unit}", "Mean remaining budget of group g's applicants in the pool (0 when none "
                                             "remain)."),
        "profit_{g}": ("{money}", "The institution's reward from group g's decisions in the episode."),
    }
    family: Literal["admissions"] = "admissions"
    population: AdmissionsPopulation = Field(default_factory=AdmissionsPopulation)
    arrivals: steps.StepArrivals = Field(default_factory=steps.StepArrivals)
    dynamics: AdmissionsDynamics = Field(default_factory=AdmissionsDynamics)
    observation: AdmissionsObservation = Field(default_factory=AdmissionsObservation)
    bank: AdmissionsRewards = Field(default_factory=AdmissionsRewards)

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        costs = self.observation.manipulation_cost
        if costs is not None and (len(costs) != len(self.population.groups) or any(c <= 0 for c in costs)):
            raise ValueError(f"observation.manipulation_cost needs one positive value per group "
                             f"({len(self.population.groups)}), got {costs}")
        if self.episodes.review != "immediate":
            raise ValueError("episodes.review must be 'immediate' for admissions (an applicant queued twice "
                             "could be admitted twice)")
        return self


def generate(pop: AdmissionsPopulation, rng: np.random.Generator) -> pd.DataFrame:
    sizes = steps.allocate(pop.size, [g.share for g in pop.groups])
    group = np.repeat(np.arange(len(sizes), dtype=np.int16), sizes)
    c_max = len(pop.success_probs)
    score = np.concatenate([rng.normal(g.score_mean, g.score_sd, int(n)) for g, n in zip(pop.groups, sizes)])
    budget = np.concatenate([rng.normal(g.budget_mean, g.budget_sd, int(n)) for g, n in zip(pop.groups, sizes)])
    return pd.DataFrame({
        "agent_id": np.arange(len(group), dtype=np.int64),
        "group": pd.Categorical.from_codes(group, categories=[g.name for g in pop.groups]),
        "test_score": np.clip(np.rint(score), 1, c_max),
        "budget": np.clip(np.rint(budget), 0, pop.budget_max),
    })


# this family's own event kinds' codes (registered when Scenario, which declares them, was defined)
ADMIT, MANIPULATE, LEAVE = kind_code("admit"), kind_code("manipulate"), kind_code("leave")


class World(steps.DrawnOutcomes, steps.LastDecisions):
    """Admissions state and seams (see ``abm.families``)."""

    obs_fields = OBS_FIELDS
    family = "admissions"

    def __init__(self, model):
        self.model, self.env = model, model.env
        sc = model.scenario
        self.pop_cfg, self.dyn = sc.population, sc.dynamics
        frame = generate(sc.population, model.rngs["population"])
        self.group_names = [g.name for g in sc.population.groups]
        n_groups = self.n_groups = len(self.group_names)
        group = frame["group"].cat.codes.to_numpy(np.int16)
        sizes = np.bincount(group, minlength=n_groups)
        self.sizes = sizes.astype(float)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        self.group_slices = [(int(bounds[g]), int(bounds[g + 1])) for g in range(n_groups)]
        n = len(frame)
        self.p_table = np.asarray(sc.population.success_probs, dtype=float)
        self.score_range = (1.0, float(len(self.p_table)))
        self.cols: dict[str, np.ndarray] = {
            "group": group,
            "score": frame["test_score"].to_numpy(np.float64),  # true, never changes
            "observed_score": frame["test_score"].to_numpy(np.float64).copy(),
            "budget": frame["budget"].to_numpy(np.float64).copy(),
            "initial_budget": frame["budget"].to_numpy(np.float64).copy(),
            "cost_paid": np.zeros(n),
            "manipulations": np.zeros(n, np.int32),
            "applications": np.zeros(n, np.int32),
            "admitted": np.zeros(n, bool),
            "outcome": np.zeros(n, bool),
        }
        self.true_costs = np.array([g.manipulation_cost for g in sc.population.groups], dtype=float)
        self.set_manipulation_costs(sc.observation.manipulation_cost)
        self.rewards = steps.RewardTable(approve_good=sc.bank.admit_success, approve_bad=sc.bank.admit_failure,
                                         reject_good=sc.bank.reject_success, reject_bad=0.0)
        self.pool = np.arange(n, dtype=np.int64)  # applicants not yet admitted: pool[:pool_size]
        self.position = np.arange(n, dtype=np.int64)
        self.pool_size = n
        self.arrival_rng, self.outcome_rng = model.rngs["arrivals"], model.rngs["outcomes"]
        keys = ("applications", "approvals", "tp", "fn", "fp", "reward", "manipulations", "burden")
        self.cum = {k: np.zeros(n_groups) for k in keys}
        self.ep = {k: np.zeros(n_groups) for k in keys}
        self.profit_total = 0.0
        self.admit_reward_total = 0.0
        self.cumulative_return = 0.0

    # -- the Bisimulator seam -----------------------------------------------------------------
    def set_manipulation_costs(self, costs=None) -> None:
        """Per-group cost charged per manipulation (None: the true costs)."""
        self.costs = self.true_costs.copy() if costs is None else np.asarray(costs, dtype=float)
        if self.costs.shape != (self.n_groups,) or np.any(self.costs <= 0):
            raise InvariantError(f"manipulation costs need one positive value per group ({self.n_groups})")

    def observation_lever(self, scale: float) -> Lever:
        """The Bisimulator's omega = the manipulation cost each group is charged, searched within
        [true / (10 scale), true x scale] (``abm.world.ObservationLever``)."""
        true = np.asarray(self.true_costs, dtype=float)
        return Lever(np.asarray(self.costs, dtype=float), true / (10.0 * scale), true * scale,
                     self.set_manipulation_costs,
                     lambda om: {"observation": {"manipulation_cost": [float(x) for x in om]}})

    def copy_state_from(self, other: "World") -> None:
        """Take over the applicants' state of ``other``, a world of the same scenario (scores,
        budgets, costs paid, who has been admitted and left the pool): the Bisimulator's probes
        start from the training state. Call before the clock starts."""
        if set(other.cols) != set(self.cols) or not np.array_equal(other.cols["group"], self.cols["group"]):
            raise InvariantError("copy_state_from: the worlds have different populations")
        for key, value in other.cols.items():
            self.cols[key] = value.copy()
        self.pool, self.position, self.pool_size = other.pool.copy(), other.position.copy(), int(other.pool_size)

    # -- arrivals -----------------------------------------------------------------------------
    def start(self) -> None:
        # the outcome stream feeds ``_prepare`` alone: its draws come in blocks (``steps.BlockDraws``,
        # the same numbers) unless a subclass prepares applicants its own way
        self._outcome_draw = self.outcome_draws(type(self)._prepare is World._prepare)
        self.env.process(steps.unit_step_arrivals(self, self._pick, self._prepare))

    def _pick(self, rng) -> int | None:
        if self.pool_size == 0:
            return None  # everyone admitted: the step passes without an application
        return int(self.pool[int(rng.integers(self.pool_size))])

    def _prepare(self, i: int, rng) -> None:
        c = self.cols
        g = c["group"].item(i)  # .item(): Python scalars, the same values, cheaper than numpy's
        if c["admitted"].item(i):
            raise InvariantError(f"invariant 'admitted applicants never return' broken by applicant {i}")
        if rng.random() < self.dyn.manipulation_prob:
            cost = self.costs.item(g)
            observed = c["observed_score"].item(i)
            if c["budget"].item(i) >= cost and observed < self.score_range[1]:
                c["budget"][i] -= cost
                c["cost_paid"][i] += cost
                c["manipulations"][i] += 1
                c["observed_score"][i] = min(self.score_range[1], observed + self.dyn.manipulation_gain)
                self.cum["manipulations"][g] += 1
                self.ep["manipulations"][g] += 1
                self.model.log.add(self.env.now, self.model.episode, i, g, MANIPULATE, cost,
                                   float(c["budget"][i]))
        c["outcome"][i] = self._outcome_draw() < self.p_table.item(int(c["score"].item(i)) - 1)
        c["applications"][i] += 1
        self.cum["applications"][g] += 1
        self.ep["applications"][g] += 1

    def policy_context(self) -> steps.ThresholdContext:
        def score_counts():
            live = self.pool[: self.pool_size]
            return steps.counts_by_group(self.cols["observed_score"][live], self.cols["group"][live], self.n_groups)

        def curve(scores, groups):  # the college reads the table at the score it sees
            grid = np.arange(1, len(self.p_table) + 1, dtype=float)
            return np.interp(np.asarray(scores, dtype=float), grid, self.p_table)

        return steps.ThresholdContext(OBS_FIELDS, tuple(self.group_names), "test_score", curve,
                                      self.rewards, score_counts, family=self.family)

    # -- observations -------------------------------------------------------------------------
    def observe(self, idx: np.ndarray) -> np.ndarray:
        if len(idx) == 1:  # one applicant per step: Python scalars, the same float64 values
            i = int(idx[0])
            return np.array([[self.cols["observed_score"].item(i), float(self.cols["group"].item(i))]])
        out = np.empty((len(idx), 2))
        out[:, 0] = self.cols["observed_score"][idx]
        out[:, 1] = self.cols["group"][idx]
        return out

    @property
    def obs_bounds(self):
        return np.array([self.score_range[0], 0.0]), np.array([self.score_range[1], self.n_groups - 1.0])

    def privileged(self, idx, names):
        out = {}
        for name in names:
            if name == "default":
                out[name] = ~self.cols["outcome"][idx]
            elif name in ("score", "budget"):
                out[name] = self.cols[name][idx]
        return out

    def amount(self, idx):
        return self.cols["observed_score"][idx]

    def wealth_of(self, idx):
        return self.cols["budget"][idx]

    @property
    def bank_reward_total(self) -> float:
        return self.profit_total

    # -- decisions ----------------------------------------------------------------------------
    def apply_decisions(self, idx, approved, probs, obs) -> None:
        if len(idx) == 1 and self.model.policy is None:  # the gym adapter's step: Python scalars
            self._apply_one(int(idx[0]), bool(approved[0]))
            return
        c, n = self.cols, self.n_groups
        idx, approved = np.asarray(idx), np.asarray(approved, bool)
        groups, good = c["group"][idx], c["outcome"][idx]
        rewards = self.rewards.reward(approved, good)
        self._last = (idx, rewards)
        won = idx[approved]
        for store in (self.cum, self.ep):
            store["approvals"] += np.bincount(groups[approved], minlength=n)
            store["tp"] += np.bincount(groups[approved & good], minlength=n)
            store["fn"] += np.bincount(groups[~approved & good], minlength=n)
            store["fp"] += np.bincount(groups[approved & ~good], minlength=n)
            store["reward"] += np.bincount(groups, weights=rewards, minlength=n)
            store["burden"] += np.bincount(groups[approved], weights=c["cost_paid"][won], minlength=n)
        self.profit_total += float(rewards.sum())
        self.admit_reward_total += float(rewards[approved].sum())
        self.model.bank.profit = self.profit_total
        for i in won:  # leave the pool: swap with the last live entry
            i = int(i)
            k, last = self.position[i], self.pool[self.pool_size - 1]
            self.pool[k], self.pool[self.pool_size - 1] = last, i
            self.position[last], self.position[i] = k, self.pool_size - 1
            self.pool_size -= 1
        c["admitted"][won] = True
        if len(won):
            gw = groups[approved]
            log = self.model.log
            log.extend(self.env.now, self.model.episode, won, gw, ADMIT, rewards[approved], c["budget"][won])
            log.extend(self.env.now, self.model.episode, won, gw, LEAVE, np.nan, c["budget"][won])
        policy = self.model.policy
        if policy is not None:  # the reward reveals every outcome, admitted or not
            policy.on_outcomes(steps.Outcomes(idx, groups, obs, good, rewards))

    def _apply_one(self, i: int, approved: bool) -> None:
        """``apply_decisions`` of one applicant with no policy to tell (the gym adapter): the same
        updates in Python scalars. Where the batch path adds a ``bincount`` (a zero-initialised
        sum) this adds ``0.0 + x``, its value for one element; empty sums add 0.0."""
        c = self.cols
        g = c["group"].item(i)
        good = bool(c["outcome"].item(i))
        reward = self.rewards.reward_one(approved, good)
        self._last = (i, reward)
        for store in (self.cum, self.ep):
            if approved:
                store["approvals"][g] += 1
                store["tp" if good else "fp"][g] += 1
                store["burden"][g] += 0.0 + c["cost_paid"].item(i)
            elif good:
                store["fn"][g] += 1
            store["reward"][g] += 0.0 + reward
        self.profit_total += reward
        self.admit_reward_total += reward if approved else 0.0
        self.model.bank.profit = self.profit_total
        if not approved:
            return
        k, last = self.position.item(i), self.pool.item(self.pool_size - 1)  # leave the pool
        self.pool[k], self.pool[self.pool_size - 1] = last, i
        self.position[last], self.position[i] = k, self.pool_size - 1
        self.pool_size -= 1
        c["admitted"][i] = True
        log = self.model.log
        if log.enabled:
            won, gw, budget = np.array([i]), np.array([g], np.int16), c["budget"][[i]]
            log.extend(self.env.now, self.model.episode, won, gw, ADMIT, np.array([reward]), budget)
            log.extend(self.env.now, self.model.episode, won, gw, LEAVE, np.nan, budget)
        else:
            log.skip(2)

    # -- episodes -----------------------------------------------------------------------------
    def episode_metrics(self, episode: int) -> dict[str, Any]:
        c = self.cols
        rec = steps.recall(self.cum["tp"], self.cum["fn"])
        burden = np.divide(self.cum["burden"], self.cum["approvals"], out=np.full(self.n_groups, np.nan),
                           where=self.cum["approvals"] > 0)
        live = self.pool[: self.pool_size]
        remaining = np.bincount(c["group"][live], minlength=self.n_groups)
        budget = np.bincount(c["group"][live], weights=c["budget"][live], minlength=self.n_groups)
        ret = float(self.ep["reward"].sum())
        self.cumulative_return += ret
        row: dict[str, Any] = {"return": ret, "profit": ret, "cumulative_profit": self.cumulative_return,
                               "cumulative_return": self.cumulative_return,
                               "average_return": self.cumulative_return / (episode + 1)}
        for g, name in enumerate(self.group_names):
            row[f"recall_{name}"] = rec[g]
        row["recall_gap"] = steps.spread(rec)
        for g, name in enumerate(self.group_names):
            row[f"social_burden_{name}"] = burden[g]
            row[f"cumulative_admissions_{name}"] = int(self.cum["approvals"][g])
            row[f"applications_{name}"] = int(self.ep["applications"][g])
            row[f"approvals_{name}"] = int(self.ep["approvals"][g])
            row[f"manipulations_{name}"] = int(self.ep["manipulations"][g])
            row[f"remaining_{name}"] = int(remaining[g])
            row[f"mean_budget_{name}"] = budget[g] / remaining[g] if remaining[g] else 0.0
            row[f"profit_{name}"] = float(self.ep["reward"][g])
        return row

    @property
    def nullable_metrics(self) -> tuple[str, ...]:
        names = self.group_names
        return ("recall_gap", *(f"recall_{g}" for g in names), *(f"social_burden_{g}" for g in names))

    def episode_stats(self) -> dict[str, Any]:
        return {"groups": tuple(self.group_names), "sizes": self.sizes.copy(),
                "mean_wealth": np.bincount(self.cols["group"], weights=self.cols["budget"],
                                           minlength=self.n_groups) / self.sizes,
                "mean_wealth_change": -self.ep["burden"] / self.sizes,
                "profit": self.ep["reward"].copy(), "applications": self.ep["applications"].copy(),
                "approvals": self.ep["approvals"].copy(), "recall": steps.recall(self.cum["tp"], self.cum["fn"]),
                "episode": self.model.episode}

    def end_episode(self, episode: int) -> None:
        for v in self.ep.values():
            v[:] = 0

    # -- end of run ---------------------------------------------------------------------------
    def check_invariants(self) -> None:
        c = self.cols
        lo, hi = self.score_range
        if np.any(c["budget"] < 0):
            raise InvariantError("invariant 'budgets never negative' broken")
        for col in ("score", "observed_score"):
            if not np.all((c[col] >= lo) & (c[col] <= hi)):
                raise InvariantError(f"invariant '{col} in [{lo:g}, {hi:g}]' broken")
        if np.any(c["observed_score"] < c["score"]):
            raise InvariantError("invariant 'manipulation only raises the observed score' broken")
        if not np.allclose(c["budget"] + c["cost_paid"], c["initial_budget"]):
            raise InvariantError("invariant 'budget + cost paid = initial budget' broken")
        if int(c["admitted"].sum()) != int(self.cum["approvals"].sum()) or \
                int(c["admitted"].sum()) != len(c["admitted"]) - self.pool_size:
            raise InvariantError("invariant 'each admitted applicant admitted once and out of the pool' broken")
        if np.any(c["admitted"][self.pool[: self.pool_size]]):
            raise InvariantError("invariant 'admitted applicants never return' broken")
        ledger = self.rewards.approve_good * self.cum["tp"].sum() + self.rewards.reject_good * self.cum["fn"].sum() + \
            self.rewards.approve_bad * self.cum["fp"].sum()
        if not np.isclose(ledger, self.profit_total, rtol=1e-9, atol=1e-6):
            raise InvariantError(f"invariant 'return = reward ledger' broken: {self.profit_total} vs {ledger}")

    def ledger_check(self, events: pd.DataFrame, episodes: pd.DataFrame) -> None:
        """From the log alone: admissions' rewards add up, and nobody applies after admission."""
        kind = events["kind"].astype(str)
        admits = events[kind == "admit"]
        if not np.isclose(float(admits["amount"].sum()), self.admit_reward_total, rtol=1e-9, atol=1e-6):
            raise InvariantError("invariant 'admission rewards equal the event ledger' broken")
        if admits["agent_id"].duplicated().any():
            raise InvariantError("invariant 'each applicant admitted at most once' broken")
        first_admit = admits.groupby("agent_id")["time"].min()
        applies = events[kind == "apply"]
        later = applies["time"].to_numpy() > first_admit.reindex(applies["agent_id"]).to_numpy()
        if np.any(later):
            raise InvariantError("invariant 'admitted applicants never return' broken (event log)")
        if len(applies) != int(self.cum["applications"].sum()):
            raise InvariantError("invariant 'one apply event per application' broken")

    def agents_table(self) -> pd.DataFrame:
        c = self.cols
        return pd.DataFrame({
            "agent_id": np.arange(len(c["group"]), dtype=np.int64),
            "group": pd.Categorical.from_codes(c["group"], categories=self.group_names),
            "test_score": c["score"], "final_observed_score": c["observed_score"],
            "initial_budget": c["initial_budget"], "final_budget": c["budget"], "cost_paid": c["cost_paid"],
            "manipulations": c["manipulations"], "applications": c["applications"], "admitted": c["admitted"],
        })

    def summary(self) -> dict[str, Any]:
        names = self.group_names
        return {"return": self.profit_total,
                "recall": {n: float(r) for n, r in zip(names, steps.recall(self.cum["tp"], self.cum["fn"]))},
                "admissions": {n: int(self.cum["approvals"][g]) for g, n in enumerate(names)},
                "remaining": int(self.pool_size), "manipulation_costs": self.costs.tolist()}


def population_table(scenario, rng: np.random.Generator) -> pd.DataFrame:
    """The generated population (``abm population``), one row per applicant."""
    return generate(scenario.population, rng)
