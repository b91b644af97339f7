"""The engine core: one Mesa model, one SimPy clock, a bank that reviews a queue.

The core knows nothing about lending and builds nothing: it is handed a factory for the
scenario family's *world* (``abm.world.World``: population columns, arrival processes,
observations, the consequences of decisions, metrics) and a policy (or a factory for one, given
the world's ``PolicyContext``). ``abm.build.simulation`` is the one place that looks both up
from a scenario. ``env.now`` is the only clock (``model.time`` mirrors it) and nothing else
advances it. Mesa's convention holds: ``step()`` advances the model by one episode of the SimPy
clock (so ``run_model()`` runs ``episodes.count`` episodes, and ``running`` turns False after
the last).

Decision protocol. Applications join ``bank.queue``. At each decision epoch (every
``decision_interval``; or on arrival with ``review: immediate``) the bank builds the
observation batch, asks the policy for approval probabilities ``a`` and draws each decision
~ Bernoulli(a) from the decision stream. In *external* mode (the gymnasium adapter) the bank
instead yields one ``DecisionRequest`` per applicant and waits for its action.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import mesa
import numpy as np
import simpy

from abm.agents import Applicant, Bank, Group
from abm.errors import UserError
from abm.eventlog import EventKind, EventLog
from abm.world import BlockArrivals, PolicyContext, World

# Named random streams, spawned in this order from the scenario seed. Adding a stream at the
# end never changes the others.
STREAMS = ("model", "population", "arrivals", "decisions", "policy", "outcomes", "extra")
# event kinds as int8 scalars: np.where on the IntEnum members costs ~10 us per batch
_APPROVE, _REJECT = np.int8(EventKind.APPROVE), np.int8(EventKind.REJECT)


def _frozen(*values) -> np.ndarray:
    out = np.array(values)
    out.flags.writeable = False
    return out


# (approved, probs) of one 0/1 decision: read-only, so every decision can share them
_ONE_DECISION = {False: (_frozen(False), _frozen(0.0)), True: (_frozen(True), _frozen(1.0))}


@dataclass
class Batch(Mapping):
    """What a policy may know about a batch besides the observation matrix: the ``info`` of
    ``policy.decide(obs, info)``. Read it by attribute or by name, as a read-only mapping
    (``info.group``, ``info["group"]``, ``info.get("group_name")``, ``"group" in info``,
    ``list(info)``, ``dict(info)``); an unknown name is a one-line ``UserError`` (also a
    ``KeyError``) naming the known ones.

    ``agent_id``    the applicants' row numbers (one per row of ``obs``)
    ``group``       each applicant's group as an index into ``group_names``
    ``group_name``  each applicant's group by name (``group_names[group]``, computed when read)
    ``group_names`` the scenario's group names, in index order
    ``time``        the simulation clock at this review
    ``episode``     the episode number (from 0)
    ``privileged``  the privileged columns the policy declared (``Policy.privileged``), by name
    """

    agent_id: np.ndarray
    group: np.ndarray
    time: float
    episode: int
    privileged: dict[str, np.ndarray] = field(default_factory=dict)
    group_names: tuple[str, ...] = ()

    KEYS: ClassVar[tuple[str, ...]] = ("agent_id", "group", "group_name", "group_names", "time", "episode",
                                       "privileged")

    @property
    def group_name(self) -> np.ndarray:
        """Each applicant's group name (a string array, one per row)."""
        return np.asarray(self.group_names, dtype=object)[self.group] if self.group_names else \
            np.asarray(self.group).astype(str)

    def __getitem__(self, key: str) -> Any:
        if key not in self.KEYS:
            raise InfoKeyError(f"policy info has no key {key!r}; known keys: {', '.join(self.KEYS)}")
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self.KEYS

    def __iter__(self) -> Iterator[str]:
        return iter(self.KEYS)

    def __len__(self) -> int:
        return len(self.KEYS)


class InfoKeyError(UserError, KeyError):
    """An unknown name read from a policy's ``info`` (a ``UserError``: one line, exit 2)."""

    def __str__(self) -> str:  # KeyError's str() would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass
class DecisionRequest:
    """External mode: one pending decision (the gymnasium adapter answers it)."""

    agent_id: int
    group: int
    obs: np.ndarray
    decided: simpy.Event


PolicyFactory = Callable[[PolicyContext, np.random.Generator], Any]


class Simulation(mesa.Model):
    """A run of one scenario with one policy on one continual trajectory.

    ``world_factory(sim)`` builds the family's world on this simulation (its columns, clock and
    random streams); the policy is ``policy`` or ``policy_factory(world.policy_context(),
    rngs["policy"])``; in ``external`` mode there may be none (the gym adapter decides)."""

    def __init__(self, scenario, world_factory: Callable[["Simulation"], World], policy=None, *,
                 policy_factory: PolicyFactory | None = None, external: bool = False,
                 log_events: bool | None = None, track_applicants: bool = True):
        seeds = np.random.SeedSequence(scenario.seed).spawn(len(STREAMS))
        self.rngs = {name: np.random.default_rng(s) for name, s in zip(STREAMS, seeds)}
        super().__init__(rng=self.rngs["model"])
        self.scenario = scenario
        self.env = simpy.Environment()
        self.episode = 0
        self.external = external
        # False: applicants become Mesa agents only when asked for (``applicant(i)``), not as they
        # apply; Mesa's per-agent registration (~15 us) was a tenth of a gym step
        self.track_applicants = track_applicants
        self.requests_ready: simpy.Event = self.env.event()
        self.pending: DecisionRequest | None = None
        self.episode_rows: list[dict[str, Any]] = []
        self._applicants: dict[int, Applicant] = {}
        self._episode_done: simpy.Event | None = None
        # the application budget of an episode (a runaway arrival process stops with a UserError)
        self._max_applications = scenario.episodes.max_applications
        self._applications = 0  # applications of the current episode

        enabled = scenario.outputs.events if log_events is None else log_events
        self.world: World = world_factory(self)
        # worlds that sample arrivals in blocks commit those up to now before each review
        self._collect_arrivals = self.world.collect_arrivals if isinstance(self.world, BlockArrivals) else None
        self.log = EventLog(enabled=enabled, group_names=list(self.world.group_names), state=scenario.state,
                           family=scenario.family)
        self._group_names = tuple(self.world.group_names)  # the policy's ``info.group_names``
        self._agent_ids = itertools.count(1)  # Mesa's unique_id of this model's agents (see _numbering)
        with self._numbering():
            self.groups = [Group(self, g, name, start, stop) for g, (name, (start, stop))
                           in enumerate(zip(self.world.group_names, self.world.group_slices))]
            self.bank = Bank(self)
        if policy is None and policy_factory is not None:
            policy = policy_factory(self.world.policy_context(), self.rngs["policy"])
        if policy is None and not external:
            raise ValueError("Simulation: a policy (or policy_factory) is needed outside external mode")
        self.policy = policy
        self.running = scenario.episodes.count > 0  # Mesa's flag: False once step() ran the last episode
        if policy is not None:  # train, pretrain or load before the clock starts
            policy.prepare(self)
        self.world.start()
        self.env.process(self._clock())

    # -- time -------------------------------------------------------------------------------
    @property
    def time(self) -> float:
        return self.env.now

    @property
    def horizon(self) -> float:
        return self.scenario.episodes.horizon

    # -- agents -----------------------------------------------------------------------------
    @contextmanager
    def _numbering(self):
        """Mesa 3.3 draws an agent's ``unique_id`` from ``mesa.Agent._ids[model]``, a class-level
        dict that keeps every model it has seen, and so every simulation, alive for the life of
        the process (mesa#3179; Mesa 3.4 numbers agents in ``Model.register_agent`` instead). The
        simulation keeps its own counter and lends it to that dict only while it creates agents:
        ids still run 1, 2, ... per model, and the dict holds no simulation once it is made."""
        mesa.Agent._ids[self] = self._agent_ids
        try:
            yield
        finally:
            mesa.Agent._ids.pop(self, None)

    def applicant(self, agent_id: int) -> Applicant:
        """The Mesa agent for row ``agent_id`` (created on first use)."""
        agent = self._applicants.get(agent_id)
        if agent is None:
            with self._numbering():
                agent = self._applicants[agent_id] = Applicant(self, agent_id)
        return agent

    # -- the bank ---------------------------------------------------------------------------
    def submit(self, agent_id: int) -> None:
        """An application arrives: log it and queue it for the next review."""
        self._applications += 1
        if self._applications > self._max_applications:
            self._over_budget()
        log = self.log
        if log.enabled:
            w = self.world
            g = int(w.cols["group"][agent_id])
            log.add(self.env.now, self.episode, agent_id, g, EventKind.APPLY, w.amount(agent_id), w.wealth_of(agent_id))
        else:  # counted only: skip building the event's fields (the gym adapter's hot path)
            log.skip(1)
        if self.track_applicants:
            self.applicant(agent_id)
        self.bank.queue.append(agent_id)

    def submit_many(self, times: np.ndarray, agent_ids: np.ndarray) -> None:
        """Applications that arrived at ``times`` (sorted, <= now): one columnar log append."""
        self._applications += len(agent_ids)
        if self._applications > self._max_applications:
            self._over_budget()
        w = self.world
        self.log.extend(times, self.episode, agent_ids, w.cols["group"][agent_ids], EventKind.APPLY,
                        w.amount(agent_ids), w.wealth_of(agent_ids))
        ids = agent_ids.tolist()
        if self.track_applicants:
            with self._numbering():
                for i in ids:
                    if i not in self._applicants:
                        self._applicants[i] = Applicant(self, i)
        self.bank.queue.extend(ids)

    def applications_left(self) -> int:
        """How many more applications the current episode may receive (``episodes.max_applications``)."""
        return self._max_applications - self._applications

    def _over_budget(self):
        """The episode received more applications than ``episodes.max_applications``: stop."""
        raise UserError(f"episode {self.episode}: more than episodes.max_applications = {self._max_applications:,} "
                        f"applications; the arrival process runs away: check the arrival parameters (e.g. "
                        f"arrivals.base_intercept, arrivals.excitation), or raise episodes.max_applications "
                        f"if this many are intended")

    def review(self):
        """Decide every queued application (a generator: yields only in external mode)."""
        if self._collect_arrivals is not None:
            self._collect_arrivals()
        queue = self.bank.queue
        if not queue:
            return
        if self.external and len(queue) == 1:  # review: immediate, one decision per request
            yield from self._decide_one(queue.pop())
            return
        idx = np.asarray(queue, dtype=np.int64)
        queue.clear()
        w = self.world
        obs = w.observe(idx)
        groups = w.cols["group"][idx]
        if self.external:
            actions = np.empty(len(idx))
            for k, i in enumerate(idx):
                req = DecisionRequest(int(i), int(groups[k]), obs[k], self.env.event())
                self.pending = req
                ready, self.requests_ready = self.requests_ready, self.env.event()
                ready.succeed(req)
                actions[k] = yield req.decided
                self.pending = None
            probs = np.clip(actions.astype(float), 0.0, 1.0)
            approved = actions >= 0.5 if np.all((actions == 0) | (actions == 1)) else \
                self.rngs["decisions"].random(len(idx)) < probs
            info = Batch(idx, groups, self.env.now, self.episode, group_names=self._group_names)
        else:
            info = Batch(idx, groups, self.env.now, self.episode, w.privileged(idx, self.policy.privileged),
                         self._group_names)
            probs = np.asarray(self.policy.decide(obs, info), dtype=float)
            approved = self.rngs["decisions"].random(len(idx)) < probs
        self._commit(idx, groups, obs, info, probs, approved)

    def _decide_one(self, i: int):
        """External mode, one applicant ``i``: the external branch of ``review`` with Python
        scalars instead of per-batch arrays (same decision, log, policy calls and world update;
        the group array only where the log or a policy reads it)."""
        w, i = self.world, int(i)
        idx = np.array((i,), dtype=np.int64)
        obs = w.observe(idx)
        group = w.cols["group"].item(i)
        groups = w.cols["group"][idx] if self.log.enabled or self.policy is not None else None
        req = DecisionRequest(i, group, obs[0], self.env.event())
        self.pending = req
        ready, self.requests_ready = self.requests_ready, self.env.event()
        ready.succeed(req)
        action = float((yield req.decided))
        self.pending = None
        if action == 0 or action == 1:
            approved, probs = _ONE_DECISION[action >= 0.5]
        else:
            probs = np.array([min(max(action, 0.0), 1.0)])  # np.clip(action, 0, 1), NaN included
            approved = self.rngs["decisions"].random(1) < probs
        # the batch description is for the policy's hook only (the gym adapter has no policy here)
        info = None if self.policy is None else \
            Batch(idx, groups, self.env.now, self.episode, group_names=self._group_names)
        self._commit(idx, groups, obs, info, probs, approved)

    def _commit(self, idx: np.ndarray, groups: np.ndarray, obs: np.ndarray, info: Batch | None, probs: np.ndarray,
                approved: np.ndarray) -> None:
        """A decided batch: its log rows, the policy's ``on_decisions`` hook, the world's update."""
        w, log = self.world, self.log
        if log.enabled:
            kinds = np.where(approved, _APPROVE, _REJECT)
            log.extend(self.env.now, self.episode, idx, groups, kinds, w.amount(idx), w.wealth_of(idx), probs)
        else:  # counted only: skip building the rows' fields (the gym adapter's hot path)
            log.skip(len(idx))
        if self.policy is not None:
            self.policy.on_decisions(obs, info, probs, approved)
        w.apply_decisions(idx, approved, probs, obs)

    def _clock(self):
        """Decision epochs and episode ends, computed from integers so they never drift."""
        ep = self.scenario.episodes
        per = ep.epochs_per_episode if ep.review == "batch" else 1
        for e in itertools.count():
            self.episode = e
            for k in range(1, per + 1):
                target = e * ep.horizon + k * (ep.horizon / per)
                yield self.env.timeout(max(0.0, target - self.env.now))
                if ep.review == "batch":
                    yield from self.review()
            self._end_episode(e)

    def _end_episode(self, e: int) -> None:
        row = {"episode": e, "time": self.env.now}
        row.update(self.world.episode_metrics(e))
        self.episode_rows.append(row)
        stats = self.world.episode_stats()
        if self.policy is not None:
            self.policy.on_episode_end(stats)
        self.world.end_episode(e)
        self.episode = e + 1
        self._applications = 0
        done, self._episode_done = self._episode_done, None
        if done is not None:
            done.succeed(row)

    # -- running ----------------------------------------------------------------------------
    def episode_end_event(self) -> simpy.Event:
        """An event that succeeds, with the metrics row as value, when the current episode ends."""
        if self._episode_done is None:
            self._episode_done = self.env.event()
        return self._episode_done

    def run_episode(self) -> dict[str, Any]:
        """Advance the clock to the end of the current episode; return its metrics row."""
        done = self.episode_end_event()
        self.env.run(until=done)
        return done.value

    def step(self) -> None:
        """Mesa's step: one episode of the clock (nothing once ``episodes.count`` have run)."""
        if not self.running:
            return
        self.run_episode()
        self.running = self.episode < self.scenario.episodes.count

    def run(self, episodes: int | None = None, on_episode: Callable[[dict], None] | None = None) -> list[dict]:
        n = self.scenario.episodes.count if episodes is None else episodes
        for _ in range(n):
            row = self.run_episode()
            if on_episode is not None:
                on_episode(row)
        return self.episode_rows
