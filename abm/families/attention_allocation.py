"""ml-fairness-gym's attention allocation (``environments/attention_allocation.py``), with the
settings pocar (A-PPO) and ELBERT (ELBERT-PO) publish on, and ELBERT's harder dynamic rates.

Sites (the groups) have incident rates; each step, Poisson(rate) incidents occur at each site
and the agent places at most ``attention.units`` units of attention. A site with ``a`` units
discovers incidents by ml-fairness-gym's rule (without replacement: each incident in turn is
found with probability 1 - miss_prob^(units still free), a find uses up a unit; with
replacement: each incident is found with probability 1 - miss_prob^a). Then each site's rate
moves: ``+ rate_increase * exp(-alpha rate)`` where it got no unit, ``- rate_decrease * a *
exp(-alpha rate)`` (floored at 0) where it got ``a``; an unattended site at rate 0 comes back to
rate 1 with probability ``theta`` (ELBERT's ``harder_env.py``; ml-fairness-gym's ``dynamic_rate``
is rate_increase = rate_decrease, alpha = theta = 0).

Decisions. The step's incidents are drawn when it starts (hidden, as a loan's outcome is drawn
on arrival). Then the agent is offered one more unit at a site at a time: in round r = 1, 2, ...
every site is offered once (the first site rotates with the step), until the units are spent or
every site has been offered ``units`` times. Approve = place one more unit there; no offer is
made once the budget is spent, so approvals never exceed it; units the agent declines stay idle.
An offer's true outcome is whether that unit would discover one more incident (D(a+1) - D(a) > 0,
D(a) = incidents ``a`` units discover this step); so a site's approved outcomes add up to its
discoveries. Reward: ``seen_weight`` per discovered incident, ``- missed_weight`` per missed one
(pocar's zeta_0, zeta_1); a unit's share ``(seen + missed) weight x its discoveries`` is paid at
its approval, ``- missed_weight x incidents occurred`` when the step resolves. See docs/MODEL.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from abm.config import Section
from abm.errors import InvariantError
from abm.families import steps
from abm.world import PolicyContext

COUNTS = ("occurred", "discovered", "units", "offers", "reward")  # per site, per episode and run
OBS_FIELDS = ("last_occurred", "last_discovered", "placed_here", "units_left", "discovery_ratio", "group")
# pocar config.py: N_LOCATIONS 5, INCIDENT_RATES [8, 6, 4, 3, 1.5], DYNAMIC_RATE 0.1, N_ATTENTION_UNITS 6
POCAR_RATES = (8.0, 6.0, 4.0, 3.0, 1.5)
DEFAULT_EPISODES = {"count": 10, "horizon": 1000.0, "decision_interval": 1.0, "review": "immediate"}
RATE_FLOOR = 1e-5  # ELBERT harder_env.py: an unattended site at rate <= 1e-5 may come back (theta)


class Site(Section):
    name: str = Field(..., min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_.-]+$", description="Site name.")
    incident_rate: float = Field(..., ge=0, le=1e6, description="Initial Poisson rate of incidents per step.")
    miss_prob: float = Field(0.0, ge=0, le=1, description=(
        "Chance a unit misses an incident (ml-fairness-gym miss_incident_prob, default 0.2 there; pocar and "
        "ELBERT: 0)."))
    rate_increase: float = Field(0.1, ge=0, le=1e6, description=(
        "Rate increase after a step with no unit here (ml-fairness-gym dynamic_rate; pocar 0.1)."))
    rate_decrease: float = Field(0.1, ge=0, le=1e6, description=(
        "Rate decrease per unit placed here in a step (ml-fairness-gym dynamic_rate; pocar 0.1)."))


def _default_sites() -> list[Site]:
    return [Site(name=f"S{k + 1}", incident_rate=r) for k, r in enumerate(POCAR_RATES)]


class AttentionPopulation(Section):
    sites: list[Site] = Field(default_factory=_default_sites, min_length=1, max_length=1000,
                              description="The sites (groups): name, initial rate, miss chance, rate dynamics.")

    @model_validator(mode="after")
    def _names(self) -> "AttentionPopulation":
        names = [s.name for s in self.sites]
        if len(set(names)) != len(names):
            raise ValueError(f"site names must be unique, got {names}")
        return self


class Attention(Section):
    units: int = Field(6, ge=1, le=10_000, description="Attention units per step (pocar: 6; ELBERT harder: 30).")
    replacement: bool = Field(False, description=(
        "ml-fairness-gym attention_replacement: a unit may discover several incidents (false: at most one)."))


class AttentionDynamics(Section):
    alpha: float = Field(0.0, ge=0, le=1e3, description=(
        "ELBERT harder_env ALPHA: rate changes are scaled by exp(-alpha x rate) (0: unscaled)."))
    theta: float = Field(0.0, ge=0, le=1, description=(
        "ELBERT harder_env THETA: chance an unattended site at rate 0 gains 1 (0: never)."))


class AttentionRewards(Section):
    seen_weight: float = Field(1.0, ge=-1e6, le=1e6, description="zeta_0: reward per discovered incident (pocar 1).")
    missed_weight: float = Field(0.25, ge=-1e6, le=1e6, description="zeta_1: penalty per missed incident (pocar 0.25).")


class Scenario(steps.StepScenario):
    default_episodes: ClassVar[dict[str, Any]] = DEFAULT_EPISODES
    # (reward, fairness gap) across environments: pocar's 1,000-step episode is this run (episodes carry the rates on)
    benchmark: ClassVar[tuple[str, str]] = ("cumulative_profit", "run_discovery_gap")
    capabilities: ClassVar[frozenset[str]] = frozenset({"decision_env", "attention_budget"})
    state: ClassVar[str] = "rate"  # a site's incident rate: events' rate_after, agents' initial_/final_rate
    units: ClassVar[dict[str, str]] = {"wealth": "incident rate (per step)", "wealth_unit": "incidents per step",
                                       "money": "reward units", "score": "incident rate (per step)"}
    live_parameters: ClassVar[tuple] = (
        ("attention.units", "attention units per step", 1, 30, 1),
        ("rewards.missed_weight", "penalty per missed incident zeta_1", 0.0, 2.0, 0.05))
    live_plots: ClassVar[tuple[str, ...]] = ("discovery_rate", "discovery_gap", "missed", "cumulative_profit")
    observation_definitions: ClassVar[dict[str, str]] = {
        "last_occurred": "Incidents that occurred at the offered site in the previous step.",
        "last_discovered": "Incidents discovered at the offered site in the previous step.",
        "placed_here": "Units already placed at the offered site in this step.",
        "units_left": "Units of this step's budget not yet placed.",
        "discovery_ratio": "The site's discovered / (occurred + 1) over the episode so far (pocar's delta term).",
        "group": "The offered site's index (info[\"group_name\"] has its name).",
    }
    metric_definitions: ClassVar[dict[str, tuple[str, str]]] = {
        "return": ("{money}", "Reward summed over the episode: seen_weight x discovered - missed_weight x missed."),
        "profit": ("{money}", "Same as return (the profit column every family has)."),
        "cumulative_profit": ("{money}", "Sum of profit over episodes 0..episode."),
        "missed": ("incidents", "Incidents that occurred and were not discovered in the episode, all sites."),
        "cumulative_missed": ("incidents", "Sum of missed over episodes 0..episode."),
        "idle_units": ("units", "Units of the episode's budgets left unplaced (offers declined)."),
        "discovery_rate_{g}": ("share (0-1)", "Site g's discovered / occurred incidents in the episode; empty "
                                              "when none occurred."),
        "discovery_gap": ("share (0-1)", "Largest minus smallest discovery_rate_{g} over sites; empty while any is."),
        "run_discovery_gap": ("share (0-1)", "discovery_gap of the counts over episodes 0..episode (pocar's delta over "
                                             "the whole horizon); empty while any site saw no incident."),
        "occurred_{g}": ("incidents", "Incidents at site g in the episode."),
        "discovered_{g}": ("incidents", "Incidents discovered at site g in the episode."),
        "units_{g}": ("units", "Attention units placed at site g in the episode."),
        "incident_rate_{g}": ("{wealth_unit}", "Site g's incident rate at the episode's end."),
        "profit_{g}": ("{money}", "The reward from site g in the episode."),
    }
    family: Literal["attention_allocation"] = "attention_allocation"
    population: AttentionPopulation = Field(default_factory=AttentionPopulation)
    attention: Attention = Field(default_factory=Attention)
    dynamics: AttentionDynamics = Field(default_factory=AttentionDynamics)
    rewards: AttentionRewards = Field(default_factory=AttentionRewards)

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        ep = self.episodes
        if ep.review != "immediate":
            raise ValueError("episodes.review must be 'immediate' for attention_allocation (each unit is placed "
                             "before the next is offered)")
        if ep.horizon != int(ep.horizon):
            raise ValueError(f"episodes.horizon must be a whole number of steps, got {ep.horizon:g}")
        offers = int(ep.horizon) * len(self.population.sites) * self.attention.units
        if offers > ep.max_applications:
            raise ValueError(f"attention.units: up to {offers:,} offers per episode (horizon x sites x units) "
                             f"exceed episodes.max_applications = {ep.max_applications:,}; lower one of them")
        if self.policy.name in ("bisim_ppo", "bisim_dqn") and self.policy.params.get("variant", "full") == "full":
            raise ValueError("policy.variant: attention_allocation has no agent-side observation dynamics for the "
                             "Bisimulator's lever; use variant: reward_only")
        return self


@dataclass(frozen=True)
class AllocationContext(PolicyContext):
    """What an allocation policy may read: the budget per step and the incident counts the agent
    has observed, one row per past step and one column per site (``history()``: occurred,
    discovered, units placed)."""

    units: int
    history: Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray]]
    step: Callable[[], int]


def discovery_table(occurred: int, miss: float, units: int, replacement: bool, rng) -> list[int]:
    """D(a) for a = 0..units: incidents ``a`` units discover among ``occurred`` this step, by
    ml-fairness-gym's ``_update_state``, all ``a`` read off one set of uniforms (so D is
    non-decreasing, and without replacement rises by 0 or 1 per unit)."""
    if miss == 0.0:  # every incident within reach is found: no draw
        if replacement:
            return [0] + [occurred] * units
        return list(range(occurred + 1)) + [occurred] * (units - occurred) if occurred < units else \
            list(range(units + 1))
    a = np.arange(units + 1)
    u = rng.random(occurred)
    if replacement:  # each incident found independently with probability 1 - miss^a
        return (u[None, :] < 1.0 - miss ** a[:, None]).sum(axis=1).tolist()
    free = a.copy()
    for x in u:  # incidents in turn; a find uses up a unit (ml-fairness-gym's loop)
        free -= (free > 0) & (x < 1.0 - miss ** free)
    return (a - free).tolist()


class World(steps.LastDecisions):
    """Attention allocation state and seams (see ``abm.families``)."""

    obs_fields = OBS_FIELDS
    family = "attention_allocation"

    def __init__(self, model):
        self.model, self.env = model, model.env
        sc = self.sc = model.scenario
        n = self.n_groups = len(sc.population.sites)
        self.group_names = [s.name for s in sc.population.sites]
        self.group_slices = [(g, g + 1) for g in range(n)]
        self.units = sc.attention.units
        self.replacement = sc.attention.replacement
        self.miss = [s.miss_prob for s in sc.population.sites]
        self.increase = [s.rate_increase for s in sc.population.sites]
        self.decrease = [s.rate_decrease for s in sc.population.sites]
        self.zeta0, self.zeta1 = sc.rewards.seen_weight, sc.rewards.missed_weight
        initial = np.array([s.incident_rate for s in sc.population.sites], dtype=float)
        self.cols: dict[str, np.ndarray] = {"group": np.arange(n, dtype=np.int16), "rate": initial.copy(),
                                            "initial_rate": initial}
        self.incident_rng, self.dynamics_rng = model.rngs["outcomes"], model.rngs["extra"]
        # per site: the episode's counts in Python lists (read and written per decision), added to
        # the run's numpy totals when the episode ends
        self.cum = {k: np.zeros(n) for k in COUNTS}
        self.ep = {k: [0] * n if k != "reward" else [0.0] * n for k in COUNTS}
        self.ep_idle = 0
        self.profit_total = 0.0
        self.approval_reward_total = 0.0
        self.cumulative_return = 0.0
        self.cumulative_missed = 0
        self.step_count = 0
        # the current step: discovery tables D[s][a], units placed, budget left; the last step's counts
        self.table: list[list[int]] = [[0] * (self.units + 1) for _ in range(n)]
        self.placed = [0] * n
        self.left = 0
        self.occurred = [0] * n
        self.last_occurred = [0] * n
        self.last_discovered = [0] * n
        self._start_rate = initial.copy()
        self.log_occurred: list[list[int]] = []
        self.log_discovered: list[list[int]] = []
        self.log_units: list[list[int]] = []

    # -- the step process -----------------------------------------------------------------------
    def start(self) -> None:
        self.env.process(self._steps())

    def _steps(self):
        model, env, n = self.model, self.env, self.n_groups
        yield env.timeout(0.5)
        while True:
            self._begin_step()
            first = self.step_count % n
            order = [(first + k) % n for k in range(n)]
            for _ in range(self.units):
                for s in order:
                    if self.left == 0:
                        break
                    model.submit(s)
                    yield from model.review()
                if self.left == 0:
                    break
            self._resolve_step()
            yield env.timeout(1.0)

    def _begin_step(self) -> None:
        rng, units, rep = self.incident_rng, self.units, self.replacement
        self.occurred = rng.poisson(self.cols["rate"]).tolist()
        self.table = [discovery_table(c, m, units, rep, rng) for c, m in zip(self.occurred, self.miss)]
        self.placed = [0] * self.n_groups
        self.left = units

    def _resolve_step(self) -> None:
        """Count the step's discoveries, pay the missed-incident penalty, move the rates."""
        rate, alpha, theta = self.cols["rate"], self.sc.dynamics.alpha, self.sc.dynamics.theta
        ep, zeta1 = self.ep, self.zeta1
        discovered = [t[a] for t, a in zip(self.table, self.placed)]
        for s, (c, d, a) in enumerate(zip(self.occurred, discovered, self.placed)):
            ep["occurred"][s] += c
            ep["discovered"][s] += d
            ep["units"][s] += a
            ep["reward"][s] -= zeta1 * c
            self.profit_total -= zeta1 * c
            self.cumulative_missed += c - d
        self.ep_idle += self.left
        self.model.bank.profit = self.profit_total
        for s, a in enumerate(self.placed):  # ELBERT harder_env's _general_update_state
            r = rate.item(s)
            scale = math.exp(-alpha * r) if alpha else 1.0
            if a == 0:
                if theta and r <= RATE_FLOOR and self.dynamics_rng.random() < theta:
                    r += 1.0
                r += self.increase[s] * scale
            else:
                r = max(0.0, r - self.decrease[s] * a * scale)
            rate[s] = r
        self.last_occurred, self.last_discovered = self.occurred, discovered
        self.log_occurred.append(self.occurred)
        self.log_discovered.append(discovered)
        self.log_units.append(list(self.placed))
        self.step_count += 1

    def gain(self, s: int) -> int:
        """Incidents one more unit at site ``s`` would discover this step."""
        t, a = self.table[s], self.placed[s]
        return t[a + 1] - t[a] if a < self.units else 0

    # -- observations ---------------------------------------------------------------------------
    def observe(self, idx: np.ndarray) -> np.ndarray:
        if len(idx) == 1:  # one offer per review
            return np.array([self._row(idx.item(0))])
        return np.array([self._row(s) for s in idx.tolist()], dtype=float).reshape(len(idx), len(OBS_FIELDS))

    def _row(self, s: int) -> list[float]:
        ratio = self.ep["discovered"][s] / (self.ep["occurred"][s] + 1.0)
        return [float(self.last_occurred[s]), float(self.last_discovered[s]), float(self.placed[s]),
                float(self.left), ratio, float(s)]

    @property
    def obs_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        big = float(np.finfo(np.float32).max)
        return (np.zeros(len(OBS_FIELDS)),
                np.array([big, big, float(self.units), float(self.units), 1.0, self.n_groups - 1.0]))

    def privileged(self, idx, names):
        return {}  # no privileged columns: an offer's outcome is the gym adapter's (true_outcome)

    def true_outcome(self, idx) -> np.ndarray:
        """Whether one more unit at each offered site would discover an incident this step."""
        return np.array([self.gain(s) > 0 for s in np.asarray(idx).tolist()], dtype=bool)

    def true_outcome_one(self, i: int) -> bool:
        return self.gain(i) > 0

    def amount(self, idx):
        """The log's amount: the incidents the offered unit would discover (its discoveries, if placed)."""
        if np.ndim(idx) == 0:
            return float(self.gain(int(idx)))
        return np.array([self.gain(s) for s in np.asarray(idx).tolist()], dtype=float)

    def wealth_of(self, idx):
        return self.cols["rate"][idx]

    @property
    def bank_reward_total(self) -> float:
        return self.profit_total

    def policy_context(self) -> AllocationContext:
        def history():
            shape = (len(self.log_occurred), self.n_groups)
            return tuple(np.asarray(h, dtype=float).reshape(shape)
                         for h in (self.log_occurred, self.log_discovered, self.log_units))

        return AllocationContext(OBS_FIELDS, tuple(self.group_names), self.units, history,
                                 lambda: self.step_count, family=self.family)

    # -- decisions ------------------------------------------------------------------------------
    def apply_decisions(self, idx, approved, probs, obs) -> None:
        if len(idx) == 1:  # one offer per review: Python scalars
            s = idx.item(0)
            self._last = (s, self._place(s) if approved.item(0) else self._decline(s))
            return
        rewards = [self._place(s) if yes else self._decline(s) for s, yes in zip(idx.tolist(), approved.tolist())]
        self._last = (np.asarray(idx), np.array(rewards, dtype=float))

    def _decline(self, s: int) -> float:
        self.ep["offers"][s] += 1
        return 0.0

    def _place(self, s: int) -> float:
        """One more unit at site ``s``: it is paid (seen + missed weight) x its discoveries."""
        if self.left <= 0:
            raise InvariantError("invariant 'no unit placed beyond the step's budget' broken")
        reward = (self.zeta0 + self.zeta1) * self.gain(s)
        self.ep["offers"][s] += 1
        self.placed[s] += 1
        self.left -= 1
        self.ep["reward"][s] += reward
        self.profit_total += reward
        self.approval_reward_total += reward
        self.model.bank.profit = self.profit_total
        return reward

    # -- episodes -------------------------------------------------------------------------------
    def episode_metrics(self, episode: int) -> dict[str, Any]:
        ep = {k: np.array(v, dtype=float) for k, v in self.ep.items()}
        rate = np.divide(ep["discovered"], ep["occurred"], out=np.full(self.n_groups, np.nan),
                         where=ep["occurred"] > 0)
        ret = float(ep["reward"].sum())
        missed = int(ep["occurred"].sum() - ep["discovered"].sum())
        self.cumulative_return += ret
        row: dict[str, Any] = {"return": ret, "profit": ret, "cumulative_profit": self.cumulative_return,
                               "missed": missed, "cumulative_missed": int(self.cumulative_missed),
                               "idle_units": int(self.ep_idle)}
        for g, name in enumerate(self.group_names):
            row[f"discovery_rate_{name}"] = float(rate[g])
        row["discovery_gap"] = steps.spread(rate)
        occurred, discovered = self.cum["occurred"] + ep["occurred"], self.cum["discovered"] + ep["discovered"]
        row["run_discovery_gap"] = steps.spread(np.divide(discovered, occurred, out=np.full(self.n_groups, np.nan),
                                                          where=occurred > 0))
        for g, name in enumerate(self.group_names):
            row[f"occurred_{name}"] = int(ep["occurred"][g])
            row[f"discovered_{name}"] = int(ep["discovered"][g])
            row[f"units_{name}"] = int(ep["units"][g])
            row[f"incident_rate_{name}"] = float(self.cols["rate"][g])
            row[f"profit_{name}"] = float(ep["reward"][g])
        return row

    @property
    def nullable_metrics(self) -> tuple[str, ...]:
        return ("discovery_gap", "run_discovery_gap", *(f"discovery_rate_{g}" for g in self.group_names))

    def episode_stats(self) -> dict[str, Any]:
        rate = self.cols["rate"]
        ep = {k: np.array(v, dtype=float) for k, v in self.ep.items()}
        return {"groups": tuple(self.group_names), "sizes": np.ones(self.n_groups),
                "mean_wealth": rate.copy(), "mean_wealth_change": rate - self._start_rate,
                "profit": ep["reward"], "applications": ep["offers"], "approvals": ep["units"],
                "occurred": ep["occurred"], "discovered": ep["discovered"], "episode": self.model.episode}

    def end_episode(self, episode: int) -> None:
        for k, v in self.ep.items():
            self.cum[k] += v
            v[:] = [0.0 if k == "reward" else 0] * self.n_groups
        self.ep_idle = 0
        self._start_rate = self.cols["rate"].copy()

    # -- end of run -----------------------------------------------------------------------------
    def check_invariants(self) -> None:
        c = self.cum
        if np.any(self.cols["rate"] < 0):
            raise InvariantError("invariant 'incident rates never negative' broken")
        if np.any(c["discovered"] > c["occurred"]):
            raise InvariantError("invariant 'discovered <= occurred at every site' broken")
        if not self.replacement and np.any(c["discovered"] > c["units"]):
            raise InvariantError("invariant 'a unit discovers at most one incident' broken")
        if c["units"].sum() > self.step_count * self.units:
            raise InvariantError("invariant 'units placed <= budget' broken")
        missed = c["occurred"].sum() - c["discovered"].sum()
        ledger = self.zeta0 * c["discovered"].sum() - self.zeta1 * missed
        if not np.isclose(ledger, self.profit_total, rtol=1e-9, atol=1e-6):
            raise InvariantError(f"invariant 'return = reward ledger' broken: {self.profit_total} vs {ledger}")

    def ledger_check(self, events: pd.DataFrame, episodes: pd.DataFrame) -> None:
        """From the log alone: one apply per offer, one approve per unit, and the approved units'
        discoveries (their amounts) add up to the sites' discoveries."""
        kind = events["kind"].astype(str)
        approves = events[kind == "approve"]
        if (kind == "apply").sum() != int(self.cum["offers"].sum()):
            raise InvariantError("invariant 'one apply event per offer' broken")
        if len(approves) != int(self.cum["units"].sum()):
            raise InvariantError("invariant 'one approve event per unit placed' broken")
        if not np.isclose(float(approves["amount"].sum()), float(self.cum["discovered"].sum())):
            raise InvariantError("invariant 'units' discoveries equal the event ledger' broken")

    def agents_table(self) -> pd.DataFrame:
        c = self.cum
        return pd.DataFrame({
            "agent_id": np.arange(self.n_groups, dtype=np.int64),
            "group": pd.Categorical.from_codes(self.cols["group"], categories=self.group_names),
            "initial_rate": self.cols["initial_rate"], "final_rate": self.cols["rate"].copy(),
            "occurred": c["occurred"].astype(np.int64), "discovered": c["discovered"].astype(np.int64),
            "units": c["units"].astype(np.int64), "offers": c["offers"].astype(np.int64),
        })

    def summary(self) -> dict[str, Any]:
        c, names = self.cum, self.group_names
        rate = np.divide(c["discovered"], c["occurred"], out=np.full(self.n_groups, np.nan), where=c["occurred"] > 0)
        return {"return": self.profit_total, "steps": self.step_count,
                "discovery_rate": {n: float(r) for n, r in zip(names, rate)},
                "missed": int(c["occurred"].sum() - c["discovered"].sum()),
                "incident_rate": {n: float(r) for n, r in zip(names, self.cols["rate"])}}


def population_table(scenario, rng: np.random.Generator) -> pd.DataFrame:
    """The sites (``abm population``), one row each."""
    return pd.DataFrame({"agent_id": np.arange(len(scenario.population.sites), dtype=np.int64),
                         "group": [s.name for s in scenario.population.sites],
                         "incident_rate": [s.incident_rate for s in scenario.population.sites],
                         "miss_prob": [s.miss_prob for s in scenario.population.sites],
                         "rate_increase": [s.rate_increase for s in scenario.population.sites],
                         "rate_decrease": [s.rate_decrease for s in scenario.population.sites]})
