"""Lean DQN: our own DQN on K vectorised worlds, CleanRL-style (one file, the maths in order).

The same algorithm as the Stable-Baselines3 learner in ``dqn.py`` (``backend: sb3``), reading the
same ``dqn.DQNParams`` (seed 002 Table 7): a Q-network with one tanh hidden layer of 256 (torch's default ``nn.Linear``
initialisation, as SB3's ``QNetwork``) and a target network copied from it (tau 1) every
``target_update_interval`` decisions; epsilon-greedy from 1 to ``exploration_final_eps`` over
``exploration_fraction`` of training, uniformly random actions for the first ``learning_starts``
decisions; a replay buffer of ``buffer_size`` transitions sampled uniformly with replacement;
every ``train_freq`` decisions ``gradient_steps`` Adam steps (eps 1e-8, learning rate annealed
linearly to 0) on the Huber loss of the one-step TD error against
``r + gamma * max_a Q_target(s', a)`` of minibatches of ``batch_size``, gradients clipped to norm
10 (SB3's default). A time limit is not a terminal state (SB3's ``handle_timeout_termination``):
a truncated transition bootstraps from its final observation.

With K worlds one step of the vector env is K decisions. The schedules count decisions, as
Table 7 does: ``train_freq`` and ``target_update_interval`` are decisions, so K worlds keep one
gradient step per decision (SB3 counts ``train_freq`` in vector steps instead, i.e. K times
fewer gradient steps per decision; its target interval is divided by K, as here). Exploration
draws one epsilon coin per world (SB3 draws one per vector step, for all worlds).

The forward and backward passes of the MLP are written out in numpy on one flat weight vector
(``learner.FlatParams``, ``learner.Adam``), as in ``lean_ppo.py``; the gradient is checked
against torch autograd on the same loss (tests/test_vector.py). Random numbers: ``build`` seeds
torch with the run's training seed (the initialisation draws from it); exploration and replay
sampling come from ``numpy.random.default_rng(seed)``; world k is reset with seed ``seed + k``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from abm.errors import InvariantError
from abm.vector import AbmVectorEnv
from policies.deep.learner import (Adam, AdvantageAdjuster, FlatParams, LeanLearner, StepHook, blas_single_thread,
                                   clip_grad_norm, distinct_ids, vector_records)
from policies.deep.params import DQNParams

# SB3's DQN settings that are not user options
EXPLORATION_INITIAL_EPS = 1.0  # epsilon at the start of training
MAX_GRAD_NORM = 10.0  # gradients are rescaled to at most this global norm (SB3's DQN default)
ADAM_EPS = 1e-8  # Adam's epsilon (torch's default, as SB3's DQN)


# -- the Q-network: one tanh hidden layer ---------------------------------------------------------
def q_network(obs_dim: int, hidden: int) -> FlatParams:
    """Weights of Q(s, .) over reject/approve, initialised as torch's ``nn.Linear`` (uniform in
    +-1/sqrt(fan_in)) from torch's generator."""
    import torch

    net = FlatParams({"hidden.weight": (hidden, obs_dim), "hidden.bias": (hidden,),
                      "q.weight": (2, hidden), "q.bias": (2,)})
    for layer, fan_in in (("hidden", obs_dim), ("q", hidden)):
        torch.nn.init.kaiming_uniform_(torch.from_numpy(net[f"{layer}.weight"]), a=math.sqrt(5))
        bound = 1.0 / math.sqrt(fan_in)
        torch.nn.init.uniform_(torch.from_numpy(net[f"{layer}.bias"]), -bound, bound)
    return net


def forward(net: FlatParams, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hidden activations (m, h) and Q-values (m, 2) for observations x (m, d)."""
    act = np.tanh(x @ net["hidden.weight"].T + net["hidden.bias"])
    return act, act @ net["q.weight"].T + net["q.bias"]


def dqn_loss(net: FlatParams, rows: np.ndarray, inverse: np.ndarray, actions: np.ndarray,
             td_target: np.ndarray, value: bool = True) -> float | None:
    """Huber loss of Q(s_i, a_i) against ``td_target`` for one minibatch whose i-th state is
    ``rows[inverse[i]]``; writes its gradient into ``net.grad`` and returns its value (None with
    ``value=False``: training reads only the gradient).

    States that repeat in a minibatch (scores and counts: a lending market has a few hundred
    distinct observations) share one forward and one backward pass: Q depends on the state
    alone, so their gradients at the Q head add up before the backward pass (the same gradient
    as row by row)."""
    m = len(inverse)
    act, q = forward(net, rows)
    td_error = q[inverse, actions] - td_target

    # backward: d huber / d error is the error clipped to [-1, 1], at Q(s, a) of the taken a only
    d_q = np.bincount(inverse * 2 + actions, weights=np.clip(td_error, -1.0, 1.0) / m,
                      minlength=2 * len(rows)).reshape(len(rows), 2).astype(np.float32)
    g = net.grads
    g["q.weight"][...] = d_q.T @ act
    g["q.bias"][...] = np.add.reduce(d_q, axis=0)  # .sum(axis=0) without its wrapper
    d_pre = (d_q @ net["q.weight"]) * (1.0 - act * act)  # tanh'
    g["hidden.weight"][...] = d_pre.T @ rows
    g["hidden.bias"][...] = np.add.reduce(d_pre, axis=0)
    if not value:
        return None
    huber = np.where(np.abs(td_error) < 1.0, 0.5 * td_error ** 2, np.abs(td_error) - 0.5)
    return float(huber.mean())


def random_actions(rng: np.random.Generator, n: int) -> np.ndarray:
    """``rng.integers(0, 2, n)``; for one world the scalar draw of the same number (the sized
    call alone cost ~14 us a decision, the scalar ~4)."""
    return np.array([rng.integers(0, 2)], np.int64) if n == 1 else rng.integers(0, 2, n)


class ReplayBuffer:
    """The last ``size`` transitions (s, a, r, s', terminated) in circular arrays.

    States are stored as ids into a table of the distinct observation rows seen (while there
    are at most ``max_distinct`` of them; past that, as their own rows), so a minibatch knows
    which of its states repeat and the target network's values can be kept per distinct state
    until the target network changes."""

    def __init__(self, size: int, obs_dim: int, max_distinct: int = 4096):
        self.size, self.pos, self.full = size, 0, False
        self.obs_dim, self.max_distinct = obs_dim, max_distinct
        self.obs = np.zeros((size, obs_dim), np.float32)
        self.next_obs = np.zeros((size, obs_dim), np.float32)
        self.obs_id = np.zeros(size, np.int64)
        self.next_id = np.zeros(size, np.int64)
        self.actions = np.zeros(size, np.int64)
        self.rewards = np.zeros(size, np.float32)
        self.dones = np.zeros(size, np.float32)
        self.ids: dict[bytes, int] | None = {}  # distinct observation row -> id (None: too many)
        self.table = np.zeros((64, obs_dim), np.float32)  # the distinct rows, by id

    def intern(self, row: np.ndarray) -> int:
        """The id of an observation row (-1 once there are too many distinct rows to keep)."""
        if self.ids is None:
            return -1
        key = row.tobytes()
        i = self.ids.get(key)
        if i is None:
            i = len(self.ids)
            if i >= self.max_distinct:
                self.ids = None
                return -1
            if i == len(self.table):
                self.table = np.concatenate([self.table, np.zeros_like(self.table)])
            self.ids[key] = i
            self.table[i] = row
        return i

    @property
    def distinct(self) -> bool:
        """Whether every stored state has an id (the table is still kept)."""
        return self.ids is not None

    def add(self, obs, next_obs, actions, rewards, dones) -> None:
        for k in range(len(actions)):
            i = self.pos
            self.obs[i], self.next_obs[i] = obs[k], next_obs[k]
            self.obs_id[i], self.next_id[i] = self.intern(obs[k]), self.intern(next_obs[k])
            self.actions[i], self.rewards[i], self.dones[i] = actions[k], rewards[k], dones[k]
            self.pos = (i + 1) % self.size
            self.full = self.full or self.pos == 0

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, self.size if self.full else self.pos, batch_size)


class TargetValues:
    """max_a Q_target(s, a) of the distinct states, computed once per target network."""

    def __init__(self):
        self.values = np.zeros(0, np.float32)
        self.known = np.zeros(0, bool)

    def invalidate(self) -> None:
        self.known[:] = False

    def get(self, target: FlatParams, table: np.ndarray, ids: np.ndarray) -> np.ndarray:
        if len(self.values) < len(table):
            grow = len(table) - len(self.values)
            self.values = np.concatenate([self.values, np.zeros(grow, np.float32)])
            self.known = np.concatenate([self.known, np.zeros(grow, bool)])
        need = distinct_ids(ids[~self.known[ids]], len(table))[0]
        if len(need):
            self.values[need] = np.maximum.reduce(forward(target, table[need])[1], axis=1)  # .max(axis=1)
            self.known[need] = True
        return self.values[ids]


class LeanDQNLearner(LeanLearner):
    """The ``Learner`` interface on lean DQN (``backend: lean`` of ``dqn`` and ``bisim_dqn``)."""

    algorithm_name: ClassVar[str] = "dqn"
    on_policy: ClassVar[bool] = False

    def __init__(self, params: DQNParams, seed: int):
        super().__init__(params, seed)
        self.target: FlatParams | None = None
        self.optimizer: Adam | None = None
        self.buffer: ReplayBuffer | None = None
        self.target_values = TargetValues()
        self.epsilon = params.exploration_final_eps  # the exploration rate now (training moves it)
        self.rng = np.random.default_rng(self.seed)

    def make_model(self, obs_dim: int) -> FlatParams:
        return q_network(obs_dim, self.params.hidden)

    def meta(self) -> dict[str, Any]:
        return {**super().meta(), "hidden": self.params.hidden}

    def act(self, obs: np.ndarray, deterministic: bool, rng: np.random.Generator) -> np.ndarray:
        """Greedy actions (ties -> reject, as argmax); not deterministic: epsilon-greedy with the
        current epsilon, as SB3's ``predict``."""
        q = forward(self.model, obs)[1]
        greedy = (q[:, 1] > q[:, 0]).astype(np.int64)
        if deterministic:
            return greedy
        n = len(obs)
        if n == 1:  # one world: the same two draws as scalars
            explore = rng.random() < self.epsilon
            coins = random_actions(rng, 1)
            return coins if explore else greedy
        return np.where(rng.random(n) < self.epsilon, rng.integers(0, 2, n), greedy)

    def approve_prob(self, obs: np.ndarray) -> np.ndarray:
        q = forward(self.model, np.asarray(obs, dtype=np.float32))[1]
        return (q[:, 1] > q[:, 0]).astype(float)

    @property
    def exploration_rate(self) -> float:
        """The current epsilon of the behaviour policy (the ``Learner`` interface)."""
        return float(self.epsilon)

    def epsilon_at(self, total_timesteps: int) -> float:
        """Epsilon, linear in the fraction of training done (SB3's ``get_linear_fn``)."""
        p = self.params
        done = 1.0 - self.progress_remaining(total_timesteps)
        if done > p.exploration_fraction:
            return p.exploration_final_eps
        return EXPLORATION_INITIAL_EPS + done * (p.exploration_final_eps - EXPLORATION_INITIAL_EPS) \
            / p.exploration_fraction

    # -- training ---------------------------------------------------------------------------
    def learn(self, total_timesteps: int, on_step: StepHook | None = None,
              adjust_advantages: AdvantageAdjuster | None = None) -> None:
        if adjust_advantages is not None:
            raise InvariantError("LeanDQNLearner: advantages are adjusted only by on-policy learners")
        with blas_single_thread():
            self._learn(int(total_timesteps), on_step)

    def _learn(self, total_timesteps: int, on_step: StepHook | None) -> None:
        p, net, rng = self.params, self.model, self.rng
        envs = self.vector_env()
        K = envs.num_envs
        if self.optimizer is None:
            self.optimizer = Adam(net.flat, lr=p.learning_rate, eps=ADAM_EPS)
            self.target = FlatParams(net.shapes)
            self.target.copy_from(net)
        if isinstance(envs.unwrapped, AbmVectorEnv):
            envs.unwrapped.records = on_step is not None  # decision records only for a hook
        elif on_step is not None:
            raise InvariantError("lean DQN: decision records (on_step) need an abm.vector.AbmVectorEnv")
        buffer = self.buffer = ReplayBuffer(p.buffer_size, self._obs_dim)
        self.target_values = TargetValues()  # per id of this buffer's table
        target_every = max(p.target_update_interval // K, 1)  # in vector steps

        self._num_timesteps = 0
        obs, _ = envs.reset(seed=self.seed)
        n_calls = pending = 0
        while self._num_timesteps < total_timesteps:
            # -- act: uniformly at random while warming up, then epsilon-greedy per world -------
            self.epsilon = self.epsilon_at(total_timesteps)
            if self._num_timesteps < p.learning_starts:
                actions = random_actions(rng, K)
            else:
                actions = self.act(obs, False, rng)
            next_obs, rewards, terminated, truncated, infos = envs.step(actions)
            self._num_timesteps += K
            if on_step is not None:
                on_step(vector_records(infos))

            # -- store: a truncated world's next state is its final observation, not the reset one
            real_next = next_obs
            done = terminated | truncated
            if done.any():
                real_next = next_obs.copy()
                real_next[done] = np.stack(infos["final_obs"][done])
            buffer.add(obs, real_next, actions, rewards, terminated)
            obs = next_obs

            n_calls += 1
            if n_calls % target_every == 0:
                self.target.flat[...] = p.tau * net.flat + (1.0 - p.tau) * self.target.flat
                self.target_values.invalidate()
            pending += K
            if pending >= p.train_freq:
                updates, pending = divmod(pending, p.train_freq)
                if self._num_timesteps > p.learning_starts:
                    self.train(updates * p.gradient_steps, total_timesteps)

    def train(self, gradient_steps: int, total_timesteps: int) -> None:
        """``gradient_steps`` Adam steps on replay minibatches (learning rate set once per update)."""
        p, net, opt, buf = self.params, self.model, self.optimizer, self.buffer
        opt.lr = p.learning_rate * self.progress_remaining(total_timesteps)
        for _ in range(gradient_steps):
            idx = buf.sample(p.batch_size, self.rng)
            if buf.distinct:  # states by id: repeated ones share a pass, target values are kept
                next_q = self.target_values.get(self.target, buf.table, buf.next_id[idx])
                ids, inverse = distinct_ids(buf.obs_id[idx], len(buf.table))
                rows = buf.table[ids]
            else:
                next_q = forward(self.target, buf.next_obs[idx])[1].max(axis=1)
                rows, inverse = buf.obs[idx], np.arange(len(idx))
            td_target = buf.rewards[idx] + (1.0 - buf.dones[idx]) * p.gamma * next_q
            dqn_loss(net, rows, inverse, buf.actions[idx], td_target, value=False)
            clip_grad_norm(net.grad, MAX_GRAD_NORM)
            opt.step(net.grad)
