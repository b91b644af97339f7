"""The seams between the engine, a scenario family's world and a policy, as typed protocols.

The engine core (``abm.engine``) knows nothing about lending. A scenario family supplies a
*world*: the population's numpy columns, its arrival processes, what the bank observes, the
consequences of decisions and the metrics. Every world implements ``World``; a world may also
implement any of the small optional capability protocols below, and the engine, runner, gym
adapter and policies ask ``isinstance(world, Capability)`` (all are ``runtime_checkable``)
instead of probing attributes one by one.

A policy reads a ``PolicyContext`` (never a family's constants): the observation field names,
their scales, the group names, plus whatever typed extras a family's context adds (the score
families' known curve, Eutopia's published approval model, seed 001's MDP). What a policy needs
from a family is declared as capability names (``Policy.requires``) and checked against what the
family provides (``Scenario.capabilities``) when a scenario is validated.

Capability names (the vocabulary of ``requires`` / ``capabilities``):
  ``wealth``          observation fields ``wealth`` (and Eutopia's Loanly score/label), $K scale in
                      ``PolicyContext.obs_scale``
  ``latent_default``  privileged column ``default`` (the oracle)
  ``labels``          privileged column ``label`` (Eutopia's equal-opportunity rule)
  ``approval_model``  the family publishes an approval model applicants self-select on
                      (``ApprovalContext``); learning lenders of seed 000
  ``score_curve``     a known P(good | score, group) and the score distribution (``ScoreCurveContext``)
  ``decision_env``    one decision per step with an immediate reward (the gym adapter; deep lenders)
  ``loan_mdp``        seed 001's enumerated Beta-belief MDP (``LoanMDPContext``)
  ``attention_budget`` units of attention to place over sites each step (``AllocationContext``)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

import numpy as np
import pandas as pd

#: capability name -> what it is, in the words of a refusal ("it needs ...")
CAPABILITIES = {
    "wealth": "wealth observations (eutopia)",
    "latent_default": "the applicants' latent default (eutopia)",
    "labels": "Loanly labels (eutopia)",
    "approval_model": "a published approval model (eutopia)",
    "score_curve": "a known score curve (credit_score, fico, admissions)",
    "decision_env": "one decision per step with its reward (the gym adapter: credit_score, fico, admissions, eutopia)",
    "loan_mdp": "seed 001's loan MDP (beta_belief)",
    "attention_budget": "an attention budget per step over sites (attention_allocation)",
}


# -- the world -------------------------------------------------------------------------------
@runtime_checkable
class World(Protocol):
    """What every family's world implements (the engine calls nothing else unasked)."""

    group_names: list[str]
    #: (start, stop) rows of each group in the columns
    group_slices: list[tuple[int, int]]
    #: per-applicant state, one numpy array per column (``group`` at least)
    cols: dict[str, np.ndarray]
    #: names of the observation matrix's columns
    obs_fields: tuple[str, ...]
    #: the bank's cumulative profit (the runner checks episode profits sum to it)
    profit_total: float

    def start(self) -> None:
        """Start the arrival processes (called once, after the policy is attached)."""

    def observe(self, idx: np.ndarray) -> np.ndarray:
        """The observation matrix of applicants ``idx`` (one row each, ``obs_fields`` columns)."""

    def privileged(self, idx: np.ndarray, names: tuple[str, ...]) -> dict[str, np.ndarray]:
        """Privileged columns a policy declared (``Policy.privileged``), e.g. the latent default."""

    def apply_decisions(self, idx: np.ndarray, approved: np.ndarray, probs: np.ndarray, obs: np.ndarray) -> None:
        """The consequences of one decided batch."""

    def amount(self, idx): ...

    def wealth_of(self, idx):
        """The state of applicants ``idx`` (the family's ``Scenario.state``: wealth, score ...), logged
        as each event's ``<state>_after``."""

    def episode_metrics(self, episode: int) -> dict[str, Any]:
        """One row of ``episodes.parquet``."""

    def episode_stats(self) -> dict[str, Any]:
        """Per-group statistics handed to ``policy.on_episode_end``."""

    def end_episode(self, episode: int) -> None: ...

    def check_invariants(self) -> None: ...

    def ledger_check(self, events: pd.DataFrame, episodes: pd.DataFrame) -> None:
        """Recompute the bank's ledger (and counts) from the event log; raise InvariantError."""

    def agents_table(self) -> pd.DataFrame: ...

    def summary(self) -> dict[str, Any]: ...

    def policy_context(self) -> "PolicyContext": ...


# -- optional capabilities of a world -----------------------------------------------------------
@runtime_checkable
class BlockArrivals(Protocol):
    """Arrivals sampled ahead in exact blocks; the engine commits those up to now before a review."""

    def collect_arrivals(self) -> None: ...


@runtime_checkable
class BankReward(Protocol):
    """A family whose bank reward is not its profit (score families, seed 001's MDP reward).
    Without it the gym adapter's reward is the increase of ``profit_total``."""

    @property
    def bank_reward_total(self) -> float: ...


@runtime_checkable
class NullableMetrics(Protocol):
    """Metric columns that may be NaN (e.g. recall before any repayer applied)."""

    nullable_metrics: tuple[str, ...]


@runtime_checkable
class HeadlineSummary(Protocol):
    """Headline numbers for ``summary.json`` (seed 001: exact vs simulated values)."""

    def headline_summary(self) -> dict[str, Any]: ...


@runtime_checkable
class ObservationBounds(Protocol):
    """``(low, high)`` arrays for the gym adapter's observation ``Box``."""

    @property
    def obs_bounds(self) -> tuple[np.ndarray, np.ndarray]: ...


@runtime_checkable
class TrueOutcomes(Protocol):
    """Whether each applicant would repay / succeed if approved (privileged; recall-type metrics).
    Without it the gym adapter reads ``not cols["default"]``."""

    def true_outcome(self, idx: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class TrueOutcomeOne(Protocol):
    """``true_outcome`` of one applicant as a Python bool (the same value): the gym adapter reads
    it once per decision, where the class that defines it also defines ``true_outcome``."""

    def true_outcome_one(self, i: int) -> bool: ...


@runtime_checkable
class ObservationLever(Protocol):
    """The Bisimulator's lever omega: what the agent *observes* of the dynamics, per group, while
    the true dynamics stay fixed (score lending: the observed c+ / c-; admissions: the
    manipulation costs). ``observation_lever(scale)`` describes it with search bounds ``scale``
    times the true values."""

    def observation_lever(self, scale: float) -> "Lever": ...


@dataclass(frozen=True)
class Lever:
    """omega as a flat vector: its start, search bounds, how to apply it to the live world and
    the scenario fields it corresponds to (so new episodes start from it)."""

    init: np.ndarray
    low: np.ndarray
    high: np.ndarray
    #: omega -> None: set it on the live world
    apply: Callable[[np.ndarray], None]
    #: omega -> {section: {field: value}}: the scenario update with the same effect
    fields: Callable[[np.ndarray], dict[str, dict[str, Any]]]


# -- what a policy may read ---------------------------------------------------------------------
@dataclass(frozen=True)
class PolicyContext:
    """Facts a policy may read besides observations. Families extend it with typed extras."""

    obs_fields: tuple[str, ...]
    group_names: tuple[str, ...]
    #: the family's name (for messages)
    family: str = field(default="", kw_only=True)
    #: units of observation fields: the observation of ``f`` is ``value / obs_scale[f]``
    obs_scale: Mapping[str, float] = field(default_factory=dict, kw_only=True)


@runtime_checkable
class ScoreCurveContext(Protocol):
    """Score families: a known curve P(good | score, group) read at the observed score."""

    score_field: str
    p_good: Callable[[np.ndarray, np.ndarray], np.ndarray]
    rewards: Any
    score_counts: Callable[[], list[tuple[np.ndarray, np.ndarray]]]


@runtime_checkable
class ApprovalContext(Protocol):
    """A family that publishes the lender's approval model (Eutopia's Loanly head)."""

    approval: Any


@runtime_checkable
class LoanMDPContext(Protocol):
    """Seed 001: the enumerated loan MDP and the scenario its rollouts copy."""

    params: Any
    scenario: Any

    @property
    def mdp(self) -> Any: ...
