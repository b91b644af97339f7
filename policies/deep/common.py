"""Shared machinery of the deep-RL lenders of seed 002: train on the gym adapter, decide in the engine.

How a trained policy fits the ``Policy`` protocol. ``abm run --policy ppo`` builds the policy
like any other; the engine then calls ``policy.prepare(scenario)`` once, before its clock
starts. A deep policy trains there, on ``abm.gym.AbmEnv`` of the *same* scenario, with a
training seed drawn from the run's ``policy`` stream (so the run stays a function of the
scenario seed, and training never replays the evaluation trajectory), or loads ``model_path``.
``decide`` then maps each observation row to the trained net's approval probability
(``deterministic: true``, the default: its greedy action, 0 or 1). After the run the runner
saves the model into the run folder (``policy/model.zip`` + ``policy/config.json``), which
``model_path`` reloads. Torch runs on one thread (the machines have two shared cores).
"""

from __future__ import annotations

import abc
import json
from collections import deque
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from abm.errors import InvariantError, UserError
from policies.base import Policy

SEED_BOUND = 2**31 - 1  # SB3 seeds numpy's legacy generator, which takes 32-bit seeds


class DeepParams(BaseModel):
    """Parameters every deep lender shares (network and optimiser settings live in subclasses)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    total_timesteps: int = Field(400_000, ge=1, le=10**9,
                                 description="Training decisions (seed 002 D.3: '400 thousands steps of training').")
    deterministic: bool = Field(True, description="Decide with the greedy action (0/1) instead of pi(approve | s).")
    model_path: str | None = Field(None, description="Folder written by save() (a run's policy/): load it instead of training.")
    sim_episodes: int | None = Field(None, ge=1, le=10**6,
                                     description="Scenario episodes per training gym episode (null: the run's episodes.count).")


def set_torch_threads() -> None:
    torch.set_num_threads(1)


class DecisionRecorder:
    """Mixin for SB3 algorithms: keeps the adapter's ``info['decided']`` of every training step.

    SB3 hands each step's infos to ``_update_info_buffer``; the records (group, action, true
    outcome, reward, obs, next_obs, done) are what the fairness terms and the Bisimulator's
    datasets are computed from. One training env only (``n_envs == 1``).
    """

    record_limit: int = 100_000

    def _update_info_buffer(self, infos, dones=None):  # noqa: D401 - SB3 hook
        super()._update_info_buffer(infos, dones)
        if not hasattr(self, "records"):
            self.records = deque(maxlen=self.record_limit)
        for k, info in enumerate(infos):
            decided = info.get("decided")
            if decided is not None:
                rec = dict(decided)
                rec["done"] = bool(dones[k]) if dones is not None else False
                self.records.append(rec)

    def take_records(self, n: int) -> list[dict[str, Any]]:
        """The last ``n`` records (the current rollout for on-policy algorithms)."""
        recs = list(getattr(self, "records", ()))[-n:]
        if len(recs) != n:
            raise InvariantError(f"expected {n} decision records for the rollout, got {len(recs)}")
        return recs


def records_arrays(records: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Column arrays from a list of decision records."""
    return {
        "group": np.array([r["group"] for r in records], dtype=np.int64),
        "action": np.array([r["action"] for r in records], dtype=np.int64),
        "outcome": np.array([r["outcome"] for r in records], dtype=bool),
        "reward": np.array([r["reward"] for r in records], dtype=float),
        "done": np.array([r["done"] for r in records], dtype=bool),
        "obs": np.stack([r["obs"] for r in records]).astype(np.float32),
        "next_obs": np.stack([r["next_obs"] for r in records]).astype(np.float32),
    }


class DeepPolicy(Policy):
    """Base of the SB3-backed lenders: training in ``prepare``, greedy or stochastic ``decide``."""

    Params: ClassVar[type[BaseModel]] = DeepParams
    algorithm: ClassVar[type] = object  # the SB3 class (PPO, DQN or a subclass)

    def __init__(self, params, context, rng: np.random.Generator):
        super().__init__(params, context, rng)
        self.train_seed = int(rng.integers(0, SEED_BOUND))
        self.model = None
        self.train_env = None
        self.obs_fields = tuple(getattr(context, "obs_fields", ()))

    # -- training -------------------------------------------------------------------------
    def prepare(self, model) -> None:
        """Train (or load) once, then set the agent's side of ``model.world``; the engine calls
        this before the run's clock starts."""
        if self.model is None:
            set_torch_threads()
            if self.params.model_path:
                self.load(self.params.model_path, model.scenario)
            else:
                self.train(model.scenario)
        self.configure_world(model.world)

    def configure_world(self, world) -> None:
        """Hook: what the trained agent changes on its side of the world (the Bisimulator's
        observation dynamics). Nothing by default."""

    def make_env(self, scenario):
        """The training env: the scenario's gym adapter (subclasses wrap it)."""
        from abm.gym import AbmEnv

        return AbmEnv(scenario, sim_episodes=self.params.sim_episodes or scenario.episodes.count)

    @abc.abstractmethod
    def build_model(self, env):
        """The Stable-Baselines3 model trained on ``env``."""

    def train(self, scenario) -> None:
        env = self.make_env(scenario)
        self.train_env = env
        self.model = self.build_model(env)
        self.learn()

    def learn(self) -> None:
        self.model.learn(total_timesteps=self.params.total_timesteps)

    # -- deciding -------------------------------------------------------------------------
    @abc.abstractmethod
    def approve_prob(self, obs: np.ndarray) -> np.ndarray:
        """P(approve) per observation row under the trained model."""

    def _decide(self, obs: np.ndarray, info: Any) -> np.ndarray:
        if self.model is None:
            raise InvariantError(f"policy {self.name!r} has no trained model: prepare(scenario) was not called")
        with torch.no_grad():
            p = self.approve_prob(np.asarray(obs, dtype=np.float32))
        return (p >= 0.5).astype(float) if self.params.deterministic else np.clip(p, 0.0, 1.0)

    # -- persistence ----------------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        """Algorithm-specific JSON-able state saved beside the weights (multipliers, omega...)."""
        return {}

    def load_extra_state(self, state: dict[str, Any], folder: Path) -> None:
        """Restore what ``extra_state`` saved."""

    def save(self, path: str | Path) -> Path:
        if self.model is None:
            raise InvariantError(f"policy {self.name!r}: nothing to save (not trained)")
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save(folder / "model.zip")
        config = {"policy": self.name, "params": self.params.model_dump(), "obs_fields": list(self.obs_fields),
                  "train_seed": self.train_seed, "extra": self.extra_state()}
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        return folder

    def load(self, path: str | Path, scenario) -> None:
        """Rebuild the network for ``scenario`` and load only its weights from ``path``.

        SB3's ``Algorithm.load`` unpickles (cloudpickle) the class parameters stored in the zip,
        so a model_path named by a scenario file could run code; ``set_parameters`` reads only
        the state dicts, with ``torch.load(weights_only=True)``.
        """
        import zipfile

        folder = Path(path)
        cfg_path = folder / "config.json"
        if not cfg_path.is_file() or not (folder / "model.zip").is_file():
            raise UserError(f"policy.model_path: {folder} has no model.zip + config.json (a run's policy/ folder)")
        try:
            config = json.loads(cfg_path.read_text())
            with zipfile.ZipFile(folder / "model.zip") as archive:
                data = json.loads(archive.read("data")) if "data" in archive.namelist() else {}
        except (OSError, UnicodeDecodeError, ValueError, zipfile.BadZipFile) as exc:
            raise UserError(f"policy.model_path: {folder}: unreadable model ({type(exc).__name__})") from None
        if not isinstance(config, dict) or not isinstance(data, dict):
            raise UserError(f"policy.model_path: {folder}: config.json or the model's data is not a mapping")
        if config.get("policy") != self.name:
            raise UserError(f"policy.model_path: {folder} holds a {config.get('policy')!r} model, not {self.name!r}")
        if self.obs_fields and list(self.obs_fields) != config.get("obs_fields"):
            raise UserError(f"policy.model_path: {folder} was trained on observation fields "
                            f"{config.get('obs_fields')}, this scenario has {list(self.obs_fields)}")
        from abm.gym import AbmEnv

        self.model = self.build_model(AbmEnv(scenario))
        try:
            self.model.set_parameters(str(folder / "model.zip"), exact_match=True, device=self.model.device)
        except Exception as exc:  # torch/zip/shape errors of a foreign or damaged file
            raise UserError(f"policy.model_path: {folder}: weights do not fit this policy "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
        if isinstance(data.get("num_timesteps"), int):  # a plain JSON number, never unpickled
            self.model.num_timesteps = data["num_timesteps"]
        self.load_extra_state(config.get("extra", {}), folder)

    def state(self) -> dict[str, Any]:
        return {"train_seed": self.train_seed, "trained_timesteps": int(getattr(self.model, "num_timesteps", 0)),
                **self.extra_state()}


def linear_schedule(initial: float):
    """SB3 schedule annealing the learning rate linearly to 0 (seed 002 Tables 6-7: 'Anneal learning rate')."""
    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial

    return schedule
