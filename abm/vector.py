"""K worlds of one scenario side by side behind a ``gymnasium.vector.VectorEnv``.

The learners step many simulated worlds at once: one batched observation array in, one action
array out, one batched policy forward per step. There is no second copy of any family's model
here: each sub-env is an ``abm.gym.AbmEnv`` (or a ``gymnasium.Wrapper`` around one, such as
the Bisimulator's reward correction) and is stepped through its own ``step``; this class only
gathers what the sub-envs return into arrays.

* ``reset(seed=s)`` seeds sub-env ``k`` with ``s + k`` (gymnasium's convention; a list of K
  seeds is taken as is). The first ``reset()`` without a seed uses ``scenario.seed + k``, so
  sub-env 0 starts where a lone ``AbmEnv`` starts and K = 1 *is* the single-env adapter.
* Autoreset in the same step (``AutoresetMode.SAME_STEP``, as Stable-Baselines3 does): when a
  sub-env's gym episode ends, the observation returned for it is the first of its next
  episode (``reset()`` without a seed: the sub-env's own seed stream, exactly what a loop
  over a lone adapter does); the last observation of the ended episode is in
  ``infos["final_obs"][k]`` (mask ``infos["_final_obs"]``) and its episode row in
  ``infos["episode_metrics"][k]``.
* No per-step deep copies of info dicts: a step's decision records (the adapter's
  ``info["decided"]``) come back as column arrays, one row per sub-env, in ``infos``:
  ``agent_id``, ``group``, ``action``, ``reward`` (the bank's reward of the step), ``obs`` and
  ``next_obs`` (the decided applicant before and after the decision, shape (K, d)), ``done``,
  ``outcome`` (the true outcome) only where the sub-envs were made with ``privileged=True``,
  and ``correction`` where a wrapper adds one.
  ``records_list(infos)`` turns them back into per-decision dicts for hooks that want them.
  With ``records = False`` (a learner that reads no records) a step returns none of them, and
  bare adapters skip building them (``_step_lean``): the same trajectory, ~6% less work per
  decision (the simulation's own events are the rest).

Sub-envs are stepped in this process, one after another; the speed comes from batching the
learner's work across them (the simulation steps themselves are the same calls as before).
"""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from abm.config import MAX_SEED
from abm.errors import UserError
from abm.gym import AbmEnv

MAX_ENVS = 256  # sub-envs per vector env (each holds a whole simulated population)


def check_n_envs(n_envs: Any, where: str = "n_envs") -> int:
    """``n_envs`` as an int in [1, MAX_ENVS], or a one-line UserError."""
    if isinstance(n_envs, bool) or not isinstance(n_envs, (int, np.integer)) or not 1 <= int(n_envs) <= MAX_ENVS:
        raise UserError(f"{where}: must be a whole number from 1 to {MAX_ENVS}, got {n_envs!r}")
    return int(n_envs)


class AbmVectorEnv(gymnasium.vector.VectorEnv):
    """K sub-envs of one scenario (see the module docstring). Build with ``make_vector_env``
    (K fresh adapters) or ``around`` (an existing training env as sub-env 0)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, envs: Sequence[gymnasium.Env]):
        envs = list(envs)
        check_n_envs(len(envs), "n_envs")
        adapters = [e.unwrapped for e in envs]
        if not all(isinstance(a, AbmEnv) for a in adapters):
            raise UserError("AbmVectorEnv: every sub-env must be an abm.gym.AbmEnv (or a wrapper around one)")
        first = adapters[0]
        if any(a.obs_fields != first.obs_fields or a.n_groups != first.n_groups for a in adapters):
            raise UserError("AbmVectorEnv: sub-envs must share observation fields and groups (one scenario)")
        if any(a.privileged != first.privileged for a in adapters):
            raise UserError("AbmVectorEnv: sub-envs must all be privileged or all not (the outcome column)")
        self.envs = envs
        self.adapters = adapters
        for k, adapter in enumerate(adapters):
            adapter.world_index = k  # the ``world`` column of the training history
        self.num_envs = len(envs)
        self.obs_fields = first.obs_fields
        self.group_names = first.group_names
        self.n_groups = first.n_groups
        self.scenario = first.scenario
        self.sim_episodes = first.sim_episodes
        self.privileged = first.privileged
        self.single_observation_space = envs[0].observation_space
        self.single_action_space = spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.records = True  # return each step's decision records in infos (False: the lean step)
        self._seeded = False
        self._dim = int(np.prod(self.single_observation_space.shape))
        self._obs = np.zeros((self.num_envs, self._dim), np.float32)

    @classmethod
    def around(cls, env: gymnasium.Env, n_envs: int) -> "AbmVectorEnv":
        """``env`` as sub-env 0 plus ``n_envs - 1`` fresh adapters of its scenario.

        Only a bare ``AbmEnv`` can be replicated: a wrapper's state (the Bisimulator's reward
        model) belongs to one env, so a wrapped env runs alone (``n_envs`` must be 1)."""
        n_envs = check_n_envs(n_envs)
        raw = env.unwrapped
        if n_envs > 1 and env is not raw:
            raise UserError(f"n_envs: {type(env).__name__} wraps one training env; it trains with n_envs: 1 "
                            f"(got {n_envs})")
        fresh = [AbmEnv(raw.scenario, sim_episodes=raw.sim_episodes, privileged=raw.privileged)
                 for _ in range(n_envs - 1)]
        for adapter in fresh:  # one training curve: sub-env 0's ``history``
            adapter.history = raw.history
        return cls([env] + fresh)

    # -- gymnasium.vector API ---------------------------------------------------------------
    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None):
        K = self.num_envs
        if seed is None and not self._seeded:
            seed = int(self.scenario.seed)
        if seed is None:
            seeds: list[int | None] = [None] * K
        elif isinstance(seed, (int, np.integer)):
            seeds = [(int(seed) + k) % (MAX_SEED + 1) for k in range(K)]
        else:
            seeds = [None if s is None else int(s) for s in seed]
            if len(seeds) != K:
                raise UserError(f"AbmVectorEnv.reset: {len(seeds)} seeds for {K} sub-envs")
        if seed is not None:
            self._seeded = True
        keys = ("agent_id", "group", "outcome") if self.privileged else ("agent_id", "group")
        infos: dict[str, Any] = {key: np.zeros(K, bool if key == "outcome" else np.int64) for key in keys}
        for k, (env, s) in enumerate(zip(self.envs, seeds)):
            obs, info = env.reset(seed=s, options=options)
            self._obs[k] = obs
            for key in keys:
                infos[key][k] = info[key]
        return self._obs.copy(), infos

    def step(self, actions):
        K = self.num_envs
        actions = np.asarray(actions).reshape(K)
        if not self.records:
            return self._step_lean(actions)
        d = self._dim
        obs_out = np.empty((K, d), np.float32)
        rewards = np.empty(K, np.float64)
        terminations = np.zeros(K, bool)
        truncations = np.zeros(K, bool)
        agent_id = np.empty(K, np.int64)
        group = np.empty(K, np.int64)
        action = np.empty(K, np.int64)
        outcome = np.empty(K, bool)
        dec_reward = np.empty(K, np.float64)
        dec_obs = np.empty((K, d), np.float32)
        next_obs = np.empty((K, d), np.float32)
        correction = None
        final_obs = metrics = None
        for k, env in enumerate(self.envs):
            obs, reward, term, trunc, info = env.step(int(actions[k]))
            dec = info["decided"]
            agent_id[k], group[k], action[k], outcome[k], dec_reward[k] = \
                dec["agent_id"], dec["group"], dec["action"], dec.get("outcome", False), dec["reward"]
            dec_obs[k] = dec["obs"]
            next_obs[k] = dec["next_obs"]
            if "correction" in dec:
                if correction is None:
                    correction = np.zeros(K, np.float64)
                correction[k] = dec["correction"]
            rewards[k] = reward
            if term or trunc:
                terminations[k], truncations[k] = bool(term), bool(trunc)
                if final_obs is None:
                    final_obs = np.zeros((K, d), np.float32)
                    metrics = [None] * K
                final_obs[k] = obs
                metrics[k] = info.get("episode_metrics")
                obs, _ = env.reset()
            obs_out[k] = obs
        done = terminations | truncations
        infos: dict[str, Any] = {"agent_id": agent_id, "group": group, "action": action, "reward": dec_reward,
                                 "obs": dec_obs, "next_obs": next_obs, "done": done}
        if self.privileged:
            infos["outcome"] = outcome
        if correction is not None:
            infos["correction"] = correction
        if final_obs is not None:
            infos["final_obs"], infos["_final_obs"] = final_obs, done.copy()
            infos["episode_metrics"] = tuple(metrics)
        self._obs = obs_out
        return obs_out.copy(), rewards, terminations, truncations, infos

    def _step_lean(self, actions: np.ndarray):
        """``step`` without decision records: bare adapters are advanced by ``AbmEnv.decide``
        (``step`` minus its checks, its info and record dicts and observing the decided
        applicant again; ``World.observe`` is a read, so nothing the simulation draws changes),
        wrapped ones through their ``step``."""
        K, d = self.num_envs, self._dim
        if not ((actions == 0) | (actions == 1)).all():  # np.all's answer without its wrapper
            raise gymnasium.error.InvalidAction(f"actions must be 0 (reject) or 1 (approve), got {actions!r}")
        obs_out = np.empty((K, d), np.float32)
        rewards = np.empty(K, np.float64)
        terminations = np.zeros(K, bool)
        truncations = np.zeros(K, bool)
        final_obs = metrics = None
        for k, env in enumerate(self.envs):
            a = int(actions[k])
            if env is self.adapters[k]:  # a bare AbmEnv
                _, rewards[k], alive = env.decide(a)
                obs, trunc, info = env._last_obs, not alive, None
            else:
                obs, rewards[k], term, trunc, info = env.step(a)
                terminations[k] = bool(term)
                trunc = bool(trunc) or bool(term)
            if trunc:
                truncations[k] = not terminations[k]
                if final_obs is None:
                    final_obs = np.zeros((K, d), np.float32)
                    metrics = [None] * K
                final_obs[k] = obs
                sim = self.adapters[k].sim
                metrics[k] = info.get("episode_metrics") if info is not None else dict(sim.episode_rows[-1])
                obs, _ = env.reset()
            obs_out[k] = obs
        infos: dict[str, Any] = {}
        if final_obs is not None:
            done = terminations | truncations
            infos["final_obs"], infos["_final_obs"] = final_obs, done
            infos["episode_metrics"] = tuple(metrics)
        self._obs = obs_out
        return obs_out.copy(), rewards, terminations, truncations, infos

    @property
    def history(self) -> list[dict[str, Any]]:
        """The scenario-episode rows every sub-env finished (``abm.gym``, "Training history"),
        each list once where sub-envs share one, in the order they were kept per list."""
        seen, rows = set(), []
        for adapter in self.adapters:
            if adapter.history is not None and id(adapter.history) not in seen:
                seen.add(id(adapter.history))
                rows.extend(adapter.history)
        return rows

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()


def make_vector_env(scenario, n_envs: int, *, sim_episodes: int = 1, privileged: bool = False) -> AbmVectorEnv:
    """K fresh adapters of ``scenario`` (a loaded scenario object) side by side."""
    n_envs = check_n_envs(n_envs)
    return AbmVectorEnv([AbmEnv(scenario, sim_episodes=sim_episodes, privileged=privileged)
                         for _ in range(n_envs)])


def records_list(infos: dict[str, Any]) -> list[dict[str, Any]]:
    """One decision record per sub-env (the adapter's ``info["decided"]`` plus ``done``) from a
    step's ``infos``: for hooks written against the single-env records (the Bisimulator)."""
    K = len(infos["group"])
    out = []
    for k in range(K):
        rec = {"agent_id": int(infos["agent_id"][k]), "group": int(infos["group"][k]),
               "action": int(infos["action"][k]), "obs": infos["obs"][k], "next_obs": infos["next_obs"][k],
               "reward": float(infos["reward"][k]), "done": bool(infos["done"][k])}
        if "outcome" in infos:
            rec["outcome"] = bool(infos["outcome"][k])
        if "correction" in infos:
            rec["correction"] = float(infos["correction"][k])
        out.append(rec)
    return out
