"""Any scenario as a ``gymnasium.Env``: one step = one decision of the bank (docs/gym.md).

The engine's *external* mode makes the bank's review process yield one
``DecisionRequest(agent_id, group, obs, decided)`` per applicant and wait on ``decided``.
``reset`` builds a fresh ``Simulation`` and runs its clock to the first request; ``step(a)``
answers the pending request with ``a`` (0 = reject, 1 = approve) and runs the clock to the next
request (or to the end of the gym episode). Nothing about lending lives here: observations,
rewards and true outcomes come from the family's world through these seams (``abm.world``):

* ``world.obs_fields`` names the observation columns; ``ObservationBounds.obs_bounds`` (optional)
  gives ``(low, high)`` arrays for the observation ``Box`` (default: the finite float32 range);
* ``BankReward.bank_reward_total`` (optional, else ``world.profit_total``): the bank's cumulative
  reward; a step's reward is its increase between two consecutive requests, i.e. the reward
  of the decision just taken when decisions resolve at once (``review: immediate``). With
  batch review the outcomes of a whole batch resolve when its last decision is answered, and
  their reward is returned on that step;
* ``TrueOutcomes.true_outcome(idx)`` (optional, else ``not cols["default"]``; ``TrueOutcomeOne``,
  where a world has it, is its scalar form for one applicant): whether each applicant
  would repay / succeed if approved. It is the label: never in the observation, and in
  ``info`` (``outcome``, and ``decided["outcome"]``) only for an env made with
  ``privileged=True`` (fairness constraints on recall, the Bisimulator's probes, tests).

``info``: ``agent_id``, ``group`` (an index into ``env.group_names``), ``time``,
``sim_episode`` of the pending applicant; after a step also ``decided`` (the decision just
taken: ``agent_id``, ``group``, ``action``, ``reward``, ``obs`` and ``next_obs``: the applicant
before and after the decision), and at the end of the gym episode ``episode_metrics`` (the
scenario episode's row) instead of the pending applicant's keys.

A gym episode is ``sim_episodes`` consecutive episodes of the scenario (default 1); it ends
with ``truncated=True`` (a time limit: the simulated world goes on) when their simulated time
is up, so its number of steps is the number of applications in that time, not a constant.
``reset(seed=s)`` runs the scenario with root seed ``s`` (so ``reset(seed=scenario.seed)``
replays ``abm run``'s trajectory); ``reset()`` draws the next seed from the env's generator,
which is seeded by the first seeded reset or, failing that, by the scenario's own seed: an env
is deterministic unless asked otherwise.

Each shipped scenario is registered with gymnasium on import (``abm/LendingCredit-v0`` for
``scenarios/lending-credit.yaml``: ``ENV_IDS``); ``gymnasium.make`` passes its keywords to
``make_env``. Gymnasium 1.x reads no plugin entry points, so ``import abm.gym`` (or
``gymnasium.make("abm.gym:abm/LendingCredit-v0")``) registers them.

Training history: ``env.history`` collects the metrics row of every scenario episode the
adapter's simulations finish (the engine's episode rows, as ``abm run`` writes them), with
``world`` (the adapter's index among the K worlds of a vector env) and ``gym_episode`` (how many
resets came before) added: the learner's training curve, at no cost per step beyond one length
check. The deep lenders save it as ``policy/training.csv``. Adapters made by
``AbmVectorEnv.around`` share sub-env 0's list.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Sequence

from abm import pip_install

try:
    import gymnasium
except ModuleNotFoundError:  # a core install: one line naming the extra (name: abm.plugins' hint)
    raise ModuleNotFoundError(f"abm.gym needs the [rl] extra (gymnasium): {pip_install('rl')}",
                              name="gymnasium") from None
import numpy as np
import simpy
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from abm.build import simulation
from abm.config import MAX_SEED, load_scenario
from abm.data import shipped_scenarios
from abm.errors import InvariantError, UserError
from abm.world import BankReward, ObservationBounds, TrueOutcomeOne, TrueOutcomes

APPROVE, REJECT = 1, 0
NAMESPACE = "abm"
ENTRY_POINT = "abm.gym:make_env"


def env_id(name: str) -> str:
    """The gymnasium id of a scenario named ``name`` (a file stem): ``lending-credit`` ->
    ``abm/LendingCredit-v0``."""
    camel = "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", name) if part)
    return f"{NAMESPACE}/{camel or 'Scenario'}-v0"


def make_env(scenario, *sets: str, overrides: Sequence[str] = (), sim_episodes: int = 1,
             privileged: bool = False, seed: int | None = None, episodes: int | None = None,
             policy: str | None = None, objective: str | None = None) -> "AbmEnv":
    """A gymnasium env for ``scenario`` (a path or a loaded scenario object).

    ``sets`` / ``overrides`` are ``--set``-style strings (``"population.n_groups=10"``),
    positional or as a list (``gymnasium.make`` passes keywords only); ``seed``, ``episodes``,
    ``policy``, ``objective`` are the CLI's shortcuts. ``privileged=True`` adds the true outcome
    to ``info`` (the module docstring). ``env.spec`` remakes the env (``gymnasium.make(env.spec)``).
    """
    sets = (*sets, *([overrides] if isinstance(overrides, str) else overrides))
    if not all(isinstance(s, str) for s in sets):
        raise UserError(f"make_env: overrides are strings like 'episodes.horizon=50', got {list(sets)!r}")
    fields = {k: v for k, v in (("seed", seed), ("episodes", episodes), ("policy", policy),
                                ("objective", objective)) if v is not None}
    source = scenario
    if isinstance(scenario, (str, Path)):
        scenario = load_scenario(scenario, list(sets), **fields)
    elif sets or fields:
        raise UserError("make_env: overrides are only accepted with a scenario path")
    env = AbmEnv(scenario, sim_episodes=sim_episodes, privileged=privileged)
    name = Path(source).stem if isinstance(source, (str, Path)) else scenario.name
    spec_kwargs = {"scenario": str(Path(source).resolve()) if isinstance(source, (str, Path)) else source,
                   "overrides": sets, **fields, "sim_episodes": sim_episodes, "privileged": privileged}
    env.spec = EnvSpec(env_id(name), entry_point=ENTRY_POINT, order_enforce=False, disable_env_checker=True,
                       kwargs=spec_kwargs)
    return env


def _reward_reader(world) -> Callable[[], float]:
    """The bank's cumulative reward so far (the gym reward is its increase per step)."""
    if isinstance(world, BankReward):
        return lambda: float(world.bank_reward_total)
    return lambda: float(world.profit_total)


def _defined_in(cls: type, name: str) -> type | None:
    """The class of ``cls``'s MRO whose body defines ``name``."""
    return next((k for k in cls.__mro__ if name in vars(k)), None)


def _outcome_reader(world) -> Callable[[int], bool]:
    """Whether applicant ``i`` would repay/succeed if approved (privileged): the world's
    ``true_outcome_one(i)`` where it has that scalar form, else ``true_outcome`` of one row."""
    if isinstance(world, TrueOutcomes):
        if isinstance(world, TrueOutcomeOne) and \
                _defined_in(type(world), "true_outcome_one") is _defined_in(type(world), "true_outcome"):
            return world.true_outcome_one  # (not where a subclass redefined true_outcome alone)
        return lambda i: bool(np.asarray(world.true_outcome(np.array([i])), dtype=bool)[0])
    if "default" in world.cols:
        return lambda i: not bool(world.cols["default"][i])
    raise InvariantError(f"family {type(world).__module__!r} exposes no true outcome for the gym adapter")


def _no_outcome(i: int) -> None:
    """The true outcome of an env that was not asked for it (``privileged=False``)."""
    return None


class AbmEnv(gymnasium.Env):
    """The bank's decision problem of one scenario (see the module docstring)."""

    metadata = {"render_modes": []}
    keeps_history = True  # collect the scenario episodes' rows in ``history`` (the module docstring)

    def __init__(self, scenario, *, sim_episodes: int = 1, privileged: bool = False):
        if isinstance(sim_episodes, bool) or not isinstance(sim_episodes, (int, np.integer)) or sim_episodes < 1:
            raise UserError(f"make_env: sim_episodes must be a whole number >= 1, got {sim_episodes!r}")
        if not isinstance(privileged, (bool, np.bool_)):
            raise UserError(f"make_env: privileged must be True or False, got {privileged!r}")
        self.scenario = scenario
        self.sim_episodes = int(sim_episodes)
        self.privileged = bool(privileged)  # the true outcome in info (the module docstring)
        self.history: list[dict[str, Any]] | None = [] if self.keeps_history else None
        self.world_index = 0  # this adapter's index among a vector env's worlds
        self._resets = 0  # seeded or not: the gym episode of the current simulation
        self._rows_seen = 0  # episode rows of the current simulation already in ``history``
        self.sim = None
        self._req = None
        self._pending = None  # the pending request: (agent_id, group, true outcome or None, float32 obs)
        self._one = np.zeros(1, np.int64)  # a reused one-applicant index for the world's seams
        self._start_episode = 0
        self._new_sim(scenario.seed)  # a probe for the spaces; reset() replaces it
        world = self.sim.world
        self.obs_fields = tuple(world.obs_fields)
        self.group_names = tuple(world.group_names)
        self.n_groups = len(self.group_names)
        big = np.finfo(np.float32).max
        low, high = world.obs_bounds if isinstance(world, ObservationBounds) else \
            (np.full(len(self.obs_fields), -big), np.full(len(self.obs_fields), big))
        self.observation_space = spaces.Box(np.asarray(low, np.float32), np.asarray(high, np.float32),
                                            dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._seeded = False
        self._last_obs = np.zeros(len(self.obs_fields), np.float32)

    # -- simulation plumbing ----------------------------------------------------------------
    def _new_sim(self, seed: int) -> None:
        sc = self.scenario.model_copy(update={"seed": int(seed)})
        # no event log and no Mesa agent per applicant: the adapter reads neither (training speed)
        self.sim = simulation(sc, external=True, log_events=False, track_applicants=False)
        self._start_episode = 0
        self._rows_seen = 0
        world = self.sim.world  # its capabilities, asked once per simulation (not per step)
        self._reward_total = _reward_reader(world)
        self._outcome = _outcome_reader(world) if self.privileged else _no_outcome

    def _advance(self) -> bool:
        """Run the clock to the next decision request; False when the gym episode ended first.

        Steps the SimPy clock until the request (or the episode end) has been *processed*: the
        stopping point of ``env.run(until=env.any_of([ready, done]))``, without building a
        Condition, a stop callback and a try block per decision (they were most of a step's
        cost), and without piling one stale Condition per decision onto the episode-end event.
        """
        sim = self.sim
        step = sim.env.step
        while True:
            ready = sim.requests_ready
            done = sim.episode_end_event()
            try:
                while ready.callbacks is not None and done.callbacks is not None:
                    step()
            except simpy.core.EmptySchedule:
                raise RuntimeError("the simulation ran out of events before the next decision") from None
            if len(sim.episode_rows) != self._rows_seen and self.history is not None:
                self._keep_rows()
            if ready.triggered:
                req = self._req = ready.value
                agent_id = int(req.agent_id)
                self._pending = (agent_id, int(req.group), self._outcome(agent_id), self._obs(req.obs))
                return True
            if len(sim.episode_rows) - self._start_episode >= self.sim_episodes:
                self._req = self._pending = None
                return False

    def _keep_rows(self) -> None:
        rows = self.sim.episode_rows
        head = {"world": self.world_index, "gym_episode": self._resets - 1}
        self.history.extend({**head, **row} for row in rows[self._rows_seen:])
        self._rows_seen = len(rows)

    def _obs(self, raw: np.ndarray) -> np.ndarray:
        return raw.astype(np.float32)  # a new array

    def _info(self) -> dict[str, Any]:
        agent_id, group, outcome, _ = self._pending
        info = {"agent_id": agent_id, "group": group, "time": float(self.sim.env.now),
                "sim_episode": int(self.sim.episode)}
        if self.privileged:
            info["outcome"] = outcome
        return info

    # -- gymnasium API ----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is None and not self._seeded:
            seed = self.scenario.seed
        super().reset(seed=seed)
        if seed is not None:
            self._seeded = True
            sim_seed = int(seed)
        else:
            sim_seed = int(self.np_random.integers(0, MAX_SEED))
        self._resets += 1
        self._new_sim(sim_seed)
        if not self._advance():
            raise UserError(f"scenario {self.scenario.name!r}: no application reached the bank in "
                            f"{self.sim_episodes} episode(s); the gym adapter has nothing to decide")
        obs = self._pending[3]
        self._last_obs = obs
        return obs.copy(), self._info()

    def step(self, action):
        a = int(action) if isinstance(action, (int, np.integer)) else int(np.asarray(action).reshape(()))
        if a not in (REJECT, APPROVE):
            raise gymnasium.error.InvalidAction(f"action must be 0 (reject) or 1 (approve), got {action!r}")
        (agent_id, group, outcome, obs_before), reward, alive = self.decide(a)
        # the decided applicant as the agent sees it after the decision resolved (transition
        # data for dynamics models, e.g. the Bisimulator's T_psi(s' | s, a, g))
        decided = {"agent_id": agent_id, "group": group, "action": a, "obs": obs_before.copy(),
                   "next_obs": self.observe_one(agent_id), "reward": float(reward)}
        if self.privileged:
            decided["outcome"] = outcome
        info = self._info() if alive else {"episode_metrics": dict(self.sim.episode_rows[-1])}
        info["decided"] = decided
        return self._last_obs.copy(), float(reward), False, not alive, info

    def decide(self, action: int) -> tuple[tuple[int, int, bool, np.ndarray], float, bool]:
        """``step`` without checking the action and without its info and record dicts (for loops
        that step many adapters, e.g. the Bisimulator's probe rollouts): answers the pending
        request with ``action`` (0 or 1) and runs the clock to the next one. Returns the request
        decided (agent_id, group, true outcome (None unless ``privileged``), observation), the
        reward and whether the gym episode goes on; the next observation is ``_last_obs`` (the
        last one when it ended)."""
        req = self._req
        if req is None:
            raise gymnasium.error.ResetNeeded("step() called before reset() or after the episode ended")
        before = self._reward_total()
        decided = self._pending
        req.decided.succeed(action)
        alive = self._advance()
        reward = self._reward_total() - before
        if alive:
            self._last_obs = self._pending[3]
        return decided, reward, alive

    def observe_one(self, agent_id: int) -> np.ndarray:
        """Applicant ``agent_id`` as the agent sees it now (a new float32 row)."""
        one = self._one
        one[0] = agent_id
        return self._obs(self.sim.world.observe(one)[0])

    def close(self) -> None:
        self.sim = None
        self._req = None


def register_scenarios(folder: Path | None = None) -> dict[str, Path]:
    """Register every scenario file of ``folder`` (default: the shipped ones) with gymnasium as
    ``env_id(stem)``; returns id -> file. No order enforcer, env checker or time limit wrapper:
    the env refuses a step before ``reset`` itself (``ResetNeeded``), passes ``check_env``
    (tests/test_gym.py) and ends its episodes itself, and ``gymnasium.make`` returns the
    ``AbmEnv``, with its ``obs_fields`` and ``group_names`` at hand."""
    folder = shipped_scenarios() if folder is None else Path(folder)
    ids = {env_id(p.stem): p for p in sorted(folder.glob("*.yaml"))} if folder is not None else {}
    for id_, path in ids.items():
        if id_ not in gymnasium.registry:
            gymnasium.register(id_, entry_point=ENTRY_POINT, kwargs={"scenario": str(path)},
                               order_enforce=False, disable_env_checker=True)
    return ids


ENV_IDS = register_scenarios()  # registered id -> shipped scenario file
