"""The RL lender of seed 000: a policy-gradient learner trained online on the continual trajectory.

``a = sigma(h_theta(x, g) + u_phi(obs))`` (``policies.torch_common.LenderNet``); the engine
draws each decision ~ Bernoulli(a), so ``log pi`` is differentiable without relaxation. At each
episode end the learner takes one Adam step on the episode's likelihood-ratio gradient

    g = A_e * sum_k grad log pi(d_k | obs_k),   A_e = (R_e - baseline) / scale,

with ``R_e`` the chosen objective's per-episode reward (``abm.objectives``) and an
exponential-moving-average baseline and scale: the *passive* policy gradient, the score of its
own decisions only. The linear head ``h_theta`` is published to the world as the approval model
applicants self-select on (``approval_model()``), so this learner is performative in effect but
blind to it in its gradient; ``policies.perl`` adds the missing term. See docs/MODEL.md,
"Learning lenders: RL and PERL".
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from scipy.special import expit

from abm.build import simulation
from abm.config import scenario_to_dict, validate_scenario_dict
from abm.errors import UserError
from abm.world import ApprovalContext
from abm import objectives
from policies.base import NoParams, Policy
from policies.torch_common import (LenderNet, ObsLayout, file_sha256, read_checkpoint, set_torch_threads,
                                   write_checkpoint)

DEFAULT_OBJECTIVE = "dm:utilitarian"  # a lender with no stated objective maximises its profit
ADVANTAGE_CLIP = 5.0  # in units of the reward scale: one odd episode cannot take a huge step


class LenderParams(NoParams):
    hidden: int = Field(16, ge=1, le=1024, description="Hidden units of the correction network u_phi.")
    learning_rate: float = Field(0.05, gt=0, le=10, description="Adam step size of the scoring head; one step per episode.")
    net_learning_rate: float = Field(0.005, ge=0, le=10, description=(
        "Adam step size of the correction network u_phi (smaller: its many weights follow the noisy "
        "episode-level signal more slowly than the 3-parameter head)."))
    baseline_decay: float = Field(0.9, ge=0, lt=1, description=(
        "EMA decay of the reward baseline and scale: advantage = (R - baseline) / scale."))
    head_init: Literal["zero", "loanly"] = Field("zero", description=(
        "Initial scoring head: zero (a = 0.5 for everyone) or the LOANLY approval model."))
    learn: bool = Field(True, description="Keep learning online during the run (pretraining always learns).")
    pretrain_episodes: int = Field(0, ge=0, le=10**6, description=(
        "Episodes of online training in the pretraining default regime (same scenario and population) first."))
    load: str | None = Field(None, description="Start from this checkpoint (checkpoint.pt, its folder or a run folder).")
    load_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description=(
        "Expected SHA-256 of the checkpoint (set by `abm run --load`, so a run's identity follows the file)."))
    credit: Literal["episode", "discounted"] = Field("discounted", description=(
        "discounted: an episode's decisions are credited with the discounted return of the episodes that "
        "follow (sum_k gamma^k A_{e+k}), online through an eligibility trace of the episodes' scores; "
        "episode: with that episode's reward only (the older runs' reading)."))
    gamma: float = Field(0.9, ge=0, lt=1, description=(
        "credit: discounted - per-episode discount of later rewards (effective horizon 1 / (1 - gamma) episodes)."))


    #: defaults that changed, with the old value: the run's config writes credit out, its run id
    #: leaves it out at episode, which is what an omitted credit meant before (``abm.config.RUN_ID``)
    legacy_omitted: ClassVar[dict[str, Any]] = {"credit": "episode"}


#: parameters added after checkpoints were first written, with the values they had then: left out
#: of a checkpoint's config while all of them hold those, so such runs write the same files as before
_LEGACY = {"credit": "episode", "gamma": 0.9}


class RewardBaseline:
    """EMA mean and variance of episode rewards; the advantage is the standardised deviation."""

    def __init__(self, decay: float):
        self.decay = decay
        self.mean = 0.0
        self.var = 0.0
        self.count = 0

    def advantage(self, reward: float) -> float:
        """Advantage of ``reward`` against the statistics so far, then fold it in."""
        if self.count == 0:
            self.mean, self.count = reward, 1
            return 0.0
        dev = reward - self.mean
        if self.count == 1:
            self.var = dev * dev
        adv = float(np.clip(dev / np.sqrt(self.var), -ADVANTAGE_CLIP, ADVANTAGE_CLIP)) if self.var > 0 else 0.0
        self.mean += (1.0 - self.decay) * dev
        self.var = self.decay * self.var + (1.0 - self.decay) * dev * dev
        self.count += 1
        return adv

    def to_dict(self) -> dict[str, float]:
        return {"baseline_mean": self.mean, "baseline_var": self.var, "baseline_count": float(self.count)}

    def load(self, d: dict[str, float]) -> None:
        self.mean, self.var, self.count = float(d["baseline_mean"]), float(d["baseline_var"]), int(d["baseline_count"])


class RLLender(Policy):
    """Policy-gradient lender on per-episode objective rewards (passive gradient only)."""

    name = "rl"
    Params = LenderParams
    requires = frozenset({"approval_model"})
    saves = True

    def __init__(self, params, context, rng):
        super().__init__(params, context, rng)
        set_torch_threads()
        if not isinstance(context, ApprovalContext) or context.approval is None:
            raise UserError(f"policy {self.name!r}: needs a family that publishes an approval model (eutopia)")
        approval = context.approval
        self.layout = ObsLayout(tuple(context.obs_fields))
        theta0 = (approval.theta_g, approval.theta_x, approval.bias) if params.head_init == "loanly" else (0.0, 0.0, 0.0)
        self.net = LenderNet(self.layout, params.hidden, approval.wealth_mean, approval.wealth_std,
                             context.obs_scale["wealth"], rng, theta0)
        self.world_standardisation = (approval.wealth_mean, approval.wealth_std)
        self.optimizer = torch.optim.Adam([
            {"params": [self.net.theta], "lr": params.learning_rate},
            {"params": [self.net.w1, self.net.b1, self.net.w2, self.net.b2], "lr": params.net_learning_rate}])
        self.baseline = RewardBaseline(params.baseline_decay)
        self.objective = objectives.parse(DEFAULT_OBJECTIVE)
        self.learning = params.learn
        self.rewards: list[float] = []
        self.updates = 0
        self.pretrained_episodes = 0
        self.loaded_from: str | None = None
        self.last_episode: dict[str, Any] = {}
        self._obs: list[np.ndarray] = []
        self._approved: list[np.ndarray] = []
        self.trace: list[torch.Tensor] | None = None  # credit: discounted - decayed sum of episode scores
        self._preparing = False
        self._report_every = 0  # episodes between progress lines (0: silent)
        self._report_total = 0

    # -- set-up: objective, checkpoint, pretraining -------------------------------------------
    def prepare(self, model) -> None:
        """Called by the engine before its clock starts: objective, ``load``, pretraining."""
        scenario = model.scenario
        self.objective = objectives.parse(scenario.objective or DEFAULT_OBJECTIVE)
        self._bind(model.world)
        if self._preparing:  # the nested pretraining simulation calls this again
            return
        self._preparing = True
        try:
            if self.params.load:
                self.load(self.params.load, expected_sha256=self.params.load_sha256)
            if self.params.pretrain_episodes:
                self._pretrain(scenario, self.params.pretrain_episodes)
        finally:
            self._preparing = False
        self._bind(model.world)
        self.learning = self.params.learn
        self._progress(scenario.episodes.count)

    def _bind(self, world) -> None:
        """Express the head in ``world``'s wealth standardisation (the published theta means h there)."""
        context = world.policy_context()
        if not isinstance(context, ApprovalContext) or context.approval is None:
            raise UserError(f"policy {self.name!r}: needs a family that publishes an approval model (eutopia)")
        approval = context.approval
        self.world_standardisation = (approval.wealth_mean, approval.wealth_std)
        self.net.rebase(*self.world_standardisation)

    def _progress(self, total: int) -> None:
        self._report_total = total
        self._report_every = max(1, total // 10) if sys.stderr.isatty() else 0

    def _pretrain(self, scenario, episodes: int) -> None:
        data = scenario_to_dict(scenario)
        data["population"] = {**data["population"], "regime": "pretraining", "default_range": None}
        data["episodes"] = {**data["episodes"], "count": episodes}
        data["outputs"] = {**data["outputs"], "events": False}
        data["policy"] = {"name": "approve_all"}  # placeholder: the nested run is handed this object
        pre = validate_scenario_dict(data, "pretraining")
        self.learning = True
        self._progress(episodes)
        sim = simulation(pre, self, log_events=False)
        start = len(self.rewards)
        sim.run()
        self.pretrained_episodes += episodes
        if self._report_every:
            print(f"{self.name}: pretrained {episodes} episodes (pretraining regime), mean reward "
                  f"{np.mean(self.rewards[start:]):.4g}", file=sys.stderr)

    # -- deciding ---------------------------------------------------------------------------
    def _decide(self, obs: np.ndarray, info: Any) -> np.ndarray:
        return expit(self.net.logits_numpy(obs))

    def on_decisions(self, obs, info, probs, approved) -> None:
        self._obs.append(np.array(obs, dtype=np.float64))
        self._approved.append(np.asarray(approved, dtype=bool).copy())

    def approval_model(self) -> tuple[float, float, float]:
        return self.net.head()

    # -- learning ---------------------------------------------------------------------------
    def log_prob(self, obs: np.ndarray, approved: np.ndarray) -> torch.Tensor:
        """Per-decision log pi(d | obs) as a differentiable tensor."""
        logits = self.net(torch.from_numpy(np.asarray(obs, dtype=np.float64)))
        target = torch.from_numpy(np.asarray(approved, dtype=np.float64))
        return -F.binary_cross_entropy_with_logits(logits, target, reduction="none")

    def decision_score(self, obs: np.ndarray, approved: np.ndarray) -> np.ndarray:
        """sum_k grad_theta log pi(d_k | obs_k) w.r.t. the head (theta_g, theta_x, b)."""
        if len(obs) == 0:
            return np.zeros(3)
        (grad,) = torch.autograd.grad(self.log_prob(obs, approved).sum(), self.net.theta)
        return grad.numpy().copy()

    def application_score(self, stats: dict[str, Any]) -> np.ndarray | None:
        """The performative term's score; the passive learner has none."""
        return None

    def on_episode_end(self, stats: dict[str, Any]) -> None:
        reward = self.objective.value(stats)
        self.rewards.append(reward)
        d = len(self.layout.fields)
        obs = np.concatenate(self._obs) if self._obs else np.empty((0, d))
        approved = np.concatenate(self._approved) if self._approved else np.empty(0, dtype=bool)
        self._obs, self._approved = [], []
        app_score = self.application_score(stats)
        self.last_episode = {"reward": reward, "obs": obs, "approved": approved, "application_score": app_score}
        if self.learning and self.params.credit == "discounted":
            self._step_discounted(obs, approved, app_score, self.baseline.advantage(reward))
        elif self.learning:
            adv = self.baseline.advantage(reward)
            if adv != 0.0:
                self._step(obs, approved, app_score, adv)
        n = len(self.rewards)
        if self._report_every and n % self._report_every == 0:
            k = self._report_every
            print(f"{self.name} [{self.objective}]: episode {n - self.pretrained_episodes}/{self._report_total}, "
                  f"mean reward (last {k}) {np.mean(self.rewards[-k:]):.4g}", file=sys.stderr)

    def _step(self, obs: np.ndarray, approved: np.ndarray, app_score: np.ndarray | None, adv: float) -> None:
        self.optimizer.zero_grad()
        (-adv * self._surrogate(obs, approved, app_score)).backward()
        self.optimizer.step()
        self.updates += 1

    def _surrogate(self, obs: np.ndarray, approved: np.ndarray, app_score: np.ndarray | None) -> torch.Tensor:
        surrogate = self.log_prob(obs, approved).sum() if len(obs) else torch.zeros((), dtype=torch.float64)
        if app_score is not None:  # PERL: + theta . grad log p(applications), a constant vector
            surrogate = surrogate + (self.net.theta * torch.from_numpy(np.asarray(app_score, float))).sum()
        return surrogate

    def _step_discounted(self, obs: np.ndarray, approved: np.ndarray, app_score: np.ndarray | None,
                         adv: float) -> None:
        """Discounted credit, online (the backward view of REINFORCE with a discounted return):
        the trace ``z_e = gamma z_{e-1} + s_e`` of the episodes' scores ``s_e`` (for PERL the
        passive plus the application score) is stepped along ``A_e z_e``. Summed over episodes,
        ``sum_e A_e z_e = sum_j s_j sum_{k>=0} gamma^k A_{j+k}``: episode j's decisions are
        credited with the discounted advantages of every later episode, so an effect that
        outlasts the episode (wealth raising later arrivals and repayments) reaches the
        decisions that caused it. gamma = 0 is episode credit."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        surrogate = self._surrogate(obs, approved, app_score)
        grads = torch.autograd.grad(surrogate, params, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
        gamma = self.params.gamma
        self.trace = grads if self.trace is None else [gamma * z + g for z, g in zip(self.trace, grads)]
        if adv == 0.0:
            return
        self.optimizer.zero_grad()
        for p, z in zip(params, self.trace):
            p.grad = -adv * z
        self.optimizer.step()
        self.updates += 1

    # -- persistence ------------------------------------------------------------------------
    def checkpoint_config(self) -> dict[str, Any]:
        return {"policy": self.name, "hidden": self.params.hidden, "obs_fields": list(self.layout.fields),
                "wealth_mean": self.net.wealth_mean, "wealth_std": self.net.wealth_std,
                "objective": str(self.objective), "episodes_seen": len(self.rewards), "updates": self.updates,
                "params": self._params_dump()}

    def _params_dump(self) -> dict[str, Any]:
        dump = self.params.model_dump()
        if all(dump[k] == v for k, v in _LEGACY.items()):
            for k in _LEGACY:
                del dump[k]
        return dump

    def save(self, path: str | Path) -> Path:
        """Weights + optimiser + baseline with the config JSON (``path``: a .pt file or a folder)."""
        return write_checkpoint(path, self.checkpoint_config(), self.net.state_dict(), self.optimizer.state_dict(),
                                self.baseline.to_dict())

    def load(self, path: str | Path, expected_sha256: str | None = None) -> None:
        file, config, blob = read_checkpoint(path)
        where = f"policy.load: {file}"
        if expected_sha256 and file_sha256(file) != expected_sha256:
            raise UserError(f"{where}: the file changed since the run was configured (sha256 mismatch); "
                            "pass --load again")
        if config.get("policy") not in ("rl", "perl"):
            raise UserError(f"{where}: holds a {config.get('policy')!r} policy, not rl/perl")
        if config.get("obs_fields") != list(self.layout.fields):
            raise UserError(f"{where}: trained on observation fields {config.get('obs_fields')}, "
                            f"this scenario has {list(self.layout.fields)}")
        if config.get("hidden") != self.params.hidden:
            raise UserError(f"{where}: hidden={config.get('hidden')}, this policy has hidden={self.params.hidden} "
                            f"(set policy.hidden to match)")
        try:
            self.net.load_state_dict(blob["weights"])
            self.optimizer.load_state_dict(blob["optimizer"])
            self.baseline.load(blob["extra"])
            mean, std = float(config["wealth_mean"]), float(config["wealth_std"])
        except (RuntimeError, KeyError, ValueError, TypeError) as exc:
            raise UserError(f"{where}: weights do not fit this network ({str(exc).splitlines()[0]})") from None
        if not (np.isfinite(mean) and np.isfinite(std) and std > 0):  # rebase divides by the std
            raise UserError(f"{where}: wealth_mean {mean} and wealth_std {std} are no standardisation "
                            f"(finite, std > 0)")
        self.net.wealth_mean, self.net.wealth_std = mean, std
        head, correction = self.optimizer.param_groups  # this run's step sizes, not the checkpoint's
        head["lr"], correction["lr"] = self.params.learning_rate, self.params.net_learning_rate
        self.net.rebase(*self.world_standardisation)
        self.loaded_from = str(file)

    def state(self) -> dict[str, Any]:
        r = self.rewards
        theta_g, theta_x, bias = self.net.head()
        return {"objective": str(self.objective), "episodes_seen": len(r), "updates": self.updates,
                "pretrained_episodes": self.pretrained_episodes, "loaded_from": self.loaded_from,
                "head": {"theta_g": theta_g, "theta_x": theta_x, "bias": bias},
                "reward_first10_mean": float(np.mean(r[:10])) if r else None,
                "reward_last10_mean": float(np.mean(r[-10:])) if r else None}
