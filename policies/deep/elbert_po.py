"""ELBERT-PO (Xu et al., ICML 2024, repo Yuancheng-Xu/ELBERT): PPO with a benefit-rate bias
penalty folded into the advantage.

Per group g two auxiliary reward streams: U_g (lending: an approved applicant of group g who
repays) and B_g (an applicant of group g who would repay, approved or not), so U_g / B_g is the
group's recall (TPR), the "benefit rate". The objective is J - alpha * bias^2 with
bias = max_g z_g - min_g z_g, z_g = U_g / B_g (a soft max/min with beta_smooth for more than
two groups). Its policy gradient is the PPO gradient of the advantage
``A_fair = A - alpha sum_g 2 bias d(bias)/dz_g [A_U,g / B_g - U_g A_B,g / B_g^2]``, where A_U,g
and A_B,g are GAE advantages of the auxiliary streams (their own critic: one tanh layer of
256 with 2G outputs, trained on the auxiliary lambda-returns each update) and each advantage is
standardised first. U_g and B_g are the rollout's stream totals scaled to one training episode
(``benefit_horizon`` decisions, by default the training gym episode), the scale at which
alpha = 2e5 (the reference's lending value) was tuned.

Normalisation (``normalize``). ``rollout`` (the default, unchanged since the first version): A,
A_U and A_B are standardised over the whole rollout, and the learner standardises the fair
advantage again per minibatch (SB3's ``normalize_advantage``). ``minibatch`` (the reference's):
each minibatch standardises A, A_U and A_B over its own samples and uses the fair advantage as
it comes (no second standardisation); U, B and the bias stay the rollout's.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Literal

import numpy as np
import torch
from pydantic import Field

from abm.errors import UserError

from policies.deep.common import DeepLender
from policies.deep.learner import RolloutContext
from policies.deep.ppo import PPOLearner, PPOParams


class ELBERTParams(PPOParams):
    alpha: float = Field(2e5, ge=0, le=1e12, description="Weight of the squared benefit-rate bias (lending: 2e5).")
    beta_smooth: float = Field(20.0, gt=0, le=1e6, description="Soft max/min temperature for more than two groups.")
    benefit_horizon: int | None = Field(None, ge=1, le=10**9,
                                        description="Decisions per episode for U_g, B_g (null: the training episode).")
    aux_learning_rate: float = Field(1e-3, gt=0, le=1.0, description="Adam learning rate of the auxiliary critic.")
    normalize: Literal["rollout", "minibatch"] = Field("rollout", description=(
        "Where the advantages are standardised: rollout (A, A_U, A_B over the rollout, the fair advantage "
        "again per minibatch) or minibatch (the reference: A, A_U, A_B per minibatch, once)."))


def bind_minibatch(learner, transform: Callable[[np.ndarray, np.ndarray], np.ndarray], renormalize: bool) -> None:
    """Route every minibatch of a PPO update through ``transform(rows, advantages)``.

    ``rows`` are the minibatch's positions in the rollout's decision records (step-major, as the
    adjuster saw them: row t * n_envs + k); ``advantages`` the learner's values there.
    ``renormalize`` keeps (True) or turns off (False) the learner's own per-minibatch
    standardisation after the transform. The lean learner takes the hook directly
    (``LeanPPOLearner.minibatch_hook``, already step-major); SB3's buffer flattens env-major
    (index k * n_steps + t), hence the mapping there.
    """
    from policies.deep.lean_ppo import LeanPPOLearner

    if isinstance(learner, LeanPPOLearner):
        learner.minibatch_hook = (transform, renormalize)
        return
    model = getattr(learner, "model", None)
    buf = getattr(model, "rollout_buffer", None)
    if buf is None or not hasattr(buf, "_get_samples"):
        raise UserError("policy.normalize: minibatch needs a PPO learner (backend sb3 or lean)")
    original = buf._get_samples
    steps, envs = buf.buffer_size, buf.n_envs

    def samples(batch_inds, env=None):
        data = original(batch_inds, env)
        flat = np.asarray(batch_inds)
        rows = (flat % steps) * envs + flat // steps
        adv = transform(rows, data.advantages.detach().cpu().numpy().astype(float))
        return data._replace(advantages=torch.as_tensor(np.asarray(adv), dtype=data.advantages.dtype,
                                                        device=data.advantages.device))

    buf._get_samples = samples
    model.normalize_advantage = renormalize


def bias_and_gradient(z: np.ndarray, beta_smooth: float) -> tuple[float, np.ndarray]:
    """bias = max - min of z (soft for > 2 groups) and d(bias)/dz."""
    z = np.asarray(z, dtype=float)
    if len(z) == 2:
        hi, lo = int(np.argmax(z)), int(np.argmin(z))
        grad = np.zeros(2)
        if hi != lo and z[hi] != z[lo]:
            grad[hi], grad[lo] = 1.0, -1.0
        return float(z.max() - z.min()), grad
    up = np.exp(beta_smooth * (z - z.max()))
    down = np.exp(-beta_smooth * (z - z.min()))
    smax = z.max() + np.log(up.sum()) / beta_smooth
    smin = z.min() - np.log(down.sum()) / beta_smooth
    return float(smax - smin), up / up.sum() - down / down.sum()


def standardise(x: np.ndarray) -> np.ndarray:
    sd = x.std(axis=0)
    return np.divide(x - x.mean(axis=0), sd + 1e-8, out=np.zeros_like(x, dtype=float), where=sd > 0)


def fair_advantage(adv: np.ndarray, adv_u: np.ndarray, adv_b: np.ndarray, U: np.ndarray, B: np.ndarray,
                   alpha: float, beta_smooth: float = 20.0) -> np.ndarray:
    """ELBERT's fair advantage for one batch (adv: (n,), adv_u/adv_b: (n, G), U/B: (G,)); the
    three advantages are standardised over the batch first."""
    a, au, ab = standardise(adv), standardise(adv_u), standardise(adv_b)
    B = np.maximum(np.asarray(B, dtype=float), 1e-8)
    z = np.asarray(U, dtype=float) / B
    bias, dz = bias_and_gradient(z, beta_smooth)
    term = au / B - (U / B**2) * ab  # (n, G): d z_g along each sample's score function
    return a - alpha * (2.0 * bias * term * dz).sum(axis=1)


def gae(rewards: np.ndarray, values: np.ndarray, last_value: np.ndarray, dones: np.ndarray,
        gamma: float, lam: float) -> np.ndarray:
    """GAE advantages of (n, K) reward streams; an episode ending after step t cuts the bootstrap."""
    n = len(rewards)
    adv = np.zeros_like(rewards, dtype=float)
    running = np.zeros(rewards.shape[1])
    for t in reversed(range(n)):
        nxt = last_value if t == n - 1 else values[t + 1]
        live = 0.0 if dones[t] else 1.0
        delta = rewards[t] + gamma * nxt * live - values[t]
        running = delta + gamma * lam * live * running
        adv[t] = running
    return adv


class BenefitCritic:
    """The auxiliary critic of the 2G benefit streams and ELBERT's advantage rewrite: ELBERT-PO's
    advantage adjuster."""

    @classmethod
    def for_env(cls, env, p: ELBERTParams, seed: int) -> "BenefitCritic":
        """Built after the learner's networks: its torch layers draw from the generator SB3 seeded."""
        horizon = p.benefit_horizon or int(round(env.scenario.episodes.horizon * env.sim_episodes))
        return cls(env.observation_space.shape[0], env.n_groups, p, horizon, seed)

    def __init__(self, obs_dim: int, n_groups: int, p: ELBERTParams, horizon: int, seed: int):
        gen = torch.Generator().manual_seed(seed)
        self.net = torch.nn.Sequential(torch.nn.Linear(obs_dim, p.hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(p.hidden, 2 * n_groups))
        with torch.no_grad():
            for prm in self.net.parameters():
                prm.copy_(torch.empty_like(prm).uniform_(-0.05, 0.05, generator=gen))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=p.aux_learning_rate)
        self.p, self.G, self.horizon = p, n_groups, horizon
        self.gen = np.random.default_rng(seed)
        self.last_bias = 0.0
        self.stash: tuple | None = None  # normalize: minibatch: the rollout's (A, A_U, A_B, U, B)

    def bind_learner(self, learner) -> None:
        """``normalize: minibatch``: the learner hands each minibatch to ``minibatch``."""
        if self.p.normalize == "minibatch":
            bind_minibatch(learner, self.minibatch, renormalize=False)

    def minibatch(self, rows: np.ndarray, adv: np.ndarray) -> np.ndarray:
        """The reference's fair advantage of one minibatch (standardised over the minibatch, once)."""
        a, au, ab, U, B = self.stash
        return fair_advantage(a[rows], au[rows], ab[rows], U, B, self.p.alpha, self.p.beta_smooth)

    def values(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.net(torch.as_tensor(obs, dtype=torch.float32)).numpy().astype(float)

    def fit(self, obs: np.ndarray, returns: np.ndarray, epochs: int = 5, batch: int = 64) -> None:
        x = torch.as_tensor(obs, dtype=torch.float32)
        y = torch.as_tensor(returns, dtype=torch.float32)
        for _ in range(epochs):
            order = self.gen.permutation(len(x))
            for s in range(0, len(x), batch):
                idx = torch.as_tensor(order[s:s + batch])
                loss = torch.nn.functional.mse_loss(self.net(x[idx]), y[idx])
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()

    def __call__(self, adv: np.ndarray, rec: dict[str, np.ndarray], ctx: RolloutContext) -> np.ndarray:
        G, n = self.G, len(adv)
        onehot = np.eye(G)[rec["group"]]
        good = rec["outcome"].astype(float)[:, None]
        streams = np.hstack([onehot * good * rec["action"][:, None], onehot * good])  # U_g then B_g
        values = self.values(rec["obs"])
        last = self.values(np.asarray(ctx.last_obs, dtype=np.float32))[0]
        aux_adv = gae(streams, values, last, rec["done"], ctx.gamma, ctx.gae_lambda)
        self.fit(rec["obs"], aux_adv + values)
        totals = streams.sum(axis=0) * (self.horizon / n)
        U, B = totals[:G], totals[G:]
        self.last_bias = bias_and_gradient(U / np.maximum(B, 1e-8), self.p.beta_smooth)[0]
        if self.p.normalize == "minibatch":  # rewritten per minibatch by ``minibatch``
            self.stash = (np.asarray(adv, float), aux_adv[:, :G], aux_adv[:, G:], U, B)
            return adv
        return fair_advantage(adv, aux_adv[:, :G], aux_adv[:, G:], U, B, self.p.alpha, self.p.beta_smooth)

    def state(self) -> dict[str, Any]:
        return {"benefit_bias": self.last_bias}


class ELBERTLender(DeepLender):
    """ELBERT-PO: PPO with the benefit-rate (recall) bias penalty in the advantage."""

    name: ClassVar[str] = "elbert_po"
    Params = ELBERTParams
    learner_cls = PPOLearner
    adjuster_cls = BenefitCritic
