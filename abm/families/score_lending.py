"""The score-lending world shared by ``credit_score`` (seed 002 lending) and ``fico`` (Liu et al.).

One applicant per unit step; the bank approves or rejects; an approved applicant repays with
the family's probability P(repay | true score, ...), which moves the *true* score by
``score_change_repay`` or ``score_change_default`` (clipped to the score range) and pays the
bank its reward. The agent sees an *observed* score that moves by the per-group observation
dynamics (``observation.score_change_*``; by default the true changes, so it equals the true
score): seed 002's Bisimulator lever, which leaves repayment untouched. A family module
supplies the population, P(repay) and the known curve the policies use.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from abm.config import Section
from abm.errors import InvariantError
from abm.eventlog import EventKind
from abm.families import steps
from abm.world import Lever

OBS_FIELDS = ("credit_score", "group", "repay_ratio", "default_ratio")

#: what each of ``OBS_FIELDS`` is (``Scenario.observation_definitions`` of credit_score and fico)
SCORE_OBSERVATIONS: dict[str, str] = {
    "credit_score": "The applicant's credit score as the bank observes it.",
    "group": "The applicant's group index (info[\"group_name\"] has its name).",
    "repay_ratio": "The applicant's repaid loans / loans so far (0 before a first loan).",
    "default_ratio": "The applicant's defaulted loans / loans so far (0 before a first loan).",
}

#: the columns ``episode_metrics`` writes (``Scenario.metric_definitions`` of credit_score and fico;
#: ``{g}``: each group; units in braces are the family's ``units``)
SCORE_METRICS: dict[str, tuple[str, str]] = {
    "mean_score_{g}": ("{score}", "Mean true credit score of group g's applicants at the episode's end."),
    "observed_mean_score_{g}": ("{score}", "Mean credit score the bank observes for group g (differs from "
                                           "mean_score_{g} where observation dynamics differ from the true ones)."),
    "credit_gap": ("{wealth_unit}", "1-Wasserstein distance between the groups' true score distributions (seed "
                                    "002's Kantorovich distance); with more than two groups the largest over pairs."),
    "observed_credit_gap": ("{wealth_unit}", "credit_gap of the observed scores."),
    "credit_gap_w2": ("{wealth_unit} squared", "credit_gap with the squared ground cost (W2^2); only with "
                                               "metrics.credit_gap_w2."),
    "observed_credit_gap_w2": ("{wealth_unit} squared", "credit_gap_w2 of the observed scores; only with "
                                                        "metrics.credit_gap_w2."),
    "return": ("{money}", "The bank's reward summed over the episode's decisions."),
    "profit": ("{money}", "Same as return (the bank's profit column every family has)."),
    "cumulative_profit": ("{money}", "Sum of profit over episodes 0..episode."),
    "cumulative_return": ("{money}", "Same as cumulative_profit."),
    "average_return": ("{money} per episode", "cumulative_return / (episode + 1)."),
    "recall_{g}": ("share (0-1)", "Of group g's applicants who would repay, the share approved, cumulative since "
                                  "the run began (true positive rate); empty until the group's first such applicant."),
    "recall_gap": ("share (0-1)", "Largest minus smallest recall_{g} over groups (the equal-opportunity gap); "
                                  "empty while any recall is."),
    "cumulative_loans_{g}": ("loans", "Loans approved to group g since the run began."),
    "applications_{g}": ("applications", "Applications from group g in the episode."),
    "approvals_{g}": ("loans", "Applications from group g approved in the episode."),
    "repayments_{g}": ("loans", "Loans to group g repaid in the episode."),
    "defaults_{g}": ("loans", "Loans to group g defaulted in the episode."),
    "profit_{g}": ("{money}", "The bank's reward from group g's decisions in the episode."),
}


class ObservationDynamics(Section):
    """How the agent's view of the score moves (seed 002 B.1: group-specific c+ and c-)."""

    score_change_repay: list[float] | None = Field(
        None, description="Per group: observed-score change on repayment (null: the true change).")
    score_change_default: list[float] | None = Field(
        None, description="Per group: observed-score change on default (null: the true change).")


@dataclass
class Population:
    """A generated population, rows sorted by group."""

    group_names: tuple[str, ...]
    group: np.ndarray
    score: np.ndarray
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def frame(self) -> pd.DataFrame:
        out = pd.DataFrame({
            "agent_id": np.arange(len(self.group), dtype=np.int64),
            "group": pd.Categorical.from_codes(self.group, categories=list(self.group_names)),
            "credit_score": self.score,
        })
        for k, v in self.extra.items():
            out[k] = v
        return out


def check_observation_lengths(obs: ObservationDynamics, n_groups: int) -> None:
    for name in ("score_change_repay", "score_change_default"):
        value = getattr(obs, name)
        if value is not None and len(value) != n_groups:
            raise ValueError(f"observation.{name} needs one value per group ({n_groups}), got {len(value)}")


class ScoreLendingWorld(steps.DrawnOutcomes, steps.LastDecisions, ABC):
    """State and seams (see ``abm.families``) of a one-applicant-per-step score-lending family.

    Subclasses set ``family``, ``score_range`` and ``integer_scores`` and implement
    ``generate(scenario, rng) -> Population``, ``repay_prob(idx)`` (the truth, per applicant),
    ``known_curve(scores, groups)`` (what policies may use) and ``reward_table()``.
    """

    obs_fields = OBS_FIELDS
    family = ""
    score_range = (0.0, 1.0)
    integer_scores = False
    report_w2 = False  # also report the credit gap as W2^2 (``credit_gap_w2``); a family option sets it
    hooks = False  # whether ``_on_arrival`` / ``_after_loan`` do anything (kept off the hot path otherwise)

    def __init__(self, model):
        self.model, self.env = model, model.env
        sc = model.scenario
        self.pop = self.generate(sc, model.rngs["population"])
        self.group_names = list(self.pop.group_names)
        n_groups = len(self.group_names)
        self.n_groups = n_groups
        sizes = np.bincount(self.pop.group, minlength=n_groups)
        self.sizes = sizes.astype(float)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        self.group_slices = [(int(bounds[g]), int(bounds[g + 1])) for g in range(n_groups)]
        n = len(self.pop.group)
        self.cols: dict[str, np.ndarray] = {
            "group": self.pop.group.astype(np.int16),
            "score": self.pop.score.astype(np.float64).copy(),
            "initial_score": self.pop.score.astype(np.float64).copy(),
            "observed_score": self.pop.score.astype(np.float64).copy(),
            "applications": np.zeros(n, np.int32),
            "loans": np.zeros(n, np.int32),
            "repayments": np.zeros(n, np.int32),
            "defaults": np.zeros(n, np.int32),
            "outcome": np.zeros(n, bool),  # potential outcome of the current application
            "p_repay": np.full(n, np.nan),
        }
        self.cols.update({k: np.asarray(v) for k, v in self.pop.extra.items()})
        dyn, obs = sc.dynamics, sc.observation
        self.change_repay, self.change_default = float(dyn.score_change_repay), float(dyn.score_change_default)
        self.set_observation_dynamics(obs.score_change_repay, obs.score_change_default)
        self.rewards: steps.RewardTable = self.reward_table()
        self.arrival_rng = model.rngs["arrivals"]
        self.outcome_rng = model.rngs["outcomes"]
        keys = ("applications", "approvals", "repayments", "defaults", "tp", "fn", "reward")
        self.cum = {k: np.zeros(n_groups) for k in keys}
        self.ep = {k: np.zeros(n_groups) for k in keys}
        self.profit_total = 0.0
        self.cumulative_return = 0.0
        self._one = np.zeros(1, np.int64)  # a reused one-applicant index (scoring on arrival)
        self.score_at_episode_start = self.mean_scores()
        self.initial_mean = self.score_at_episode_start.copy()

    # -- the Bisimulator seam -----------------------------------------------------------------
    def set_observation_dynamics(self, repay=None, default=None) -> None:
        """Per-group observed-score changes on repay/default (None: the true change)."""
        n = self.n_groups
        self.obs_repay = np.full(n, self.change_repay) if repay is None else np.asarray(repay, float)
        self.obs_default = np.full(n, self.change_default) if default is None else np.asarray(default, float)
        if self.obs_repay.shape != (n,) or self.obs_default.shape != (n,):
            raise InvariantError(f"observation dynamics need one value per group ({n})")

    def observation_lever(self, scale: float) -> Lever:
        """The Bisimulator's omega = (observed c+ per group, observed c- per group), searched
        within [min(0, scale c), max(0, scale c)] of the true change c (``abm.world.ObservationLever``)."""
        G = self.n_groups
        up, down = float(self.change_repay), float(self.change_default)
        init = np.concatenate([self.obs_repay, self.obs_default]).astype(float)
        low = np.concatenate([np.full(G, min(0.0, scale * up)), np.full(G, min(0.0, scale * down))])
        high = np.concatenate([np.full(G, max(0.0, scale * up)), np.full(G, max(0.0, scale * down))])
        return Lever(init, low, high,
                     lambda om: self.set_observation_dynamics(om[:G], om[G:]),
                     lambda om: {"observation": {"score_change_repay": [float(x) for x in om[:G]],
                                                 "score_change_default": [float(x) for x in om[G:]]}})

    def copy_state_from(self, other: "ScoreLendingWorld") -> None:
        """Take over the applicants' state of ``other``, a world of the same scenario (true and
        observed scores, histories, latent traits): the Bisimulator's probes start from the
        training state. Call before the clock starts; the counters of metrics stay this world's."""
        if set(other.cols) != set(self.cols) or len(other.cols["group"]) != len(self.cols["group"]) or \
                not np.array_equal(other.cols["group"], self.cols["group"]):
            raise InvariantError("copy_state_from: the worlds have different populations")
        for key, value in other.cols.items():
            self.cols[key] = value.copy()

    # -- set-up -----------------------------------------------------------------------------
    def start(self) -> None:
        blocks = self._draws_in_blocks()
        pick, self._outcome_draw = self._pick, self.outcome_draws(blocks)
        if blocks:
            n, rng = len(self.cols["group"]), self.arrival_rng
            picks = steps.BlockDraws(lambda size: rng.integers(n, size=size))
            pick = lambda _rng: picks.next()  # noqa: E731  (``_pick`` from the block)
        self.env.process(steps.unit_step_arrivals(self, pick, self._prepare))

    def _pick(self, rng) -> int:
        return int(rng.integers(len(self.cols["group"])))

    def _draws_in_blocks(self) -> bool:
        """Whether the arrival stream feeds ``_pick`` alone and the outcome stream ``_prepare``
        alone: then both are drawn in blocks (``steps.BlockDraws``: the same numbers). Not when
        anything else draws from them between two applicants: Poisson gaps, a family's arrival
        hook, a subclass's own ``_pick`` or ``_prepare``."""
        cls = type(self)
        return (not self.hooks and self.model.scenario.arrivals.process != "poisson"
                and cls._pick is ScoreLendingWorld._pick and cls._prepare is ScoreLendingWorld._prepare)

    def _prepare(self, i: int, rng) -> None:
        c = self.cols
        if self.hooks:
            self._on_arrival(i, rng)
        p = self.repay_prob_one(i)  # scored at arrival: the bank decides on this draw
        c["p_repay"][i] = p
        c["outcome"][i] = self._outcome_draw() < p  # drawn for everyone: recall needs it
        c["applications"][i] += 1
        g = c["group"].item(i)
        self.cum["applications"][g] += 1
        self.ep["applications"][g] += 1

    def _on_arrival(self, i: int, rng) -> None:
        """What happens to applicant ``i`` as they apply, before they are scored (nothing here;
        ml-fairness-gym's mass-shift dynamics draw the score afresh)."""

    def _after_loan(self, idx: np.ndarray, groups: np.ndarray, repaid: np.ndarray, before: np.ndarray) -> None:
        """After approved loans resolved (``before``: their true scores before the change)."""

    def score_counts(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per group: the distinct observed scores of its members and their counts (the applicant
        distribution under uniform sampling)."""
        return steps.counts_by_group(self.cols["observed_score"], self.cols["group"], self.n_groups)

    def policy_context(self) -> steps.ThresholdContext:
        return steps.ThresholdContext(self.obs_fields, tuple(self.group_names), "credit_score",
                                      self.known_curve, self.rewards, self.score_counts, family=self.family)

    # -- observations -----------------------------------------------------------------------
    def observe(self, idx: np.ndarray) -> np.ndarray:
        c = self.cols
        if len(idx) == 1:  # one applicant per step: Python scalars, same float64 values
            i = int(idx[0])
            loans = max(c["loans"].item(i), 1)
            return np.array([[c["observed_score"].item(i), c["group"].item(i),
                              c["repayments"].item(i) / loans, c["defaults"].item(i) / loans]])
        out = np.empty((len(idx), 4))
        loans = np.maximum(c["loans"][idx], 1)
        out[:, 0] = c["observed_score"][idx]
        out[:, 1] = c["group"][idx]
        out[:, 2] = c["repayments"][idx] / loans
        out[:, 3] = c["defaults"][idx] / loans
        return out

    @property
    def obs_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.score_range
        return np.array([lo, 0.0, 0.0, 0.0]), np.array([hi, self.n_groups - 1.0, 1.0, 1.0])

    def privileged(self, idx: np.ndarray, names) -> dict[str, np.ndarray]:
        out = {}
        for name in names:
            if name == "default":
                out[name] = ~self.cols["outcome"][idx]
            elif name in ("p_repay", "score"):
                out[name] = self.cols[name][idx]
        return out

    def amount(self, idx):
        return 1.0 if np.ndim(idx) == 0 else np.ones(len(idx))  # every loan is one unit (seed 002, Liu et al.)

    def wealth_of(self, idx):
        return self.cols["score"][idx]

    @property
    def bank_reward_total(self) -> float:
        return self.profit_total

    # -- decisions and outcomes -------------------------------------------------------------
    def apply_decisions(self, idx: np.ndarray, approved: np.ndarray, probs: np.ndarray, obs: np.ndarray) -> None:
        if len(idx) == 1:  # the common case (review: immediate): scalar updates are ~10x cheaper
            self._apply_one(int(idx[0]), bool(approved[0]), obs)
            return
        idx, approved = np.asarray(idx), np.asarray(approved, bool)
        c, n = self.cols, self.n_groups
        groups = c["group"][idx]
        good = c["outcome"][idx]
        rewards = self.rewards.reward(approved, good)
        self._last = (idx, rewards)
        for store in (self.cum, self.ep):
            store["approvals"] += np.bincount(groups[approved], minlength=n)
            store["tp"] += np.bincount(groups[approved & good], minlength=n)
            store["fn"] += np.bincount(groups[~approved & good], minlength=n)
            store["reward"] += np.bincount(groups, weights=rewards, minlength=n)
        self.profit_total += float(rewards.sum())
        self.model.bank.profit = self.profit_total
        won = idx[approved]
        if len(won) == 0:
            return
        repaid, gw = good[approved], groups[approved]
        np.add.at(c["loans"], won, 1)
        np.add.at(c["repayments"], won[repaid], 1)
        np.add.at(c["defaults"], won[~repaid], 1)
        for store in (self.cum, self.ep):
            store["repayments"] += np.bincount(gw[repaid], minlength=n)
            store["defaults"] += np.bincount(gw[~repaid], minlength=n)
        lo, hi = self.score_range
        before = c["score"][won]
        # an applicant drawn twice in one batch gets both changes, then one clip
        np.add.at(c["score"], won, np.where(repaid, self.change_repay, self.change_default))
        np.add.at(c["observed_score"], won, np.where(repaid, self.obs_repay[gw], self.obs_default[gw]))
        c["score"][won] = np.clip(c["score"][won], lo, hi)
        c["observed_score"][won] = np.clip(c["observed_score"][won], lo, hi)
        if self.hooks:
            self._after_loan(won, gw, repaid, before)
        kinds = np.where(repaid, EventKind.REPAY, EventKind.DEFAULT).astype(np.int8)
        self.model.log.extend(self.env.now, self.model.episode, won, gw, kinds, 1.0, c["score"][won], np.nan)
        policy = self.model.policy
        if policy is not None:
            policy.on_outcomes(steps.Outcomes(won, gw, obs[approved], repaid, rewards[approved]))

    def _apply_one(self, i: int, approved: bool, obs: np.ndarray) -> None:
        c, cum, ep = self.cols, self.cum, self.ep
        g = c["group"].item(i)  # .item(): Python scalars, cheaper than numpy ones and the same values
        good = bool(c["outcome"].item(i))
        reward = self.rewards.reward_one(approved, good)
        self._last = (i, reward)
        self.profit_total += reward
        self.model.bank.profit = self.profit_total
        cum["reward"][g] += reward  # the per-group counters of both stores (loops unrolled)
        ep["reward"][g] += reward
        if good:
            key = "tp" if approved else "fn"
            cum[key][g] += 1
            ep[key][g] += 1
        if not approved:
            return
        lo, hi = self.score_range
        c["loans"][i] += 1
        key = "repayments" if good else "defaults"
        c[key][i] += 1
        cum["approvals"][g] += 1
        ep["approvals"][g] += 1
        cum[key][g] += 1
        ep[key][g] += 1
        before = c["score"].item(i)
        c["score"][i] = min(hi, max(lo, before + (self.change_repay if good else self.change_default)))
        c["observed_score"][i] = min(hi, max(lo, c["observed_score"].item(i) +
                                             (self.obs_repay.item(g) if good else self.obs_default.item(g))))
        if self.hooks:
            self._after_loan(np.array([i]), np.array([g]), np.array([good]), np.array([before]))
        log = self.model.log
        if log.enabled:
            log.add(self.env.now, self.model.episode, i, g, EventKind.REPAY if good else EventKind.DEFAULT,
                    1.0, float(c["score"][i]))
        else:
            log.skip(1)
        policy = self.model.policy
        if policy is not None:
            policy.on_outcomes(steps.Outcomes(np.array([i]), np.array([g]), obs, np.array([good]),
                                              np.array([reward])))

    # -- episodes ---------------------------------------------------------------------------
    def mean_scores(self, column: str = "score") -> np.ndarray:
        return np.bincount(self.cols["group"], weights=self.cols[column], minlength=self.n_groups) / self.sizes

    def credit_gap(self, column: str = "score", squared: bool = False) -> float:
        """The groups' distance on ``column``: W1 (seed 002's "Kantorovich distance"), or W2^2
        (the squared ground cost) with ``squared``; the largest pair with more than two groups."""
        c = self.cols
        gap = steps.credit_gap_w2 if squared else steps.credit_gap
        return gap(c[column], c["group"], self.n_groups)

    def episode_metrics(self, episode: int) -> dict[str, Any]:
        mu, mu_obs = self.mean_scores(), self.mean_scores("observed_score")
        rec = steps.recall(self.cum["tp"], self.cum["fn"])
        ret = float(self.ep["reward"].sum())
        self.cumulative_return += ret
        row: dict[str, Any] = {}
        for g, name in enumerate(self.group_names):
            row[f"mean_score_{name}"] = mu[g]
        for g, name in enumerate(self.group_names):
            row[f"observed_mean_score_{name}"] = mu_obs[g]
        row["credit_gap"] = self.credit_gap("score")
        row["observed_credit_gap"] = self.credit_gap("observed_score")
        if self.report_w2:
            row["credit_gap_w2"] = self.credit_gap("score", squared=True)
            row["observed_credit_gap_w2"] = self.credit_gap("observed_score", squared=True)
        row["return"] = ret
        row["profit"] = ret
        row["cumulative_profit"] = self.cumulative_return
        row["cumulative_return"] = self.cumulative_return
        row["average_return"] = self.cumulative_return / (episode + 1)
        for g, name in enumerate(self.group_names):
            row[f"recall_{name}"] = rec[g]
        row["recall_gap"] = steps.spread(rec)
        for g, name in enumerate(self.group_names):
            row[f"cumulative_loans_{name}"] = int(self.cum["approvals"][g])
            row[f"applications_{name}"] = int(self.ep["applications"][g])
            row[f"approvals_{name}"] = int(self.ep["approvals"][g])
            row[f"repayments_{name}"] = int(self.ep["repayments"][g])
            row[f"defaults_{name}"] = int(self.ep["defaults"][g])
            row[f"profit_{name}"] = float(self.ep["reward"][g])
        return row

    @property
    def nullable_metrics(self) -> tuple[str, ...]:  # recall is undefined before a group's first repayer
        return ("recall_gap", *(f"recall_{g}" for g in self.group_names))

    def episode_stats(self) -> dict[str, Any]:
        """Per-group signals for learning objectives; the score plays the role of wealth."""
        mu = self.mean_scores()
        return {
            "groups": tuple(self.group_names), "sizes": self.sizes.copy(),
            "mean_wealth": mu.copy(), "mean_wealth_change": mu - self.score_at_episode_start,
            "profit": self.ep["reward"].copy(), "applications": self.ep["applications"].copy(),
            "approvals": self.ep["approvals"].copy(), "recall": steps.recall(self.cum["tp"], self.cum["fn"]),
            "episode": self.model.episode,
        }

    def end_episode(self, episode: int) -> None:
        self.score_at_episode_start = self.mean_scores()
        for v in self.ep.values():
            v[:] = 0

    # -- end of run -------------------------------------------------------------------------
    def check_invariants(self) -> None:
        c = self.cols
        lo, hi = self.score_range
        for col in ("score", "observed_score"):
            if not np.all((c[col] >= lo) & (c[col] <= hi)):
                raise InvariantError(f"invariant '{col} in [{lo:g}, {hi:g}]' broken")
        if self.integer_scores and not np.all(c["score"] == np.round(c["score"])):
            raise InvariantError("invariant 'credit scores are whole numbers' broken")
        if not np.array_equal(c["loans"], c["repayments"] + c["defaults"]):
            raise InvariantError("invariant 'loans = repayments + defaults' broken")
        if int(c["loans"].sum()) != int(self.cum["approvals"].sum()):
            raise InvariantError("invariant 'loans = approvals' broken")
        if int(c["applications"].sum()) != int(self.cum["applications"].sum()):
            raise InvariantError("invariant 'application counts' broken")
        ledger = self.rewards.approve_good * c["repayments"].sum() + self.rewards.approve_bad * c["defaults"].sum()
        if not np.isclose(ledger, self.profit_total, rtol=1e-9, atol=1e-6):
            raise InvariantError(f"invariant 'return = reward ledger' broken: {self.profit_total} vs {ledger}")
        if int(self.cum["tp"].sum()) != int(c["repayments"].sum()):
            raise InvariantError("invariant 'true positives = repayments' broken")

    def ledger_check(self, events: pd.DataFrame, episodes: pd.DataFrame) -> None:
        """The bank's return recomputed from the event log alone (rejections earn nothing)."""
        kind = events["kind"].astype(str)
        ledger = self.rewards.approve_good * int((kind == "repay").sum()) + \
            self.rewards.approve_bad * int((kind == "default").sum())
        if not np.isclose(ledger, self.profit_total, rtol=1e-9, atol=1e-6):
            raise InvariantError(f"invariant 'return equals the event ledger' broken: "
                                 f"ledger {ledger:.6f}, bank {self.profit_total:.6f}")
        if int((kind == "apply").sum()) != int(self.cum["applications"].sum()):
            raise InvariantError("invariant 'one apply event per application' broken")

    def agents_table(self) -> pd.DataFrame:
        c = self.cols
        table = pd.DataFrame({
            "agent_id": np.arange(len(c["group"]), dtype=np.int64),
            "group": pd.Categorical.from_codes(c["group"], categories=self.group_names),
            "initial_score": c["initial_score"], "final_score": c["score"],
            "final_observed_score": c["observed_score"],
            "applications": c["applications"], "loans": c["loans"],
            "repayments": c["repayments"], "defaults": c["defaults"],
        })
        for k in self.pop.extra:
            table[k] = c[k]
        return table

    def summary(self) -> dict[str, Any]:
        names = self.group_names
        return {
            "return": self.profit_total,
            "recall": {n: float(r) for n, r in zip(names, steps.recall(self.cum["tp"], self.cum["fn"]))},
            "loans": {n: int(self.cum["approvals"][g]) for g, n in enumerate(names)},
            "initial_mean_score": {n: float(self.initial_mean[g]) for g, n in enumerate(names)},
            "final_mean_score": {n: float(m) for n, m in zip(names, self.mean_scores())},
            "observation_dynamics": {"score_change_repay": self.obs_repay.tolist(),
                                     "score_change_default": self.obs_default.tolist()},
        }

    # -- what a family supplies -------------------------------------------------------------
    @abstractmethod
    def generate(self, scenario, rng) -> Population:
        """The initial population (rows sorted by group); sets ``self.score_range`` if needed."""

    @abstractmethod
    def repay_prob(self, idx: np.ndarray) -> np.ndarray:
        """The true P(repay) of applicants ``idx`` now (from their true scores)."""

    def repay_prob_one(self, i: int) -> float:
        """``repay_prob`` of applicant ``i`` as a float (a family may override it with scalar
        arithmetic that gives the same value)."""
        one = self._one
        one[0] = i
        return float(self.repay_prob(one)[0])

    @abstractmethod
    def known_curve(self, scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
        """The repayment curve P(repay | score, group) the bank knows (policies use it)."""

    @abstractmethod
    def reward_table(self) -> steps.RewardTable:
        """The bank's reward per (decision, outcome)."""
