"""Bisimulator (seed 002 Algorithm 1): learn a group-conditioned reward correction and the agent's
observation dynamics so that an unconstrained RL agent (PPO or DQN) treats groups alike.

Reward (§4.1, L4-7). ``R = R_orig + alpha R_phi(s, a, g)``; R_phi is a tanh MLP (its last
layer starts at zero, so training starts from the original MDP). J_rew (Eq. 8) is estimated on
the last ``outer_steps`` decisions D with quantile matching (D.1: "the first quartile of group
1 is matched with the first quartile of group 2"): within each pair of groups and each quartile
of the score field (rank-based, ties broken at random) samples are paired at random, and
``J_rew = mean |r_i + alpha R_phi_i - r_j - alpha R_phi_j|`` is minimised with Adam; one of the
M iterations is one pass over the pairs in minibatches of 64. What r_i is (``reward_target``):
``realized``, each decision's own reward (the first version; an L1 loss on random outcomes
cancels the median outcome of a loan, which makes approving worse than rejecting); ``expected``,
R_orig(s, a) of the action taken (Algorithm 1 L5; a regression of the rewards on s and a, group
left out); ``policy``, the state's R^pi(s, g) = sum_a pi(a | s) (R_orig(s, a) + alpha R_phi(s, a,
g)) (Eq. 8), which compares states, not actions.

Observation dynamics (§4.2, L8-13). omega is the family's agent-side lever (lending:
group-specific observed score changes c+/c-; admissions: group-specific manipulation costs),
bounded to [0, omega_scale * true] per sign. Each of the N One-Plus-One (nevergrad) iterations
collects a dataset D with the current policy under a candidate omega (L9), fits the Gaussian
dynamics model T_psi(s' | s, a, g) (an MLP giving mean and log-sd of the decided applicant's
next observation, group column excluded) by maximum likelihood (L10), and scores
``J_dyn = gamma * mean W2`` over quantile-matched pairs with the closed form of Eq. 11 for
diagonal Gaussians (L11). T_psi is never sampled, so the straight-through estimator of D.1 has
no role here. omega only changes what the agent sees (the world's observation seam); the true
dynamics are untouched.

Common random numbers (``PhaseDraws``). All candidates of one phase share every random number:
the probe simulations' seeds, the uniform numbers that turn the policy's P(approve) into actions
(a generator of the phase, never torch's global one), the quantile pairing's tie-breaks and
pair positions, T_psi's warm start and minibatch order. J_dyn of one omega is therefore the same
number whenever it is evaluated in the phase, and two candidates differ only by omega.

Probes (L9: "Collect dataset D of trajectories using pi_theta"). With ``probe_start: live`` (the
default) every probe simulation starts from the training world as it is when the phase runs
(scores, histories, who is still in the pool: the world's ``copy_state_from``), under the
candidate's omega; ``fresh`` starts from a newly generated population instead. The
``dynamics_rollout`` decisions are split over ``probe_envs`` simulations stepped side by side,
so each step is one batched policy forward; each probe is advanced by ``AbmEnv.decide`` (the
adapter's step without its info and record dicts) into preallocated record arrays. What a
candidate costs beyond that is T_psi's refit (``GaussianModel.fit``, hand-fused numpy) and the
probe simulations' own events and construction, the engine's.

Outer loop (L2-17). Every ``outer_steps`` decisions (one PPO rollout, K = 1 update) D is the
rollout just collected; M reward iterations run on it; in the full variant a dynamics phase of
N iterations runs every ``dynamics_every`` outer iterations (Table 8: every iteration; the
cost and the default are in docs/MODEL.md); the new phi and omega shape the rewards and
observations from the next decision on (the policy update at iteration k uses the rollout
collected under phi_{k-1}, omega_{k-1}).
"""

from __future__ import annotations

import gc
import inspect
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, Protocol, runtime_checkable

import gymnasium
import numpy as np
import torch
from pydantic import BaseModel, Field

from abm.errors import UserError
from abm.gym import AbmEnv
from abm.world import Lever, ObservationLever
from policies.deep.common import DeepLender
from policies.deep.dqn import DQNLearner, DQNParams
from policies.deep.learner import Learner, records_arrays
from policies.deep.ppo import PPOLearner, PPOParams

SEED_BOUND = 2**31 - 1


class BisimFields(BaseModel):
    variant: Literal["full", "reward_only"] = Field("full", description="Optimise reward and observation dynamics, or the reward only.")
    reward_iterations: int = Field(1, ge=0, le=1000, description="M: reward optimisation iterations per outer iteration (Table 8).")
    dynamics_iterations: int = Field(300, ge=1, le=100_000, description="N: One-Plus-One iterations per dynamics phase (Table 8).")
    outer_steps: int = Field(512, ge=16, le=10**7, description="Decisions per outer iteration (K = 1 PPO update of 512).")
    dynamics_every: int = Field(10, ge=1, le=10**6, description=(
        "Outer iterations between dynamics phases (the first runs at once; Table 8: 1, measured unaffordable "
        "on two cores, see docs/MODEL.md)."))
    dynamics_rollout: int = Field(256, ge=16, le=10**6, description="Decisions collected per candidate omega.")
    probe_envs: int = Field(8, ge=1, le=1024, description=(
        "Probe simulations stepped side by side per candidate (the rollout is split over them; one batched "
        "policy forward per step)."))
    probe_start: Literal["live", "fresh"] = Field("live", description=(
        "live: probes start from the training world's current state (Algorithm 1 L9); fresh: from a newly "
        "generated population."))
    omega_scale: float = Field(2.0, gt=0, le=100, description="omega is bounded to [0, omega_scale * true value] per sign.")
    reward_lr: float = Field(1e-3, gt=0, le=1, description="Adam learning rate of R_phi.")
    dynamics_lr: float = Field(1e-3, gt=0, le=1, description="Adam learning rate of T_psi.")
    model_hidden: int = Field(64, ge=1, le=4096, description="Hidden width of R_phi and T_psi.")
    quantiles: int = Field(4, ge=1, le=100, description="Quantile bins for matching states across groups (quartiles).")
    quantile_field: str | None = Field(None, description="Observation field ranked for quantile matching (null: the first).")
    reward_target: Literal["realized", "expected", "policy"] = Field("realized", description=(
        "What J_rew compares (docs/MODEL.md): realized, each decision's own reward plus correction (the "
        "first version); expected, R_orig(s, a) (a regression of the rewards on s and a, no group) plus the "
        "correction of the action taken (Algorithm 1 L5); policy, the state's R^pi(s, g) = sum_a pi(a | s) "
        "(R_orig(s, a) + alpha R_phi(s, a, g)) (Eq. 8)."))


class BisimPPOParams(BisimFields, PPOParams):
    reward_alpha: float = Field(5.0, ge=0, le=1e6, description="alpha of R = R_orig + alpha R_phi (Table 8, PPO: 5).")


class BisimDQNParams(BisimFields, DQNParams):
    reward_alpha: float = Field(1.5, ge=0, le=1e6, description="alpha of R = R_orig + alpha R_phi (Table 8, DQN: 1.5).")


# -- omega: the family's agent-side observation lever --------------------------------------------
def observation_lever(world, scale: float) -> Lever:
    """The world's omega (``abm.world.ObservationLever``), bounds ``scale`` times the true values."""
    if not isinstance(world, ObservationLever):
        raise UserError(f"policy.variant: family {type(world).__module__.rsplit('.', 1)[-1]!r} has no agent-side "
                        "observation dynamics to optimise; use variant: reward_only")
    return world.observation_lever(scale)


def with_omega(scenario, spec: Lever, omega: np.ndarray):
    update = {}
    for section, values in spec.fields(omega).items():
        update[section] = getattr(scenario, section).model_copy(update=values)
    return scenario.model_copy(update=update)


def one_plus_one_optimizer(start: np.ndarray, low: np.ndarray, high: np.ndarray, budget: int, seed: int):
    """The dynamics phase's search: nevergrad's OnePlusOne over the box [low, high] from ``start``,
    its Gaussian step a sixth of the box's narrowest side (3 sigma inside the box), its random
    state seeded by ``seed``."""
    import nevergrad as ng  # here, not at the top: a 4 s import, and `abm policies` imports the Bisimulator

    with warnings.catch_warnings():  # nevergrad warns about its default sigma, replaced just below
        warnings.simplefilter("ignore")
        param = ng.p.Array(init=start).set_bounds(low, high)
    param.set_mutation(sigma=float(np.min(high - low)) / 6.0)
    param.random_state = np.random.RandomState(seed)
    return ng.optimizers.OnePlusOne(parametrization=param, budget=budget)


@runtime_checkable
class LiveState(Protocol):
    """A world whose mutable state (scores, histories, pool) can be copied from a live world of
    the same scenario: the probes of a dynamics phase start from the training state."""

    def copy_state_from(self, other) -> None: ...


# -- quantile matching ----------------------------------------------------------------------------
def quantile_pairs(score: np.ndarray, group: np.ndarray, n_groups: int, quantiles: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i, j) across every pair of groups, matched within the same quantile bin.

    Within each group the samples are ranked by ``score`` (ties broken by uniform keys) and cut
    into ``quantiles`` bins of equal count; within a bin, each pair takes one rank of each side
    uniformly at random (as many pairs as the larger side). The draws come from ``rng`` in a
    fixed order and their number depends only on the group counts, so one ``rng`` state pairs the
    same *ranks* whatever the scores (``QuantilePairing``)."""
    tie = rng.random(len(score))
    ranked = []  # per group: its members in rank order, and each rank's bin
    for g in range(n_groups):
        members = np.nonzero(group == g)[0]
        order = members[np.lexsort((tie[members], score[members]))]
        ranked.append((order, (np.arange(len(order)) * quantiles) // max(len(order), 1)))
    left, right = [], []
    for a in range(n_groups):
        for b in range(a + 1, n_groups):
            for q in range(quantiles):
                ia = ranked[a][0][ranked[a][1] == q]
                ib = ranked[b][0][ranked[b][1] == q]
                if len(ia) == 0 or len(ib) == 0:
                    continue
                m = max(len(ia), len(ib))
                left.append(ia[np.minimum((rng.random(m) * len(ia)).astype(np.int64), len(ia) - 1)])
                right.append(ib[np.minimum((rng.random(m) * len(ib)).astype(np.int64), len(ib) - 1)])
    if not left:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(left), np.concatenate(right)


class QuantilePairing:
    """The quantile pairing of one dynamics phase: its random numbers are drawn once (from
    ``seed``) and reused for every candidate, so candidates are paired alike."""

    def __init__(self, seed: int, n_groups: int, quantiles: int):
        self.seed, self.G, self.q = int(seed), n_groups, quantiles

    def __call__(self, score: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return quantile_pairs(score, group, self.G, self.q, np.random.default_rng(self.seed))


@dataclass(frozen=True)
class PhaseDraws:
    """Every random number a dynamics phase shares across its candidates (common random numbers)."""

    probe_seeds: tuple[int, ...]  # one root seed per probe simulation
    warm_seeds: tuple[int, ...]  # the warm start's probes (other seeds: no candidate is favoured)
    action_seed: int  # the uniform numbers that turn P(approve) into actions
    fit_seed: int  # T_psi's minibatch order
    pairing: QuantilePairing

    @classmethod
    def draw(cls, rng: np.random.Generator, n_probes: int, n_groups: int, quantiles: int) -> "PhaseDraws":
        seeds = rng.integers(0, SEED_BOUND, size=2 * n_probes + 3)
        return cls(tuple(int(s) for s in seeds[:n_probes]), tuple(int(s) for s in seeds[n_probes:2 * n_probes]),
                   int(seeds[-3]), int(seeds[-2]), QuantilePairing(int(seeds[-1]), n_groups, quantiles))


def _mlp(n_in: int, hidden: int, n_out: int, zero_last: bool = False) -> torch.nn.Module:
    net = torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, n_out))
    if zero_last:
        torch.nn.init.zeros_(net[2].weight)
        torch.nn.init.zeros_(net[2].bias)
    return net


def _inputs(obs: np.ndarray, action: np.ndarray, group: np.ndarray, n_groups: int) -> torch.Tensor:
    return torch.as_tensor(np.hstack([obs, np.eye(2)[action], np.eye(n_groups)[group]]), dtype=torch.float32)


class GaussianModel:
    """T_psi(s' | s, a, g): one tanh hidden layer giving the mean (a residual on s) and the log-sd
    of a diagonal Gaussian over the next observation, trained by maximum likelihood with Adam.

    Written in numpy (forward, gradient and Adam by hand) because it is tiny and refitted for
    every candidate of every dynamics phase: at this size a torch step is mostly call overhead.
    Initialisation as torch's ``nn.Linear`` (uniform +-1/sqrt(fan_in)), the last layer zero (so
    the first model predicts "nothing changes", log-sd 0); Adam as ``torch.optim.Adam``
    (betas 0.9/0.999, eps 1e-8, bias-corrected); log-sd clamped to [-5, 2] (no gradient outside).
    """

    LOG_SD = (-5.0, 2.0)

    def __init__(self, n_in: int, hidden: int, k: int, lr: float, rng: np.random.Generator):
        bound = 1.0 / math.sqrt(n_in)
        self.params = {"W1": rng.uniform(-bound, bound, (n_in, hidden)), "b1": rng.uniform(-bound, bound, hidden),
                       "W2": np.zeros((hidden, 2 * k)), "b2": np.zeros(2 * k)}
        self.k, self.lr = k, lr
        self.reset_optimizer()

    def reset_optimizer(self) -> None:
        self.m = {n: np.zeros_like(v) for n, v in self.params.items()}
        self.v = {n: np.zeros_like(v) for n, v in self.params.items()}
        self.t = 0

    def state(self) -> dict[str, np.ndarray]:
        return {n: v.copy() for n, v in self.params.items()}

    def load(self, state: dict[str, np.ndarray]) -> None:
        self.params = {n: v.copy() for n, v in state.items()}
        self.reset_optimizer()

    def predict(self, x: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, log_sd) of the next observation for inputs ``x`` and current observation ``base``."""
        p, k = self.params, self.k
        out = np.tanh(x @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
        return base + out[:, :k], np.clip(out[:, k:], *self.LOG_SD)

    def fit(self, x: np.ndarray, base: np.ndarray, target: np.ndarray, orders: list[np.ndarray], batch: int) -> None:
        """One Adam step on the mean negative log-likelihood (constant dropped) of each minibatch
        ``order[s:s + batch]`` of each order in ``orders``, in turn. For a minibatch of n rows:

            h = tanh(x W1 + b1),  out = h W2 + b2,  mean = base + out[:, :k]
            log_sd = clip(out[:, k:], -5, 2),  e = target - mean,  w = exp(-2 log_sd)
            loss = mean over rows of sum(0.5 e^2 w + log_sd)
            d out[:, :k] = -e w / n,  d out[:, k:] = (1 - e^2 w) / n (0 where clipped)
            d h = (d out W2^T) (1 - h^2),  grads: W2 h^T d out, b2 sum d out, W1 x^T d h, b1 sum d h
            Adam (t counts steps): m = 0.9 m + 0.1 g,  v = 0.999 v + 0.001 g^2,
                                   w -= lr / (1 - 0.9^t) m / (sqrt(v) / sqrt(1 - 0.999^t) + 1e-8)

        Fused by hand because the dynamics phase refits T_psi 60 times per candidate: the
        minibatches gathered in one indexing, the weights, gradients and Adam moments as views of
        flat vectors (Adam's update is elementwise: one pass over all four arrays), intermediate
        arrays reused, no loss computed (nobody reads it). Reordering any operation changes the
        floats, and with them the Bisimulator cases of benchmarks/golden.py."""
        if not orders:
            return
        k = self.k
        lo, hi = self.LOG_SD
        names = tuple(self.params)
        shapes = [self.params[name].shape for name in names]
        flat = np.concatenate([self.params[name].ravel() for name in names])
        m = np.concatenate([self.m[name].ravel() for name in names])
        v = np.concatenate([self.v[name].ravel() for name in names])
        grad, tmp, upd = np.empty_like(flat), np.empty_like(flat), np.empty_like(flat)

        def views(vec):
            out, start = {}, 0
            for name, shape in zip(names, shapes):
                size = math.prod(shape)
                out[name] = vec[start:start + size].reshape(shape)
                start += size
            return out

        P, Gr = views(flat), views(grad)
        W1, b1, W2, b2 = P["W1"], P["b1"], P["W2"], P["b2"]
        gW1, gb1, gW2, gb2 = Gr["W1"], Gr["b1"], Gr["W2"], Gr["b2"]
        W2T = W2.T  # a view: follows the updates
        idx = np.concatenate(orders)
        X, BASE, Y = x[idx], base[idx], target[idx]
        lr, t = self.lr, self.t
        row = 0
        for order in orders:
            n_order = len(order)
            for s in range(0, n_order, batch):
                e = min(s + batch, n_order)
                n = e - s
                xb, bb, yb = X[row + s:row + e], BASE[row + s:row + e], Y[row + s:row + e]
                h = xb @ W1
                h += b1
                np.tanh(h, out=h)
                out = h @ W2
                out += b2
                raw = out[:, k:]
                log_sd = np.minimum(np.maximum(raw, lo), hi)  # np.clip's values, without its wrapper
                inside = log_sd == raw  # lo <= raw <= hi (False for NaN, as the comparisons)
                inv_var = np.exp(-2.0 * log_sd)
                err = yb - (bb + out[:, :k])
                d_out = np.empty_like(out)
                np.divide(err * inv_var, -n, out=d_out[:, :k])  # -err * inv_var / n: the same rounding
                sq = err * err  # err**2
                sq *= inv_var
                np.subtract(1.0, sq, out=sq)
                sq /= n
                np.multiply(sq, inside, out=d_out[:, k:])
                d_h = d_out @ W2T
                d_h *= 1.0 - h**2
                np.matmul(h.T, d_out, out=gW2)
                np.sum(d_out, axis=0, out=gb2)
                np.matmul(xb.T, d_h, out=gW1)
                np.sum(d_h, axis=0, out=gb1)
                t += 1
                c1, c2 = 1.0 - 0.9**t, 1.0 - 0.999**t
                m *= 0.9
                np.multiply(0.1, grad, out=tmp)
                m += tmp
                v *= 0.999
                np.multiply(0.001, grad, out=tmp)
                tmp *= grad
                v += tmp
                np.sqrt(v, out=tmp)
                tmp /= math.sqrt(c2)
                tmp += 1e-8
                np.multiply(lr / c1, m, out=upd)
                upd /= tmp
                flat -= upd
            row += n_order
        self.t = t
        self.params, self.m, self.v = P, views(m), views(v)


class Bisimulator:
    """R_phi, T_psi, omega and the two inner optimisations of Algorithm 1."""

    def __init__(self, obs_fields: tuple[str, ...], n_groups: int, p, gamma: float, seed: int):
        torch.manual_seed(seed)
        self.p, self.G, self.gamma = p, n_groups, gamma
        field = p.quantile_field or obs_fields[0]
        if field not in obs_fields:
            raise UserError(f"policy.quantile_field: {field!r} is not an observation field (fields: {', '.join(obs_fields)})")
        self.score_col = obs_fields.index(field)
        self.keep = [k for k, f in enumerate(obs_fields) if f != "group"]  # next-state dims T_psi models
        d = len(obs_fields)
        self.reward_net = _mlp(d + 2 + n_groups, p.model_hidden, 1, zero_last=True)
        self.reward_opt = torch.optim.Adam(self.reward_net.parameters(), lr=p.reward_lr)
        self._mirror_reward()
        self.rng = np.random.default_rng(seed)
        # T_psi's initial weights from a stream of their own: ``rng`` draws the phases' seeds
        self.dynamics = GaussianModel(d + 2 + n_groups, p.model_hidden, len(self.keep), p.dynamics_lr,
                                      np.random.default_rng([seed, 1]))
        self.seed = seed
        # reward_target expected: R_orig(s, a) as a regression on (s without the group, a)
        self.reward_model = GaussianModel(len(self.keep) + 2, p.model_hidden, 1, 1e-2, np.random.default_rng([seed, 2]))
        self.omega: np.ndarray | None = None
        self.last_j_dyn: float | None = None  # J_dyn of the last dynamics phase's best omega
        self.history: list[dict[str, float]] = []

    # -- reward ---------------------------------------------------------------------------
    def _mirror_reward(self) -> None:
        """A numpy copy of R_phi's weights: ``correction`` runs once per training decision, and a
        torch call per decision costs more than the decision."""
        net = self.reward_net
        self._reward_w = tuple(t.detach().numpy().astype(np.float64).copy()
                               for t in (net[0].weight.T, net[0].bias, net[2].weight.T, net[2].bias))

    def correction(self, obs: np.ndarray, action: np.ndarray, group: np.ndarray) -> np.ndarray:
        """alpha * R_phi(s, a, g) for a batch."""
        W1, b1, W2, b2 = self._reward_w
        x = np.hstack([np.asarray(obs, float), np.eye(2)[action], np.eye(self.G)[group]])
        return self.p.reward_alpha * (np.tanh(x @ W1 + b1) @ W2 + b2)[:, 0]

    def _reward_inputs(self, data) -> np.ndarray:
        return np.hstack([data["obs"][:, self.keep], np.eye(2)[data["action"]]]).astype(float)

    def r_orig(self, data) -> np.ndarray:
        """The fitted R_orig(s, a) of each sample for both actions, shape (n, 2) (reject, approve)."""
        n = len(data["action"])
        zero = np.zeros((n, 1))
        out = [self.reward_model.predict(self._reward_inputs({**data, "action": np.full(n, a, np.int64)}), zero)[0][:, 0]
               for a in (0, 1)]
        return np.column_stack(out)

    def expected_reward(self, data, epochs: int = 5, batch: int = 64) -> np.ndarray:
        """R_orig(s, a) of each decision (``reward_target: expected``): the regression of realized
        rewards on (s, a) (group column left out: R_orig "is often not conditioned on the group
        membership", §4.1), refitted on ``data`` by maximum likelihood (its mean is the least-squares
        fit) from the previous fit, then evaluated on ``data``."""
        x = self._reward_inputs(data)
        target = np.asarray(data["reward"], float)[:, None]
        zero = np.zeros_like(target)
        self.reward_model.fit(x, zero, target, [self.rng.permutation(len(x)) for _ in range(epochs)], batch)
        return self.reward_model.predict(x, zero)[0][:, 0]

    def _pairs(self, data):
        return quantile_pairs(data["obs"][:, self.score_col], data["group"], self.G, self.p.quantiles, self.rng)

    def _state_rewards_np(self, data) -> np.ndarray:
        """Each sample's corrected reward: r + alpha R_phi(s, a, g) of its own action, or with
        ``data["pi"]`` (``reward_target: policy``) the state's R^pi(s, g) = sum_a pi(a | s)
        (R_orig(s, a) + alpha R_phi(s, a, g)), R_orig from ``data["r_orig"]`` (n, 2)."""
        if "pi" not in data:
            return data["reward"] + self.correction(data["obs"], data["action"], data["group"])
        n = len(data["pi"])
        c0 = self.correction(data["obs"], np.zeros(n, np.int64), data["group"])
        c1 = self.correction(data["obs"], np.ones(n, np.int64), data["group"])
        pi, r = data["pi"], data["r_orig"]
        return (1 - pi) * (r[:, 0] + c0) + pi * (r[:, 1] + c1)

    def j_rew(self, data, pairs=None) -> float:
        i, j = self._pairs(data) if pairs is None else pairs
        if len(i) == 0:
            return 0.0
        r = self._state_rewards_np(data)
        return float(np.mean(np.abs(r[i] - r[j])))

    def reward_iteration(self, data, pairs=None, batch: int = 64) -> None:
        """One pass of Adam over the quantile-matched pairs of ``data`` (L5-6)."""
        i, j = self._pairs(data) if pairs is None else pairs
        if len(i) == 0:
            return
        alpha = self.p.reward_alpha
        if "pi" in data:  # R^pi(s, g): both actions, weighted by the policy
            n = len(data["pi"])
            x0 = _inputs(data["obs"], np.zeros(n, np.int64), data["group"], self.G)
            x1 = _inputs(data["obs"], np.ones(n, np.int64), data["group"], self.G)
            pi = torch.as_tensor(data["pi"], dtype=torch.float32)
            r = torch.as_tensor(data["r_orig"], dtype=torch.float32)

            def value(b):
                return (1 - pi[b]) * (r[b, 0] + alpha * self.reward_net(x0[b]).squeeze(-1)) + \
                    pi[b] * (r[b, 1] + alpha * self.reward_net(x1[b]).squeeze(-1))
        else:
            x = _inputs(data["obs"], data["action"], data["group"], self.G)
            r = torch.as_tensor(data["reward"], dtype=torch.float32)

            def value(b):
                return r[b] + alpha * self.reward_net(x[b]).squeeze(-1)
        order = self.rng.permutation(len(i))
        for s in range(0, len(order), batch):
            k = order[s:s + batch]
            loss = (value(torch.as_tensor(i[k])) - value(torch.as_tensor(j[k]))).abs().mean()
            self.reward_opt.zero_grad()
            loss.backward()
            self.reward_opt.step()
        self._mirror_reward()

    # -- dynamics -------------------------------------------------------------------------
    def _model_inputs(self, data) -> tuple[np.ndarray, np.ndarray]:
        x = np.hstack([data["obs"], np.eye(2)[data["action"]], np.eye(self.G)[data["group"]]]).astype(float)
        return x, data["obs"][:, self.keep].astype(float)

    def _gaussian(self, data) -> tuple[np.ndarray, np.ndarray]:
        """T_psi's (mean, log_sd) of every decision's next observation."""
        return self.dynamics.predict(*self._model_inputs(data))

    def fit_dynamics(self, data, epochs: int = 5, batch: int = 64, rng: np.random.Generator | None = None) -> None:
        """Maximum likelihood of the decided applicants' next observations (L10)."""
        x, base = self._model_inputs(data)
        target = data["next_obs"][:, self.keep].astype(float)
        n = len(target)
        rng = self.rng if rng is None else rng
        # one Adam step per minibatch of each epoch's permutation
        self.dynamics.fit(x, base, target, [rng.permutation(n) for _ in range(epochs)], batch)

    def j_dyn(self, data, pairing: Callable[[np.ndarray, np.ndarray], tuple] | None = None) -> float:
        """gamma * mean W2 between the model's next-state Gaussians of matched pairs (L11, Eq. 11);
        ``pairing(score, group)`` is the phase's fixed pairing (None: drawn from the own stream)."""
        i, j = self._pairs(data) if pairing is None else pairing(data["obs"][:, self.score_col], data["group"])
        if len(i) == 0:
            return 0.0
        mean, log_sd = self._gaussian(data)
        sd = np.exp(log_sd)
        w2 = ((mean[i] - mean[j]) ** 2).sum(1) + ((sd[i] - sd[j]) ** 2).sum(1)
        return float(self.gamma * np.sqrt(w2).mean())

    def evaluate(self, omega: np.ndarray, collect: Callable[[np.ndarray, "PhaseDraws", bool], dict],
                 draws: "PhaseDraws", snapshot: dict, fit_epochs: int) -> float:
        """J_dyn of one candidate: its dataset (the phase's seeds), T_psi refitted from the phase's
        warm start with the phase's minibatch order, the phase's pairing. Deterministic given
        ``draws`` and ``snapshot``."""
        data = collect(omega, draws, False)
        self.dynamics.load(snapshot)
        self.fit_dynamics(data, epochs=fit_epochs, rng=np.random.default_rng(draws.fit_seed))
        return self.j_dyn(data, draws.pairing)

    def dynamics_phase(self, collect: Callable[[np.ndarray, "PhaseDraws", bool], dict], spec: Lever,
                       fit_epochs: int = 15, n_probes: int = 1) -> np.ndarray:
        """N One-Plus-One iterations over omega (L8-13); returns the best omega seen.

        ``collect(omega, draws, warm)`` returns a dataset of the current policy under ``omega``
        from the phase's probe seeds (``warm``: its warm-start seeds). Every candidate shares the
        phase's draws (``PhaseDraws``) and T_psi's warm start (fitted on a dataset of the
        warm-start seeds, so no candidate is favoured): their J_dyn differ by omega alone.
        """
        if len(inspect.signature(collect).parameters) == 2:  # an older collect(omega, seed): one seed per phase
            legacy = collect

            def collect(omega, draws, warm):
                return legacy(omega, draws.probe_seeds[0] + int(warm))
        start = np.clip(spec.init if self.omega is None else self.omega, spec.low, spec.high)
        phase_seed, search_seed = (int(x) for x in self.rng.integers(SEED_BOUND, size=2))
        draws = PhaseDraws.draw(np.random.default_rng(phase_seed), n_probes, self.G, self.p.quantiles)
        self.fit_dynamics(collect(start, draws, True), epochs=fit_epochs, rng=np.random.default_rng(draws.fit_seed))
        opt = one_plus_one_optimizer(start, spec.low, spec.high, self.p.dynamics_iterations, search_seed)
        # every candidate's T_psi starts from the same warm-started weights, so J_dyn compares
        # omegas rather than how long the model has been training
        snapshot = self.dynamics.state()

        # the objects alive now (the training world, the learner, torch and nevergrad) out of the
        # cyclic garbage collector's scans while the candidates' probe simulations come and go:
        # its collections were a sixth of the phase; nothing computed depends on them
        freeze = gc.get_freeze_count() == 0  # not if the application froze objects of its own
        if freeze:
            gc.freeze()
        best, best_loss = start, np.inf
        try:
            for _ in range(self.p.dynamics_iterations):
                cand = opt.ask()
                omega = np.asarray(cand.value, dtype=float)
                loss = self.evaluate(omega, collect, draws, snapshot, fit_epochs)
                opt.tell(cand, loss)
                if loss < best_loss:
                    best, best_loss = omega, loss
        finally:
            if freeze:
                gc.unfreeze()
        self.dynamics.load(snapshot)  # the next phase warm-starts from this phase's warm start
        self.omega = best
        self.last_j_dyn = float(best_loss)
        return self.omega


# -- probe rollouts -------------------------------------------------------------------------------
class ProbeEnv(AbmEnv):
    """The adapter of a probe simulation: with ``source`` set, every new simulation takes over
    the source world's state (scores, histories, pool) before its clock starts."""

    source = None  # the live training world, or None (a freshly generated population)
    keeps_history = False  # probe simulations are no part of the training curve

    def _new_sim(self, seed: int) -> None:
        super()._new_sim(seed)
        if self.source is not None:
            self.sim.world.copy_state_from(self.source)


def behaviour_probs(learner: Learner, obs: np.ndarray) -> np.ndarray:
    """P(approve) of the learner's behaviour policy per observation row: PPO's pi(approve | s);
    DQN's epsilon-greedy (greedy w.p. 1 - eps, uniform w.p. eps), eps its current exploration rate."""
    with torch.no_grad():
        p = np.asarray(learner.approve_prob(np.asarray(obs, dtype=np.float32)), dtype=float)
    eps = float(learner.exploration_rate)  # the Learner protocol's: 0 for PPO
    return (1.0 - eps) * p + 0.5 * eps


# -- the Bisimulator as a component of a DeepLender ------------------------------------------------
class CorrectedReward(gymnasium.Wrapper):
    """Adds alpha R_phi(s, a, g) of the decision just taken to the env's reward."""

    def __init__(self, env, bisim: Bisimulator):
        super().__init__(env)
        self.bisim = bisim

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        d = info["decided"]
        c = float(self.bisim.correction(d["obs"][None], np.array([d["action"]]), np.array([d["group"]]))[0])
        d["correction"] = c
        return obs, reward + c, terminated, truncated, info


class BisimTrainer:
    """Algorithm 1's outer loop around a learner (PPO or DQN).

    ``attach(env)`` builds the Bisimulator for the training env and returns the env with the
    corrected reward; the learner trains on it and hands every step's decision records to
    ``on_step``; every ``outer_steps`` decisions an outer iteration runs on the records just
    collected (the reward phase, and in the full variant every ``dynamics_every`` iterations the
    dynamics phase, whose probe rollouts ask the learner for P(approve) and start from the
    training world's current state). The learned omega is applied to the training world at
    once, and to the evaluation world by ``configure_world``.
    """

    def __init__(self, params, seed: int, learner: Learner):
        self.p = params
        self.seed = seed
        self.learner = learner
        self.bisim: Bisimulator | None = None  # built by attach() (training only, not when loading)
        self.spec: Lever | None = None  # the full variant's omega: start, bounds, scenario fields
        self.raw_env: AbmEnv | None = None  # the training adapter under the reward wrapper
        self.probe_envs: list[ProbeEnv] = []  # the probe simulations' adapters, made on the first phase
        self.loaded_omega: np.ndarray | None = None  # omega of a loaded model (config.json)
        self.records: list[dict[str, Any]] = []  # decisions of the current outer iteration
        self.iteration = 0

    def attach(self, env: AbmEnv) -> CorrectedReward:
        p = self.p
        self.raw_env = env
        self.bisim = Bisimulator(env.obs_fields, env.n_groups, p, p.gamma, self.seed)
        if p.variant == "full":
            self.spec = observation_lever(env.sim.world, p.omega_scale)
        return CorrectedReward(env, self.bisim)

    def on_step(self, records: list[dict[str, Any]]) -> None:
        self.records.extend(records)
        if len(self.records) >= self.p.outer_steps:
            self.outer_iteration(self.iteration, records_arrays(self.records))
            self.records = []
            self.iteration += 1

    def _probes(self, n: int) -> list[ProbeEnv]:
        while len(self.probe_envs) < n:
            # privileged: the probe records' ``outcome`` column (the records of a phase)
            self.probe_envs.append(ProbeEnv(self.raw_env.scenario, sim_episodes=10**6, privileged=True))
        return self.probe_envs[:n]

    def live_world(self):
        """The training world the probes start from (None: start from a fresh population)."""
        world = None if self.raw_env is None or self.raw_env.sim is None else self.raw_env.sim.world
        return world if self.p.probe_start == "live" and isinstance(world, LiveState) else None

    def rollout(self, omega: np.ndarray, steps: int, seeds: tuple[int, ...], action_seed: int) -> dict[str, np.ndarray]:
        """``steps`` decisions (split over ``len(seeds)`` probe simulations stepped side by side,
        rounded up to a whole number per simulation) by the current policy with the agent seeing
        ``omega``. Simulation b runs with root seed ``seeds[b]``; actions are ``u < P(approve)``
        with ``u`` from a generator seeded by ``action_seed``: the same seeds give the same
        numbers to every candidate. A probe that runs out of decisions (admissions: pool empty)
        or time restarts from the same start state with the next seed of its own stream."""
        envs = self._probes(len(seeds))
        scenario = with_omega(self.raw_env.scenario, self.spec, omega)
        source = self.live_world()
        per_env = math.ceil(steps / len(envs))
        # a probe simulation long enough for its decisions (one application per unit of time),
        # so one whose world has nobody left to decide ends soon instead of idling for ages
        probe_episodes = max(1, math.ceil((per_env + 1) / float(scenario.episodes.horizon)))
        u = np.random.default_rng(action_seed).random((per_env, len(envs)))
        obs = np.empty((len(envs), len(self.raw_env.obs_fields)), np.float32)
        restart = [np.random.default_rng(s) for s in seeds]
        for b, (env, seed) in enumerate(zip(envs, seeds)):
            env.scenario, env.source, env.sim_episodes = scenario, source, probe_episodes
            obs[b] = self._reset(env, seed, restart[b])
        # the records, step-major (row t * len(envs) + b), preallocated: no dict per decision
        shape = (per_env, len(envs))
        group, action = np.empty(shape, np.int64), np.empty(shape, np.int64)
        outcome, reward, done = np.empty(shape, bool), np.empty(shape, float), np.empty(shape, bool)
        rec_obs, rec_next = np.empty(shape + obs.shape[1:], np.float32), np.empty(shape + obs.shape[1:], np.float32)
        learner = self.learner
        eps = float(learner.exploration_rate)  # behaviour_probs' epsilon: constant while the policy does not learn
        with torch.no_grad():  # once, not per step (behaviour_probs enters it per call)
            for t in range(per_env):
                p = np.asarray(learner.approve_prob(obs), dtype=float)  # obs: float32 already
                act = action[t]
                np.less(u[t], (1.0 - eps) * p + 0.5 * eps, out=act, casting="unsafe")  # behaviour_probs
                obs_t, next_t = rec_obs[t], rec_next[t]
                for b, env in enumerate(envs):
                    (agent_id, group[t, b], outcome[t, b], obs_t[b]), reward[t, b], alive = env.decide(int(act[b]))
                    next_t[b] = env.observe_one(agent_id)
                    done[t, b] = not alive
                    obs[b] = env._last_obs if alive else \
                        self._reset(env, int(restart[b].integers(SEED_BOUND)), restart[b])
        for env in envs:
            env.source = None  # no reference to the training world between phases
        n, d = per_env * len(envs), obs.shape[1]
        return {"group": group.reshape(n), "action": action.reshape(n), "outcome": outcome.reshape(n),
                "reward": reward.reshape(n), "done": done.reshape(n), "obs": rec_obs.reshape(n, d),
                "next_obs": rec_next.reshape(n, d)}

    @staticmethod
    def _reset(env: ProbeEnv, seed: int, stream: np.random.Generator) -> np.ndarray:
        for _ in range(100):
            try:
                return env.reset(seed=seed)[0]
            except UserError:  # nobody left to decide (an empty admissions pool): a fresh population
                env.source, seed = None, int(stream.integers(SEED_BOUND))
        raise UserError("Bisimulator: the probe simulations reach no decision")

    def collect(self, omega: np.ndarray, steps: int, seed: int) -> dict[str, np.ndarray]:
        """A dataset of ``steps`` decisions by the current policy seeing ``omega``, every random
        number derived from ``seed`` (for tests and notebooks; a phase uses ``PhaseDraws``)."""
        ss = np.random.default_rng(seed).integers(0, SEED_BOUND, size=self.p.probe_envs + 1)
        return self.rollout(omega, steps, tuple(int(s) for s in ss[:-1]), int(ss[-1]))

    def phase_collect(self, omega: np.ndarray, draws: PhaseDraws, warm: bool) -> dict[str, np.ndarray]:
        seeds = draws.warm_seeds if warm else draws.probe_seeds
        return self.rollout(omega, self.p.dynamics_rollout, seeds, draws.action_seed + int(warm))

    def j_dyn_repeats(self, omegas, repeats: int, seed: int = 0, fit_epochs: int = 15) -> np.ndarray:
        """J_dyn of each of ``omegas`` in ``repeats`` independent dynamics phases (each with its own
        ``PhaseDraws`` from ``seed``, warm-started from the current T_psi at the current omega), as
        a (repeats, len(omegas)) array: the search's signal (differences within a row) against its
        noise (spread down a column). docs/MODEL.md reports it; nothing in training calls it."""
        bisim, spec = self.bisim, self.spec
        rng = np.random.default_rng(seed)
        start_state = bisim.dynamics.state()
        start = np.clip(spec.init if bisim.omega is None else bisim.omega, spec.low, spec.high)
        out = np.zeros((repeats, len(omegas)))
        for r in range(repeats):
            draws = PhaseDraws.draw(rng, self.p.probe_envs, bisim.G, self.p.quantiles)
            bisim.dynamics.load(start_state)
            bisim.fit_dynamics(self.phase_collect(start, draws, True), epochs=fit_epochs,
                               rng=np.random.default_rng(draws.fit_seed))
            snapshot = bisim.dynamics.state()
            for c, omega in enumerate(omegas):
                out[r, c] = bisim.evaluate(np.asarray(omega, float), self.phase_collect, draws, snapshot, fit_epochs)
        bisim.dynamics.load(start_state)
        return out

    def outer_iteration(self, k: int, data: dict[str, np.ndarray]) -> None:
        p, bisim = self.p, self.bisim
        if p.reward_target == "expected":  # J_rew on R_orig(s, a), not on each outcome's own reward
            data = {**data, "reward": bisim.expected_reward(data)}
        elif p.reward_target == "policy":  # on R^pi(s, g) = sum_a pi(a | s) R(s, a, g) (Eq. 8)
            bisim.expected_reward(data)
            data = {**data, "pi": behaviour_probs(self.learner, data["obs"]), "r_orig": bisim.r_orig(data)}
        pairs = bisim._pairs(data)
        before = bisim.j_rew(data, pairs)
        for _ in range(p.reward_iterations):
            bisim.reward_iteration(data, pairs)
        row = {"iteration": k, "j_rew_before": before, "j_rew_after": bisim.j_rew(data, pairs)}
        if p.variant == "full" and k % p.dynamics_every == 0:
            omega = bisim.dynamics_phase(self.phase_collect, self.spec, n_probes=p.probe_envs)
            observation_lever(self.raw_env.sim.world, p.omega_scale).apply(omega)  # live, for the rest of this episode
            self.raw_env.scenario = with_omega(self.raw_env.scenario, self.spec, omega)  # and later ones
            row["omega"] = omega.tolist()
            row["j_dyn"] = bisim.last_j_dyn
        bisim.history.append(row)

    def configure_world(self, world) -> None:
        """The evaluation run's agent sees the world through the learned (or loaded) omega."""
        omega = self.loaded_omega if self.bisim is None else self.bisim.omega  # omega: full variant only
        if omega is not None:
            observation_lever(world, self.p.omega_scale).apply(omega)

    def state(self) -> dict[str, Any]:
        if self.bisim is None:
            return {}
        last = self.bisim.history[-1] if self.bisim.history else {}
        return {"omega": None if self.bisim.omega is None else self.bisim.omega.tolist(),
                "j_rew": last.get("j_rew_after"), "outer_iterations": len(self.bisim.history)}

    def history_rows(self) -> list[dict[str, Any]]:
        """One row per outer iteration of training (``policy/bisimulator.csv``): the decisions
        trained on so far, J_rew before and after the reward step and, after a dynamics phase,
        J_dyn of the chosen omega and omega itself, one column per scenario field and group
        (e.g. ``score_change_repay_G2``). Empty for a loaded model."""
        if self.bisim is None:
            return []
        names = None
        rows = []
        for row in self.bisim.history:
            out = {"iteration": row["iteration"], "decisions": (row["iteration"] + 1) * self.p.outer_steps,
                   "j_rew_before": row["j_rew_before"], "j_rew_after": row["j_rew_after"]}
            if "omega" in row:
                omega = np.asarray(row["omega"], dtype=float)
                if names is None:
                    names = self._omega_names(omega)
                out["j_dyn"] = row["j_dyn"]
                out.update(zip(names, omega.tolist()))
            rows.append(out)
        return rows

    def _omega_names(self, omega: np.ndarray) -> list[str]:
        """A column name per entry of omega: the scenario field it sets and the group's name."""
        groups = list(self.raw_env.group_names)
        names = []
        for section in self.spec.fields(omega).values():
            for field, values in section.items():
                names += [f"{field}_{groups[k]}" if len(values) == len(groups) else f"{field}_{k}"
                          for k in range(len(values))]
        return names if len(names) == len(omega) else [f"omega_{k}" for k in range(len(omega))]

    def load_state(self, state: dict[str, Any]) -> None:
        if state.get("omega") is not None:
            self.loaded_omega = np.asarray(state["omega"], dtype=float)


# read-only views of the trainer for the two lenders below (tests and notebooks use them)
def _bisim(lender: DeepLender) -> Bisimulator | None:
    return lender.bisimulator.bisim


def _spec(lender: DeepLender) -> Lever | None:
    return lender.bisimulator.spec


def _collect(lender: DeepLender, omega: np.ndarray, steps: int, seed: int) -> dict[str, np.ndarray]:
    return lender.bisimulator.collect(omega, steps, seed)


class BisimPPOLender(DeepLender):
    """PPO + Bisimulator (seed 002 Algorithm 1; Table 8: alpha 5, M 1, N 300, K 1)."""

    name: ClassVar[str] = "bisim_ppo"
    Params = BisimPPOParams
    learner_cls = PPOLearner
    bisimulator_cls = BisimTrainer
    bisim, spec, collect = property(_bisim), property(_spec), _collect


class BisimDQNLender(DeepLender):
    """DQN + Bisimulator (seed 002 Algorithm 1; Table 8: alpha 1.5, M 1, N 300, K 1)."""

    name: ClassVar[str] = "bisim_dqn"
    Params = BisimDQNParams
    learner_cls = DQNLearner
    bisimulator_cls = BisimTrainer
    bisim, spec, collect = property(_bisim), property(_spec), _collect
