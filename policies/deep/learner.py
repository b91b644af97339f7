"""The learner component of the deep lenders: one RL algorithm behind a small interface.

A ``DeepLender`` (``policies/deep/common.py``) owns one learner and talks to it only through
``Learner`` below, so a later learner of our own (e.g. a vectorised PPO over a gymnasium
``VectorEnv``) can replace the Stable-Baselines3 one without touching the lenders, the fair
advantage adjusters or the Bisimulator:

* ``build(env)``: create the networks for ``env`` (seeded by the learner's ``seed``);
* ``learn(total_timesteps, on_step=None, adjust_advantages=None)``: train. ``on_step`` gets
  each environment step's decision records (the adapter's ``info['decided']`` plus ``done``);
  ``adjust_advantages(adv, records, ctx) -> adv`` rewrites an on-policy rollout's flat GAE
  advantages before the update that uses them (``records``: column arrays of the same steps,
  ``ctx``: a ``RolloutContext``);
* ``predict(obs, deterministic)``: one action (the behaviour policy, for extra rollouts);
* ``approve_prob(obs)``: P(approve) per observation row (deciding);
* ``save(file)`` / ``read_meta(file)`` / ``load(file, meta)``: the ``model.zip`` checkpoint;
* ``ready``, ``num_timesteps``, ``device``, ``model`` (the underlying algorithm object).

``SB3Learner`` implements it on an SB3 algorithm; its hooks go through one SB3 callback
(``SB3Hooks``), so no SB3 algorithm class is subclassed.
"""

from __future__ import annotations

import abc
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol

import numpy as np
from pydantic import BaseModel
from stable_baselines3.common.callbacks import BaseCallback

from abm.errors import InvariantError

Record = dict[str, Any]
StepHook = Callable[[list[Record]], None]


@dataclass(frozen=True)
class RolloutContext:
    """What an advantage adjuster may read about the rollout besides its records."""

    last_obs: np.ndarray  # the observation after the rollout's last step (bootstrap state), shape (n_envs, d)
    gamma: float
    gae_lambda: float


class AdvantageAdjuster(Protocol):
    """The fair PPO variants' component: rewrites a rollout's advantages (Lag-PPO, A-PPO, ELBERT-PO)."""

    def __call__(self, adv: np.ndarray, rec: dict[str, np.ndarray], ctx: RolloutContext) -> np.ndarray: ...

    def state(self) -> dict[str, Any]: ...


class Learner(Protocol):
    """What a ``DeepLender`` needs of its learner (see the module docstring)."""

    model: Any

    @property
    def ready(self) -> bool: ...

    @property
    def num_timesteps(self) -> int: ...

    def build(self, env) -> None: ...

    def learn(self, total_timesteps: int, on_step: StepHook | None = None,
              adjust_advantages: AdvantageAdjuster | None = None) -> None: ...

    def predict(self, obs: np.ndarray, deterministic: bool = False) -> int: ...

    def approve_prob(self, obs: np.ndarray) -> np.ndarray: ...

    def save(self, file: Path) -> None: ...

    def read_meta(self, file: Path) -> dict[str, Any]: ...

    def load(self, file: Path, meta: dict[str, Any]) -> None: ...


def decision_records(infos, dones) -> list[Record]:
    """One record per env of a vectorised step: the adapter's ``info['decided']`` plus ``done``."""
    records = []
    for info, done in zip(infos, dones):
        decided = info.get("decided")
        if decided is not None:
            rec = dict(decided)
            rec["done"] = bool(done)
            records.append(rec)
    return records


def records_arrays(records: list[Record]) -> dict[str, np.ndarray]:
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


class SB3Hooks(BaseCallback):
    """The learner's hooks as one SB3 callback.

    SB3 calls ``_on_step`` right after each ``env.step`` (its locals hold that step's infos and
    dones) and ``_on_rollout_end`` after the rollout's returns and advantages are computed and
    before ``train()`` uses them: the place to rewrite the advantages.
    """

    def __init__(self, on_step: StepHook | None, adjust: AdvantageAdjuster | None):
        super().__init__()
        self.on_step_hook = on_step
        self.adjust = adjust
        self.rollout: list[Record] = []  # the current rollout's records (kept only for ``adjust``)

    def _on_rollout_start(self) -> None:
        self.rollout = []

    def _on_step(self) -> bool:
        records = decision_records(self.locals["infos"], self.locals["dones"])
        if self.adjust is not None:
            self.rollout.extend(records)
        if self.on_step_hook is not None:
            self.on_step_hook(records)
        return True

    def _on_rollout_end(self) -> None:
        if self.adjust is None:
            return
        model = self.model
        buf = model.rollout_buffer
        shape = buf.advantages.shape
        n = shape[0] * shape[1]
        if len(self.rollout) != n:
            raise InvariantError(f"expected {n} decision records for the rollout, got {len(self.rollout)}")
        ctx = RolloutContext(last_obs=model._last_obs, gamma=model.gamma, gae_lambda=model.gae_lambda)
        adjusted = self.adjust(buf.advantages.reshape(-1).astype(float), records_arrays(self.rollout), ctx)
        buf.advantages = np.asarray(adjusted, dtype=np.float32).reshape(shape)


class SB3Learner(abc.ABC):
    """A ``Learner`` on a Stable-Baselines3 algorithm (one training env, ``MlpPolicy``)."""

    algorithm: ClassVar[type]  # the SB3 class (PPO, DQN)
    on_policy: ClassVar[bool]  # whether advantages can be adjusted

    def __init__(self, params: BaseModel, seed: int):
        self.params = params
        self.seed = seed
        self.model = None

    @property
    def ready(self) -> bool:
        return self.model is not None

    @property
    def num_timesteps(self) -> int:
        return 0 if self.model is None else int(self.model.num_timesteps)

    @property
    def device(self):
        return self.model.device

    @abc.abstractmethod
    def algorithm_kwargs(self) -> dict[str, Any]:
        """The algorithm's keyword arguments from ``params`` (hyperparameters, network, device)."""

    def build(self, env) -> None:
        self.model = self.algorithm("MlpPolicy", env, seed=self.seed, **self.algorithm_kwargs())

    def learn(self, total_timesteps: int, on_step: StepHook | None = None,
              adjust_advantages: AdvantageAdjuster | None = None) -> None:
        if adjust_advantages is not None and not self.on_policy:
            raise InvariantError(f"{type(self).__name__}: advantages are adjusted only by on-policy learners")
        hooks = None if on_step is None and adjust_advantages is None else SB3Hooks(on_step, adjust_advantages)
        self.model.learn(total_timesteps=total_timesteps, callback=hooks)

    def predict(self, obs: np.ndarray, deterministic: bool = False) -> int:
        action, _ = self.model.predict(obs, deterministic=deterministic)
        return int(np.asarray(action).reshape(()))

    @abc.abstractmethod
    def approve_prob(self, obs: np.ndarray) -> np.ndarray:
        """P(approve) per float32 observation row (called under ``torch.no_grad``)."""

    def save(self, file: Path) -> None:
        self.model.save(file)

    def read_meta(self, file: Path) -> dict[str, Any]:
        """The zip's plain-JSON ``data`` member (raises OSError/ValueError/BadZipFile on a bad file)."""
        with zipfile.ZipFile(file) as archive:
            return json.loads(archive.read("data")) if "data" in archive.namelist() else {}

    def load(self, file: Path, meta: dict[str, Any]) -> None:
        """Only the weights of ``file`` (after ``build``) and its step count.

        SB3's ``Algorithm.load`` unpickles (cloudpickle) the class parameters stored in the zip,
        so a model_path named by a scenario file could run code; ``set_parameters`` reads only
        the state dicts, with ``torch.load(weights_only=True)``.
        """
        self.model.set_parameters(str(file), exact_match=True, device=self.model.device)
        if isinstance(meta.get("num_timesteps"), int):  # a plain JSON number, never unpickled
            self.model.num_timesteps = meta["num_timesteps"]
