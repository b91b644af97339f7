"""Bisimulator (seed 002 Algorithm 1): learn a group-conditioned reward correction and the agent's
observation dynamics so that an unconstrained RL agent (PPO or DQN) treats groups alike.

Reward (§4.1, L4-7). ``R = R_orig + alpha R_phi(s, a, g)``; R_phi is a tanh MLP (its last
layer starts at zero, so training starts from the original MDP). J_rew (Eq. 8) is estimated on
the last ``outer_steps`` decisions D with quantile matching (D.1: "the first quartile of group
1 is matched with the first quartile of group 2"): within each pair of groups and each quartile
of the score field (rank-based, ties broken at random) samples are paired at random, and
``J_rew = mean |r_i + alpha R_phi_i - r_j - alpha R_phi_j|`` is minimised with Adam; one of the
M iterations is one pass over the pairs in minibatches of 64.

Observation dynamics (§4.2, L8-13). omega is the family's agent-side lever (lending:
group-specific observed score changes c+/c-; admissions: group-specific manipulation costs),
bounded to [0, omega_scale * true] per sign. Each of the N One-Plus-One (nevergrad) iterations
collects a dataset with the current policy under a candidate omega (``dynamics_rollout``
decisions from a fixed seed: common random numbers, so candidates differ only by omega), fits
the Gaussian dynamics model T_psi(s' | s, a, g) (an MLP giving mean and log-sd of the decided
applicant's next observation, group column excluded) by maximum likelihood, and scores
``J_dyn = gamma * mean W2`` over quantile-matched pairs with the closed form of Eq. 11 for
diagonal Gaussians. T_psi is never sampled, so the straight-through estimator of D.1 has no
role here. omega only changes what the agent sees (the world's observation seam); the true
dynamics are untouched.

Outer loop (L2-17). Every ``outer_steps`` decisions (one PPO rollout, K = 1 update) D is the
rollout just collected; M reward iterations run on it; in the full variant a dynamics phase of
N iterations runs every ``dynamics_every`` outer iterations (Table 8's N = 300 per outer
iteration would cost 300 rollouts per PPO update; see docs/MODEL.md); the new phi and omega
shape the rewards and observations from the next decision on (the policy update at iteration k
uses the rollout collected under phi_{k-1}, omega_{k-1}).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Callable, ClassVar, Literal

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


class BisimFields(BaseModel):
    variant: Literal["full", "reward_only"] = Field("full", description="Optimise reward and observation dynamics, or the reward only.")
    reward_iterations: int = Field(1, ge=0, le=1000, description="M: reward optimisation iterations per outer iteration (Table 8).")
    dynamics_iterations: int = Field(300, ge=1, le=100_000, description="N: One-Plus-One iterations per dynamics phase (Table 8).")
    outer_steps: int = Field(512, ge=16, le=10**7, description="Decisions per outer iteration (K = 1 PPO update of 512).")
    dynamics_every: int = Field(10, ge=1, le=10**6, description="Outer iterations between dynamics phases (the first runs at once).")
    dynamics_rollout: int = Field(256, ge=16, le=10**6, description="Decisions collected per candidate omega.")
    omega_scale: float = Field(2.0, gt=0, le=100, description="omega is bounded to [0, omega_scale * true value] per sign.")
    reward_lr: float = Field(1e-3, gt=0, le=1, description="Adam learning rate of R_phi.")
    dynamics_lr: float = Field(1e-3, gt=0, le=1, description="Adam learning rate of T_psi.")
    model_hidden: int = Field(64, ge=1, le=4096, description="Hidden width of R_phi and T_psi.")
    quantiles: int = Field(4, ge=1, le=100, description="Quantile bins for matching states across groups (quartiles).")
    quantile_field: str | None = Field(None, description="Observation field ranked for quantile matching (null: the first).")


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


# -- quantile matching ----------------------------------------------------------------------------
def quantile_pairs(score: np.ndarray, group: np.ndarray, n_groups: int, quantiles: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i, j) across every pair of groups, matched within the same quantile bin."""
    bins = np.full(len(score), -1)
    for g in range(n_groups):
        members = np.nonzero(group == g)[0]
        if len(members) == 0:
            continue
        order = members[np.lexsort((rng.random(len(members)), score[members]))]
        bins[order] = (np.arange(len(order)) * quantiles) // len(order)
    left, right = [], []
    for a in range(n_groups):
        for b in range(a + 1, n_groups):
            for q in range(quantiles):
                ia = np.nonzero((group == a) & (bins == q))[0]
                ib = np.nonzero((group == b) & (bins == q))[0]
                if len(ia) == 0 or len(ib) == 0:
                    continue
                m = max(len(ia), len(ib))
                left.append(rng.choice(ia, m))
                right.append(rng.choice(ib, m))
    if not left:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(left), np.concatenate(right)


def _mlp(n_in: int, hidden: int, n_out: int, zero_last: bool = False) -> torch.nn.Module:
    net = torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, n_out))
    if zero_last:
        torch.nn.init.zeros_(net[2].weight)
        torch.nn.init.zeros_(net[2].bias)
    return net


def _inputs(obs: np.ndarray, action: np.ndarray, group: np.ndarray, n_groups: int) -> torch.Tensor:
    return torch.as_tensor(np.hstack([obs, np.eye(2)[action], np.eye(n_groups)[group]]), dtype=torch.float32)


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
        self.dyn_net = _mlp(d + 2 + n_groups, p.model_hidden, 2 * len(self.keep), zero_last=True)
        self.dyn_opt = torch.optim.Adam(self.dyn_net.parameters(), lr=p.dynamics_lr)
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.omega: np.ndarray | None = None
        self.last_j_dyn: float | None = None  # J_dyn of the last dynamics phase's best omega
        self.history: list[dict[str, float]] = []

    # -- reward ---------------------------------------------------------------------------
    def correction(self, obs: np.ndarray, action: np.ndarray, group: np.ndarray) -> np.ndarray:
        """alpha * R_phi(s, a, g) for a batch."""
        with torch.no_grad():
            out = self.reward_net(_inputs(obs, action, group, self.G)).squeeze(-1).numpy()
        return self.p.reward_alpha * out.astype(float)

    def _pairs(self, data):
        return quantile_pairs(data["obs"][:, self.score_col], data["group"], self.G, self.p.quantiles, self.rng)

    def j_rew(self, data, pairs=None) -> float:
        i, j = self._pairs(data) if pairs is None else pairs
        if len(i) == 0:
            return 0.0
        r = data["reward"] + self.correction(data["obs"], data["action"], data["group"])
        return float(np.mean(np.abs(r[i] - r[j])))

    def reward_iteration(self, data, pairs=None, batch: int = 64) -> None:
        """One pass of Adam over the quantile-matched pairs of ``data`` (L5-6)."""
        i, j = self._pairs(data) if pairs is None else pairs
        if len(i) == 0:
            return
        x = _inputs(data["obs"], data["action"], data["group"], self.G)
        r = torch.as_tensor(data["reward"], dtype=torch.float32)
        alpha = self.p.reward_alpha
        order = self.rng.permutation(len(i))
        for s in range(0, len(order), batch):
            k = order[s:s + batch]
            bi, bj = torch.as_tensor(i[k]), torch.as_tensor(j[k])
            ri = r[bi] + alpha * self.reward_net(x[bi]).squeeze(-1)
            rj = r[bj] + alpha * self.reward_net(x[bj]).squeeze(-1)
            loss = (ri - rj).abs().mean()
            self.reward_opt.zero_grad()
            loss.backward()
            self.reward_opt.step()

    # -- dynamics -------------------------------------------------------------------------
    def _gaussian(self, data) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.dyn_net(_inputs(data["obs"], data["action"], data["group"], self.G))
        k = len(self.keep)
        mean = torch.as_tensor(data["obs"][:, self.keep]) + out[:, :k]  # residual: s' = s + delta
        log_sd = out[:, k:].clamp(-5.0, 2.0)
        return mean, log_sd

    def fit_dynamics(self, data, epochs: int = 5, batch: int = 64, rng: np.random.Generator | None = None) -> None:
        """Maximum likelihood of the decided applicants' next observations (L10)."""
        target = torch.as_tensor(data["next_obs"][:, self.keep])
        n = len(target)
        rng = self.rng if rng is None else rng
        for _ in range(epochs):
            order = rng.permutation(n)
            for s in range(0, n, batch):
                k = order[s:s + batch]
                sub = {key: data[key][k] for key in ("obs", "action", "group")}
                mean, log_sd = self._gaussian(sub)
                nll = (((target[k] - mean) / log_sd.exp()) ** 2 / 2 + log_sd).sum(dim=1).mean()
                self.dyn_opt.zero_grad()
                nll.backward()
                self.dyn_opt.step()

    def j_dyn(self, data) -> float:
        """gamma * mean W2 between the model's next-state Gaussians of matched pairs (L11, Eq. 11)."""
        i, j = self._pairs(data)
        if len(i) == 0:
            return 0.0
        with torch.no_grad():
            mean, log_sd = self._gaussian(data)
            sd = log_sd.exp()
            w2 = ((mean[i] - mean[j]) ** 2).sum(1) + ((sd[i] - sd[j]) ** 2).sum(1)
        return float(self.gamma * w2.sqrt().mean())

    def dynamics_phase(self, collect: Callable[[np.ndarray, int], dict], spec: Lever,
                       fit_epochs: int = 15) -> np.ndarray:
        """N One-Plus-One iterations over omega (L8-13); returns the best omega seen.

        ``collect(omega, seed)`` returns a dataset of the current policy under ``omega``. All
        candidates share one rollout seed, one warm start of T_psi (fitted on a dataset of
        another seed, so no candidate is favoured) and one minibatch order: their J_dyn differ
        by omega, not by sampling or fitting noise.
        """
        import nevergrad as ng  # here, not at the top: a 4 s import, and `abm policies` imports this module

        start = np.clip(spec.init if self.omega is None else self.omega, spec.low, spec.high)
        seed = int(self.rng.integers(2**31 - 1))
        self.fit_dynamics(collect(start, seed + 1), epochs=fit_epochs)
        with warnings.catch_warnings():  # nevergrad warns about its default sigma, replaced just below
            warnings.simplefilter("ignore")
            param = ng.p.Array(init=start).set_bounds(spec.low, spec.high)
        param.set_mutation(sigma=float(np.min(spec.high - spec.low)) / 6.0)  # 3 sigma inside the box
        param.random_state = np.random.RandomState(int(self.rng.integers(2**31 - 1)))
        opt = ng.optimizers.OnePlusOne(parametrization=param, budget=self.p.dynamics_iterations)
        # every candidate's T_psi starts from the same warm-started weights, so J_dyn compares
        # omegas rather than how long the model has been training
        snapshot = copy.deepcopy(self.dyn_net.state_dict())
        best, best_loss = start, np.inf
        for _ in range(self.p.dynamics_iterations):
            cand = opt.ask()
            omega = np.asarray(cand.value, dtype=float)
            data = collect(omega, seed)
            self.dyn_net.load_state_dict(snapshot)
            self.dyn_opt = torch.optim.Adam(self.dyn_net.parameters(), lr=self.p.dynamics_lr)
            self.fit_dynamics(data, epochs=fit_epochs, rng=np.random.default_rng(seed))
            loss = self.j_dyn(data)
            opt.tell(cand, loss)
            if loss < best_loss:
                best, best_loss = omega, loss
        self.omega = best
        self.last_j_dyn = float(best_loss)
        return self.omega


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
    dynamics phase, whose rollouts ask the learner for actions). The learned omega is applied to
    the training world at once, and to the evaluation world by ``configure_world``.
    """

    def __init__(self, params, seed: int, learner: Learner):
        self.p = params
        self.seed = seed
        self.learner = learner
        self.bisim: Bisimulator | None = None  # built by attach() (training only, not when loading)
        self.spec: Lever | None = None  # the full variant's omega: start, bounds, scenario fields
        self.raw_env: AbmEnv | None = None  # the training adapter under the reward wrapper
        self.probe_env: AbmEnv | None = None  # the dynamics rollouts' env, made on the first one
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

    def collect(self, omega: np.ndarray, steps: int, seed: int) -> dict[str, np.ndarray]:
        """A dataset of ``steps`` decisions by the current policy with the agent seeing ``omega``."""
        if self.probe_env is None:
            self.probe_env = AbmEnv(self.raw_env.scenario, sim_episodes=10**6)
        env = self.probe_env
        env.scenario = with_omega(self.raw_env.scenario, self.spec, omega)
        obs, _ = env.reset(seed=seed)
        records = []
        for _ in range(steps):
            obs, _, _, truncated, info = env.step(self.learner.predict(obs, deterministic=False))
            rec = dict(info["decided"])
            rec["done"] = truncated
            records.append(rec)
            if truncated:
                obs, _ = env.reset()
        return records_arrays(records)

    def outer_iteration(self, k: int, data: dict[str, np.ndarray]) -> None:
        p, bisim = self.p, self.bisim
        pairs = bisim._pairs(data)
        before = bisim.j_rew(data, pairs)
        for _ in range(p.reward_iterations):
            bisim.reward_iteration(data, pairs)
        row = {"iteration": k, "j_rew_before": before, "j_rew_after": bisim.j_rew(data, pairs)}
        if p.variant == "full" and k % p.dynamics_every == 0:
            omega = bisim.dynamics_phase(lambda om, seed: self.collect(om, p.dynamics_rollout, seed), self.spec)
            observation_lever(self.raw_env.sim.world, p.omega_scale).apply(omega)  # live, for the rest of this episode
            self.raw_env.scenario = with_omega(self.raw_env.scenario, self.spec, omega)  # and later ones
            row["omega"] = omega.tolist()
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
