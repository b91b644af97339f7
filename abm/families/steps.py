"""Shared pieces of the one-applicant-per-step families (seed 002 lending and admissions, FICO).

These families run on a unit-step clock: one application per unit of SimPy time, the applicant
drawn uniformly with replacement from the population (seed 002 B.1: "applicants are sampled
uniformly with replacement from the population"). This module holds what they share: the
arrival-process section and process, the context threshold policies read (the known
repayment/success curve and the bank's reward table), group-size allocation, the recall and
credit-gap metrics, and the refusal of Eutopia-only policies. See docs/MODEL.md, "Scenario
families of seed 002 and FICO delayed impact".
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from abm.config import EpisodesConfig, ScenarioBase, Section
from abm.world import PolicyContext

BLOCK = 256  # scalar draws served per call of a generator (``BlockDraws``)


class BlockDraws:
    """One generator's scalar draws of one kind, served from blocks of ``BLOCK``.

    ``rng.integers(n, size=B)`` and ``rng.random(B)`` give the same numbers as B scalar calls,
    and leave the generator in the same state (tests/test_families.py checks it on the installed
    numpy), so a stream that *only this* consumer draws from yields the same trajectory at a
    fraction of the cost: a scalar call is 1-4 us, the largest single costs of a gym step. Only
    for a stream nothing else draws from between two ``next()`` calls (the family checks); the
    unused rest of the last block is drawn but never read (the generator's final state differs,
    and nothing reads it). ``draw(size)`` returns the next ``size`` values as an array."""

    __slots__ = ("draw", "_values", "_at")

    def __init__(self, draw: Callable[[int], np.ndarray]):
        self.draw = draw
        self._values: list = []
        self._at = 0

    def next(self):
        at = self._at
        if at == len(self._values):
            self._values, at = self.draw(BLOCK).tolist(), 0
        self._at = at + 1
        return self._values[at]


def step_episodes(count: int, horizon: float) -> Callable[[], EpisodesConfig]:
    """Default episodes section: ``count`` checkpoints of ``horizon`` steps, decided on arrival."""
    return lambda: EpisodesConfig(count=count, horizon=horizon, decision_interval=1.0, review="immediate")


class StepArrivals(Section):
    process: Literal["unit_steps", "poisson"] = Field(
        "unit_steps", description="unit_steps: exactly one application per time unit (at t = k + 0.5); "
                                  "poisson: a rate-1 Poisson stream (exponential gaps).")


@dataclass(frozen=True)
class RewardTable:
    """The bank's reward for each (decision, true outcome) pair: 'good' = repays / succeeds."""

    approve_good: float
    approve_bad: float
    reject_good: float = 0.0
    reject_bad: float = 0.0

    def gain(self, p_good: np.ndarray) -> np.ndarray:
        """Expected reward of approving minus that of rejecting, given P(good)."""
        p = np.asarray(p_good, dtype=float)
        return p * (self.approve_good - self.reject_good) + (1.0 - p) * (self.approve_bad - self.reject_bad)

    def reward(self, approved: np.ndarray, good: np.ndarray) -> np.ndarray:
        return np.where(approved, np.where(good, self.approve_good, self.approve_bad),
                        np.where(good, self.reject_good, self.reject_bad)).astype(float)

    def reward_one(self, approved: bool, good: bool) -> float:
        """``reward`` of one decision, as a Python float (the scalar paths of the worlds)."""
        return float((self.approve_good if good else self.approve_bad) if approved else
                     (self.reject_good if good else self.reject_bad))


@dataclass(frozen=True)
class ThresholdContext(PolicyContext):
    """What threshold and classifier policies may read besides observations.

    ``p_good(scores, groups)`` is the known curve P(repay | score, group) (admissions: P(success));
    policies apply it to the *observed* score. ``score_counts()`` gives, per group, the sorted
    distinct observed scores of the group's current members and their counts (the bank knows
    its applicant base; uniform sampling makes it the applicant distribution).
    """

    score_field: str
    p_good: Callable[[np.ndarray, np.ndarray], np.ndarray]
    rewards: RewardTable
    score_counts: Callable[[], list[tuple[np.ndarray, np.ndarray]]]


@dataclass
class Outcomes:
    """Resolved decisions handed to ``policy.on_outcomes`` (``repaid`` = good outcome)."""

    agent_id: np.ndarray
    group: np.ndarray
    obs: np.ndarray
    repaid: np.ndarray
    profit: np.ndarray


class DrawnOutcomes:
    """The potential outcome of each application, drawn on arrival from the ``outcomes`` stream
    into ``cols["outcome"]`` (seed 002 lending and admissions): the gym adapter's true outcome,
    as an array and for one applicant, and the draw itself (``outcome_draws``)."""

    def true_outcome(self, idx) -> np.ndarray:
        """Whether each applicant would repay / succeed if approved (the current application's draw)."""
        return self.cols["outcome"][idx]

    def true_outcome_one(self, i: int) -> bool:
        """``true_outcome`` of one applicant (the gym adapter's hot path)."""
        return bool(self.cols["outcome"].item(i))

    def outcome_draws(self, blocks: bool) -> Callable[[], float]:
        """The uniform behind each outcome: from ``BlockDraws`` when the family's ``_prepare`` is
        the stream's only reader (the same numbers), else one ``outcome_rng.random()`` a call."""
        return BlockDraws(self.outcome_rng.random).next if blocks else self.outcome_rng.random


class LastDecisions:
    """``last_idx`` / ``last_rewards`` of a world: the last decided applicants and their rewards,
    kept in ``_last`` as ``(idx array, rewards array)`` for a batch, or as ``(int, float)`` for one
    decision taken in Python scalars (arrays only when read)."""

    _last: tuple[Any, Any] = (np.empty(0, np.int64), np.empty(0))

    @property
    def last_idx(self) -> np.ndarray:
        idx = self._last[0]
        return np.array([idx]) if isinstance(idx, int) else idx

    @property
    def last_rewards(self) -> np.ndarray:
        idx, rewards = self._last
        return np.array([rewards], dtype=float) if isinstance(idx, int) else rewards


def allocate(total: int, shares) -> np.ndarray:
    """Group sizes summing to ``total`` in proportion to ``shares`` (largest remainder)."""
    shares = np.asarray(shares, dtype=float)
    raw = total * shares / shares.sum()
    sizes = np.floor(raw).astype(np.int64)
    order = np.argsort(-(raw - sizes), kind="stable")
    sizes[order[: total - int(sizes.sum())]] += 1
    return sizes


def counts_by_group(values: np.ndarray, groups: np.ndarray, n_groups: int):
    """Per group: (sorted distinct values, counts)."""
    out = []
    for g in range(n_groups):
        v, c = np.unique(values[groups == g], return_counts=True)
        out.append((v, c))
    return out


def recall(tp: np.ndarray, fn: np.ndarray) -> np.ndarray:
    """tp / (tp + fn) per group; NaN where a group has had no good applicant yet."""
    tp, fn = np.asarray(tp, float), np.asarray(fn, float)
    return np.divide(tp, tp + fn, out=np.full(len(tp), np.nan), where=(tp + fn) > 0)


def spread(values: np.ndarray) -> float:
    """max - min over groups (the recall gap); NaN if any group is undefined."""
    values = np.asarray(values, dtype=float)
    return float(values.max() - values.min()) if np.all(np.isfinite(values)) else float("nan")


def credit_gap(scores: np.ndarray, groups: np.ndarray, n_groups: int) -> float:
    """1-Wasserstein distance between the groups' score distributions (``wasserstein1``); with
    more than two groups, the largest distance over pairs (the worst-off pair, like the recall gap)."""
    parts = [scores[groups == g] for g in range(n_groups)]
    if any(len(p) == 0 for p in parts):
        return float("nan")
    return float(max((wasserstein1(parts[a], parts[b])
                      for a, b in itertools.combinations(range(n_groups), 2)), default=0.0))


def wasserstein1(a: np.ndarray, b: np.ndarray, wa: np.ndarray | None = None, wb: np.ndarray | None = None) -> float:
    """1-Wasserstein distance between two (weighted) samples: scipy's ``wasserstein_distance``
    term for term (the integral of |F_a - F_b| over the merged support), its final sum taken with
    ``math.fsum``. scipy sums with ``np.vecdot``, i.e. BLAS ddot, whose order of additions is the
    processor's kernel's (AVX-512, AVX2, SSE): one run's credit gap then differed in its last bits,
    and its episodes digest, between two processors. fsum is exactly rounded: the same everywhere."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    merged = np.sort(np.concatenate([a, b]), kind="stable")

    def cdf(x, w):
        order = np.argsort(x, kind="stable")  # stable: tied weights summed in one order on any processor
        at = x[order].searchsorted(merged[:-1], "right")
        if w is None:
            return at / x.size
        cum = np.concatenate([[0.0], np.cumsum(np.asarray(w, float)[order])])
        return cum[at] / cum[-1]

    return math.fsum(np.abs(cdf(a, wa) - cdf(b, wb)) * np.diff(merged))


def wasserstein2_squared(a: np.ndarray, b: np.ndarray, wa: np.ndarray | None = None,
                         wb: np.ndarray | None = None) -> float:
    """Squared 2-Wasserstein distance between the distributions of samples ``a`` and ``b``
    (optionally weighted by ``wa``, ``wb``): in one dimension the integral over u in (0, 1) of
    (F_a^-1(u) - F_b^-1(u))^2, computed exactly on the union of the two CDFs' steps."""
    def cdf(x, w):
        x = np.asarray(x, float)
        w = np.ones(len(x)) if w is None else np.asarray(w, float)
        order = np.argsort(x, kind="stable")
        x, w = x[order], w[order]
        keep = w > 0
        x, w = x[keep], w[keep]
        return x, np.cumsum(w) / w.sum()

    a, ca = cdf(a, wa)
    b, cb = cdf(b, wb)
    ca[-1] = cb[-1] = 1.0
    upper = np.union1d(ca, cb)
    lower = np.concatenate([[0.0], upper[:-1]])
    mid = (lower + upper) / 2  # strictly inside each interval on which both quantiles are constant
    qa = a[np.minimum(np.searchsorted(ca, mid), len(a) - 1)]
    qb = b[np.minimum(np.searchsorted(cb, mid), len(b) - 1)]
    return math.fsum((upper - lower) * (qa - qb) ** 2)  # exactly rounded: no processor-dependent order


def credit_gap_w2(scores: np.ndarray, groups: np.ndarray, n_groups: int) -> float:
    """``credit_gap`` with the squared ground cost: W2^2 between the groups' score distributions
    (the largest over pairs with more than two groups)."""
    parts = [scores[groups == g] for g in range(n_groups)]
    if any(len(p) == 0 for p in parts):
        return float("nan")
    return float(max((wasserstein2_squared(parts[a], parts[b])
                      for a, b in itertools.combinations(range(n_groups), 2)), default=0.0))


def omit_defaults(section, data: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """Drop ``names`` from a section's dump while they hold their defaults (a plain default or a
    default factory's value), so a field added later leaves the dump, and with it the config
    hash and the run-folder names, of every run that does not set it unchanged."""
    fields = type(section).model_fields
    for name in names:
        info = fields[name]
        default = info.default_factory() if info.default_factory is not None else info.default
        if name in data and getattr(section, name) == default:
            del data[name]
    return data


def unit_step_arrivals(world, pick: Callable[[np.random.Generator], int | None],
                       before_submit: Callable[[int, np.random.Generator], None]):
    """The arrival process: one application per unit step (or rate-1 Poisson), decided on
    arrival when ``episodes.review`` is immediate, else queued for the next decision epoch.

    ``pick(rng)`` returns the applicant (None: nobody left to apply this step);
    ``before_submit(i, rng)`` lets the family act on the applicant before the bank sees it
    (draw the potential outcome, manipulate a test score).
    """
    model, env, rng = world.model, world.env, world.arrival_rng
    poisson = world.model.scenario.arrivals.process == "poisson"
    immediate = model.scenario.episodes.review == "immediate"
    yield env.timeout(rng.exponential(1.0) if poisson else 0.5)
    while True:
        i = pick(rng)
        if i is not None:
            before_submit(i, rng)
            model.submit(i)
            if immediate:
                yield from model.review()
        yield env.timeout(rng.exponential(1.0) if poisson else 1.0)


class StepScenario(ScenarioBase):
    """Base of the one-applicant-per-step families: their episodes section defaults to the
    family's ``default_episodes``, and a partial section keeps those defaults for omitted keys."""

    default_episodes: ClassVar[dict[str, Any]] = {}

    @model_validator(mode="before")
    @classmethod
    def _episodes(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = data.get("episodes")
            defaults = cls.default_episodes
            data = {**data, "episodes": {**defaults, **given} if isinstance(given, dict) else
                    (given if given is not None else dict(defaults))}
        return data
