"""Lean PPO: our own PPO on K vectorised worlds, CleanRL-style (one file, the maths in order).

The same algorithm as the Stable-Baselines3 learner in ``ppo.py`` (``backend: sb3``), reading the
same ``ppo.PPOParams`` (seed 002 Table 6): separate actor and critic MLPs with one tanh hidden
layer of 256 and SB3's orthogonal initialisation (gains sqrt 2, 0.01 for the policy head, 1 for the
value head); Adam (eps 1e-5) with the learning rate annealed linearly to 0; rollouts of ``n_steps``
decisions; GAE(gamma, lambda); ``n_epochs`` passes of minibatches of ``batch_size`` with
per-minibatch advantage normalisation, the clipped surrogate, the value update clipped around the
rollout's values by the same coefficient (SB3's ``clip_range_vf``), the entropy bonus,
gradient-norm clipping; a truncated episode (the adapter's time limit) bootstraps its last reward
with gamma * V(final observation), as SB3 does. What is ours is the plumbing, and it is why this
learner is fast: one batched forward over the K worlds per step; the 2-action categorical computed
by hand (log-softmax and a uniform draw; no ``torch.distributions`` object and its argument
validation); rollout storage in preallocated arrays; the decision records as column arrays from
``abm.vector.AbmVectorEnv`` (no info dicts copied); and the forward and backward passes of the two
small MLPs written out in numpy on one flat weight vector (``learner.FlatParams``,
``learner.Adam``: torch.optim.Adam's update), because at these sizes torch's per-operation overhead
made one minibatch step cost as much as SB3's whole step. The gradient is checked against torch
autograd on the same loss (tests/test_vector.py).

How n_steps maps to K worlds: ``n_steps`` is the rollout over all K worlds (Table 6's "batch
size 512" stays 512 decisions per update, so updates, minibatches and the learning-rate
schedule are those of K = 1 per decision trained); each world contributes ``n_steps / K``
consecutive steps, so GAE bootstraps every ``n_steps / K`` steps instead of every 512.

Random numbers: ``build`` seeds torch with the run's training seed (the orthogonal
initialisation draws from it); actions and minibatch orders come from
``numpy.random.default_rng(seed)``; world k is reset with seed ``seed + k`` (SB3's convention for
its training env). Torch and numpy's BLAS run on one thread.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import numpy as np

from abm.errors import InvariantError, UserError
from abm.vector import AbmVectorEnv
from policies.deep.learner import (Adam, AdvantageAdjuster, FlatParams, LeanLearner, RolloutContext, StepHook,
                                   blas_single_thread, clip_grad_norm, distinct_ids, vector_records)
from policies.deep.params import PPOParams

RECORD_COLUMNS = ("group", "action", "outcome", "reward", "done", "obs", "next_obs")  # what adjusters read
ADAM_EPS = 1e-5  # Adam's epsilon: SB3's actor-critic default, not a user option


# -- the actor-critic: two one-hidden-layer tanh MLPs, their hidden layers side by side ----------
def actor_critic(obs_dim: int, hidden: int) -> FlatParams:
    """Weights of pi (logits over reject/approve) and V: rows [:hidden] of ``hidden.weight`` are
    the actor's hidden layer, rows [hidden:] the critic's (two separate networks, one matmul).
    Orthogonal initialisation from torch's generator, SB3's gains: sqrt 2, 0.01 (policy head), 1."""
    import torch

    net = FlatParams({"hidden.weight": (2 * hidden, obs_dim), "hidden.bias": (2 * hidden,),
                      "pi.weight": (2, hidden), "pi.bias": (2,), "v.weight": (1, hidden), "v.bias": (1,)})
    for block, gain in ((net["hidden.weight"][:hidden], np.sqrt(2)), (net["hidden.weight"][hidden:], np.sqrt(2)),
                        (net["pi.weight"], 0.01), (net["v.weight"], 1.0)):
        torch.nn.init.orthogonal_(torch.from_numpy(block), gain)  # in place, into the flat vector
    return net


def forward(net: FlatParams, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hidden activations (m, 2h), logits (m, 2) and values V(s) (m,) for observations x (m, d)."""
    h = net["pi.weight"].shape[1]
    act = np.tanh(x @ net["hidden.weight"].T + net["hidden.bias"])
    logits = act[:, :h] @ net["pi.weight"].T + net["pi.bias"]
    values = act[:, h:] @ net["v.weight"][0] + net["v.bias"][0]
    return act, logits, values


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log pi(a | s) for both actions, computed stably (the ufuncs' reductions: what ``max`` and
    ``sum`` call, without their Python wrappers)."""
    z = logits - np.maximum.reduce(logits, axis=1, keepdims=True)
    return z - np.log(np.add.reduce(np.exp(z), axis=1, keepdims=True))


def standardize(x: np.ndarray) -> np.ndarray:
    """``(x - x.mean()) / (x.std(ddof=1) + 1e-8)`` for a 1-d float32 array, the same float32
    operations as numpy's ``_mean`` and ``_var`` (pairwise sums, the same casts; checked bit for
    bit in tests/test_vector.py) without their per-call dispatch, a tenth of a minibatch step."""
    n = x.shape[0]
    total = np.add.reduce(x)
    mean = total.dtype.type(total / n)
    dev = x - np.true_divide(np.add.reduce(x, keepdims=True), n)
    np.multiply(dev, dev, out=dev)
    sq = np.add.reduce(dev)
    sd = sq.dtype.type(np.sqrt(sq.dtype.type(sq / np.int64(n - 1))))
    return (x - mean) / (sd + 1e-8)


def backward(net: FlatParams, x: np.ndarray, act: np.ndarray, d_logits: np.ndarray, d_values: np.ndarray) -> None:
    """d loss / d weights into ``net.grad`` from the loss's gradients at the two heads."""
    h, g = net["pi.weight"].shape[1], net.grads
    g["pi.weight"][...] = d_logits.T @ act[:, :h]
    g["pi.bias"][...] = np.add.reduce(d_logits, axis=0)  # .sum(axis=0) without its wrapper
    g["v.weight"][0] = d_values @ act[:, h:]
    g["v.bias"][0] = np.add.reduce(d_values)
    d_act = np.empty_like(act)
    d_act[:, :h] = d_logits @ net["pi.weight"]
    np.multiply(d_values[:, None], net["v.weight"][0][None, :], out=d_act[:, h:])  # np.outer's product
    d_pre = d_act * (1.0 - act * act)  # tanh'
    g["hidden.weight"][...] = d_pre.T @ x
    g["hidden.bias"][...] = np.add.reduce(d_pre, axis=0)


def ppo_loss(net: FlatParams, p: PPOParams, rows, inverse, mb_actions, mb_logprobs, mb_advantages,
             mb_returns, mb_values, norm_adv: bool = True, value: bool = True) -> float | None:
    """SB3's PPO loss of one minibatch (clipped surrogate + vf_coef * clipped-value MSE - ent_coef *
    entropy) whose i-th observation is ``rows[inverse[i]]``; writes its gradient into
    ``net.grad`` and returns its value (None with ``value=False``: training reads only the
    gradient, and the loss's three means are skipped). ``norm_adv``: standardise the minibatch's
    advantages first (SB3's ``normalize_advantage``; a minibatch hook that standardises on its own
    turns it off). Observations that repeat in the
    minibatch share one forward and one backward pass (their gradients at the heads add up first):
    the same gradient as row by row, for less work where states repeat (a lending market's scores
    and counts)."""
    m, c = len(inverse), p.clip_range
    samples = np.arange(m)
    act, row_logits, row_values = forward(net, rows)
    logits, newvalue = row_logits[inverse], row_values[inverse]
    logp = log_softmax(logits)
    probs = np.exp(logp)
    newlogprob = logp[samples, mb_actions]
    entropy = -np.add.reduce(probs * logp, axis=1)
    ratio = np.exp(newlogprob - mb_logprobs)

    if norm_adv and m > 1:
        mb_advantages = standardize(mb_advantages) if mb_advantages.dtype == np.float32 else \
            (mb_advantages - mb_advantages.mean()) / (mb_advantages.std(ddof=1) + 1e-8)
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * np.clip(ratio, 1 - c, 1 + c)
    v_delta = newvalue - mb_values
    v_clipped = mb_values + np.clip(v_delta, -c, c)
    loss = None
    if value:
        pg_loss = np.maximum(pg_loss1, pg_loss2).mean()
        v_loss = ((mb_returns - v_clipped) ** 2).mean()
        loss = float(pg_loss - p.ent_coef * entropy.mean() + p.vf_coef * v_loss)

    # backward: the surrogate's gradient flows through the unclipped ratio where max() takes it
    # (or the two terms agree, inside the clip range); the value's where it is not clipped
    through = (pg_loss1 > pg_loss2) | ((ratio >= 1 - c) & (ratio <= 1 + c))
    d_newlogprob = np.where(through, -mb_advantages, 0.0).astype(np.float32) * ratio / m
    onehot = np.zeros_like(logp)
    onehot[samples, mb_actions] = 1.0
    d_logits = d_newlogprob[:, None] * (onehot - probs) + (p.ent_coef / m) * probs * (logp + entropy[:, None])
    d_values = (p.vf_coef * 2.0 / m) * (v_clipped - mb_returns) * (np.abs(v_delta) <= c)
    u = len(rows)
    d_row_logits = np.stack([np.bincount(inverse, weights=d_logits[:, 0], minlength=u),
                             np.bincount(inverse, weights=d_logits[:, 1], minlength=u)], axis=1)
    d_row_values = np.bincount(inverse, weights=d_values, minlength=u)
    backward(net, rows, act, d_row_logits.astype(np.float32), d_row_values.astype(np.float32))
    return loss


def distinct_rows(obs: np.ndarray, most: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, inverse)`` with ``obs == rows[inverse]``: the rollout's distinct observations when
    there are at most ``most`` times as many as observations (else the observations themselves)."""
    keys = np.ascontiguousarray(obs).view(np.dtype((np.void, obs.dtype.itemsize * obs.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    if len(first) > most * len(obs):
        return obs, np.arange(len(obs))
    return obs[first], inverse.reshape(-1)


class LeanPPOLearner(LeanLearner):
    """The ``Learner`` interface on lean PPO (``backend: lean`` of every PPO-based lender)."""

    algorithm_name: ClassVar[str] = "ppo"
    on_policy: ClassVar[bool] = True

    def __init__(self, params: PPOParams, seed: int):
        super().__init__(params, seed)
        if params.n_steps % self.n_envs:
            raise UserError(f"policy.n_envs: n_steps ({params.n_steps}) must be a multiple of n_envs "
                            f"({self.n_envs}): each world steps n_steps / n_envs times per rollout")
        self.optimizer: Adam | None = None
        self.rng = np.random.default_rng(self.seed)
        # (transform(rows, advantages) -> advantages, renormalize): every minibatch's advantages go
        # through transform (ELBERT-PO's and A-PPO's ``normalize: minibatch``); rows are the
        # minibatch's positions in the rollout's decision records, step-major (t * K + k), as the
        # advantage adjuster saw them; renormalize keeps the per-minibatch standardisation after it
        self.minibatch_hook: tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], bool] | None = None

    def make_model(self, obs_dim: int) -> FlatParams:
        return actor_critic(obs_dim, self.params.hidden)

    def meta(self) -> dict[str, Any]:
        return {**super().meta(), "hidden": self.params.hidden}

    def act(self, obs: np.ndarray, deterministic: bool, rng: np.random.Generator) -> np.ndarray:
        _, logits, _ = forward(self.model, obs)
        if deterministic:
            return (logits[:, 1] > logits[:, 0]).astype(np.int64)  # argmax; ties -> reject, as SB3
        return (rng.random(len(obs)) < np.exp(log_softmax(logits)[:, 1])).astype(np.int64)

    def approve_prob(self, obs: np.ndarray) -> np.ndarray:
        _, logits, _ = forward(self.model, np.asarray(obs, dtype=np.float32))
        return np.exp(log_softmax(logits)[:, 1]).astype(float)

    # -- training ---------------------------------------------------------------------------
    def learn(self, total_timesteps: int, on_step: StepHook | None = None,
              adjust_advantages: AdvantageAdjuster | None = None) -> None:
        with blas_single_thread():
            self._learn(int(total_timesteps), on_step, adjust_advantages)

    def _learn(self, total_timesteps: int, on_step: StepHook | None, adjust_advantages: AdvantageAdjuster | None):
        p, net, rng = self.params, self.model, self.rng
        envs = self.vector_env()
        K = envs.num_envs
        T, d = p.n_steps // K, self._obs_dim
        if self.optimizer is None:
            self.optimizer = Adam(net.flat, lr=p.learning_rate, eps=ADAM_EPS)
        records_needed = adjust_advantages is not None
        if (on_step is not None or records_needed) and not isinstance(envs.unwrapped, AbmVectorEnv):
            raise InvariantError("lean PPO: decision records (on_step, adjust_advantages) need an abm.vector.AbmVectorEnv")

        if isinstance(envs.unwrapped, AbmVectorEnv):
            envs.unwrapped.records = on_step is not None or records_needed  # decision records only for hooks
        # rollout storage, step-major (T, K) as SB3's buffer
        b_obs = np.zeros((T, K, d), np.float32)
        b_actions = np.zeros((T, K), np.int64)
        b_logprobs = np.zeros((T, K), np.float32)
        b_rewards = np.zeros((T, K), np.float32)
        b_starts = np.zeros((T, K), np.float32)  # 1 where the step's observation begins an episode
        b_values = np.zeros((T, K), np.float32)
        rec: dict[str, np.ndarray] = {}
        if records_needed:
            rec = {"group": np.zeros((T, K), np.int64), "action": b_actions, "outcome": np.zeros((T, K), bool),
                   "reward": np.zeros((T, K)), "done": np.zeros((T, K), bool),
                   "obs": np.zeros((T, K, d), np.float32), "next_obs": np.zeros((T, K, d), np.float32)}

        self._num_timesteps = 0
        next_obs, _ = envs.reset(seed=self.seed)
        next_start = np.ones(K, np.float32)
        envs_idx = np.arange(K)
        while self._num_timesteps < total_timesteps:
            # -- rollout: T steps of the K worlds under the current policy ------------------
            for step in range(T):
                self._num_timesteps += K
                _, logits, value = forward(net, next_obs)
                logp = log_softmax(logits)
                action = (rng.random(K) < np.exp(logp[:, 1])).astype(np.int64)
                b_obs[step] = next_obs
                b_actions[step] = action
                b_logprobs[step] = logp[envs_idx, action]
                b_values[step] = value
                b_starts[step] = next_start
                next_obs, reward, terminated, truncated, infos = envs.step(action)
                done = terminated | truncated
                if on_step is not None:
                    on_step(vector_records(infos))
                if records_needed:
                    for key in ("group", "outcome", "reward", "done", "obs", "next_obs"):
                        rec[key][step] = infos[key]
                # a time limit is not a terminal state: bootstrap with the final observation's value
                cut = truncated & ~terminated
                if cut.any():
                    final = np.asarray(np.stack(infos["final_obs"][cut]), np.float32)
                    reward = np.array(reward, np.float64)
                    reward[cut] += p.gamma * forward(net, final)[2]
                b_rewards[step] = reward
                next_start = done.astype(np.float32)

            # -- GAE(gamma, lambda) -----------------------------------------------------------
            next_value = forward(net, next_obs)[2]
            advantages = np.zeros((T, K), np.float32)
            lastgaelam = np.zeros(K, np.float32)
            for t in reversed(range(T)):
                if t == T - 1:
                    nextnonterminal, nextvalues = 1.0 - next_start, next_value
                else:
                    nextnonterminal, nextvalues = 1.0 - b_starts[t + 1], b_values[t + 1]
                delta = b_rewards[t] + p.gamma * nextvalues * nextnonterminal - b_values[t]
                lastgaelam = delta + p.gamma * p.gae_lambda * nextnonterminal * lastgaelam
                advantages[t] = lastgaelam
            returns = advantages + b_values  # the value target (before any fairness rewrite, as SB3)
            if adjust_advantages is not None:
                flat = {key: rec[key].reshape((T * K,) + rec[key].shape[2:]).copy() for key in RECORD_COLUMNS}
                ctx = RolloutContext(last_obs=next_obs, gamma=p.gamma, gae_lambda=p.gae_lambda, n_envs=K)
                adjusted = adjust_advantages(advantages.reshape(-1).astype(float), flat, ctx)
                advantages = np.asarray(adjusted, dtype=np.float32).reshape(T, K)

            self.update(b_obs.reshape(-1, d), b_actions.reshape(-1), b_logprobs.reshape(-1),
                        advantages.reshape(-1), returns.reshape(-1), b_values.reshape(-1),
                        self.progress_remaining(total_timesteps))

    def update(self, b_obs, b_actions, b_logprobs, b_advantages, b_returns, b_values, progress: float) -> None:
        """n_epochs passes of clipped-surrogate minibatch steps over one rollout."""
        p, net, opt = self.params, self.model, self.optimizer
        opt.lr = p.learning_rate * progress  # linear annealing, set once per update as SB3 does
        rows, b_row = distinct_rows(b_obs)  # b_obs[i] == rows[b_row[i]]
        n = len(b_obs)
        for _ in range(p.n_epochs):
            b_inds = self.rng.permutation(n)
            for start in range(0, n, p.batch_size):
                mb = b_inds[start:start + p.batch_size]
                used, inverse = distinct_ids(b_row[mb], len(rows))
                adv, norm_adv = b_advantages[mb], True
                if self.minibatch_hook is not None:
                    transform, norm_adv = self.minibatch_hook
                    adv = np.asarray(transform(mb, adv.astype(float)), dtype=np.float32)
                ppo_loss(net, p, rows[used], inverse, b_actions[mb], b_logprobs[mb], adv,
                         b_returns[mb], b_values[mb], norm_adv=norm_adv, value=False)
                clip_grad_norm(net.grad, p.max_grad_norm)
                opt.step(net.grad)
