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
* ``approve_prob(obs)``: P(approve) per observation row (deciding); ``exploration_rate``: the
  behaviour policy's epsilon (DQN; 0 for PPO), so P(behaviour approves) = (1 - eps) p + eps / 2;
* ``save(file)`` / ``read_meta(file)`` / ``load(file, meta)``: the ``model.zip`` checkpoint;
* ``ready``, ``num_timesteps``, ``device``, ``model`` (the underlying algorithm object).

``SB3Learner`` implements it on an SB3 algorithm; its hooks go through one SB3 callback
(``SB3Hooks``), so no SB3 algorithm class is subclassed. ``LeanLearner`` is the shared plumbing
of our own learners (``lean_ppo.LeanPPOLearner``, ``lean_dqn.LeanDQNLearner``: one readable file
per algorithm) that step K worlds at once through ``abm.vector.AbmVectorEnv``.

Which one a lender gets is a policy parameter (``ExecutionFields``: ``backend: sb3 | lean``,
``n_envs``), resolved by ``select_learner``. Both learners read the one parameter model of their
algorithm (``ppo.PPOParams``, ``dqn.DQNParams``).
"""

from __future__ import annotations

import abc
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Literal, Protocol

import gymnasium
import numpy as np
from pydantic import BaseModel, Field, model_validator
from stable_baselines3.common.callbacks import BaseCallback

from abm.errors import InvariantError, UserError
from abm.vector import MAX_ENVS, AbmVectorEnv, records_list

Record = dict[str, Any]
StepHook = Callable[[list[Record]], None]


@dataclass(frozen=True)
class RolloutContext:
    """What an advantage adjuster may read about the rollout besides its records."""

    last_obs: np.ndarray  # the observation after the rollout's last step (bootstrap state), shape (n_envs, d)
    gamma: float
    gae_lambda: float
    n_envs: int = 1  # records and advantages are step-major: row t * n_envs + k is env k's step t


class AdvantageAdjuster(Protocol):
    """The fair PPO variants' component: rewrites a rollout's advantages (Lag-PPO, A-PPO, ELBERT-PO)."""

    def __call__(self, adv: np.ndarray, rec: dict[str, np.ndarray], ctx: RolloutContext) -> np.ndarray: ...

    def state(self) -> dict[str, Any]: ...

    def bind_learner(self, learner: Any) -> None:
        """Called once the learner is built, before training (``normalize: minibatch`` hooks into
        the learner's update here); nothing to do for an adjuster that only rewrites rollouts."""


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

    @property
    def exploration_rate(self) -> float: ...  # epsilon of an epsilon-greedy behaviour policy (DQN), else 0

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


def quiet_logger():
    """An SB3 logger with no outputs. Left to itself, SB3's ``learn`` configures a logger that
    makes an empty ``SB3-<date>`` folder in the temporary directory on every call; the lenders
    log through the run folder instead (``policy/training.csv``). Logging draws no random numbers."""
    from stable_baselines3.common.logger import Logger

    return Logger(folder=None, output_formats=[])


class SB3Learner(abc.ABC):
    """A ``Learner`` on a Stable-Baselines3 algorithm (one training env, ``MlpPolicy``)."""

    algorithm: ClassVar[type]  # the SB3 class (PPO, DQN)
    on_policy: ClassVar[bool]  # whether advantages can be adjusted
    lean_cls: ClassVar[type | None] = None  # the same algorithm as a lean learner (``backend: lean``)

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

    @property
    def exploration_rate(self) -> float:
        """The behaviour policy's current epsilon (SB3's DQN), 0 for a stochastic policy (PPO)."""
        return float(getattr(self.model, "exploration_rate", 0.0) or 0.0)

    @abc.abstractmethod
    def algorithm_kwargs(self) -> dict[str, Any]:
        """The algorithm's keyword arguments from ``params`` (hyperparameters, network, device)."""

    def build(self, env) -> None:
        self.model = self.algorithm("MlpPolicy", env, seed=self.seed, **self.algorithm_kwargs())
        self.model.set_logger(quiet_logger())

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


# -- choosing the learner: backend and vector settings ------------------------------------------
class ExecutionFields(BaseModel):
    """Which learner a deep lender trains with, on how many worlds (``DeepParams`` inherits these).

    Set in a scenario, they are part of the run's identity: the lean learner is another
    implementation, and K worlds give the learner other data than one (the trajectory changes,
    not only the speed).
    """

    backend: Literal["sb3", "lean"] = Field("sb3", description=(
        "Learner implementation: sb3 (Stable-Baselines3) or lean (ours, policies/deep/lean_*.py, on "
        "K vectorised worlds); the same Table 6-8 hyperparameters."))
    n_envs: int = Field(1, ge=1, le=MAX_ENVS, description=(
        "K: worlds of the scenario stepped side by side while training (backend lean). PPO's n_steps "
        "is the rollout over all K (n_steps / K per world); DQN's train_freq counts decisions."))

    @model_validator(mode="after")
    def _vector_needs_lean(self) -> "ExecutionFields":
        if self.n_envs != 1 and self.backend != "lean":
            raise ValueError(f"n_envs: {self.n_envs} worlds need backend: lean (the sb3 learner trains on one env)")
        return self


def select_learner(lender_cls, params) -> Callable[[Any, int], "Learner"]:
    """The learner class of ``lender_cls`` (a ``DeepLender`` subclass) for ``params.backend``.

    K > 1 worlds are refused for lenders with a fairness component (advantage adjuster or
    Bisimulator): those read one time-ordered stream of decisions (running recall, auxiliary
    GAE, the reward wrapper of one env), which K interleaved worlds are not.
    """
    learner_cls = lender_cls.learner_cls
    if params.backend == "sb3":
        return learner_cls
    lean = learner_cls.lean_cls
    if lean is None:
        raise UserError(f"policy.backend: {lender_cls.name!r} has no lean learner (use backend: sb3)")
    if params.n_envs > 1 and (lender_cls.adjuster_cls is not None or lender_cls.bisimulator_cls is not None):
        raise UserError(f"policy.n_envs: {lender_cls.name} follows one time-ordered stream of decisions "
                        f"(its fairness component) and trains with n_envs: 1, got {params.n_envs}")
    return lean


# -- the lean learners' shared plumbing -----------------------------------------------------------
LEAN_FORMAT = "abm-lean-v1"  # model.zip: "data" (JSON meta) + one .npy member per weight array
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed member dates: the same weights give the same bytes


def vector_records(infos: dict[str, Any]) -> list[Record]:
    """A vector step's decision records as per-decision dicts, for ``on_step`` hooks."""
    return records_list(infos)


class FlatParams:
    """Named weight arrays that are views into one flat float32 vector.

    The lean learners keep every weight of a network in ``flat`` (and its gradient in ``grad``,
    the same layout), so Adam and gradient clipping are a handful of vector operations, and the
    forward and backward passes of the small tanh MLPs are written out in numpy (see the
    learners' files): at these sizes torch's per-operation dispatch and autograd bookkeeping,
    not arithmetic, were the cost (a PPO minibatch step of 64 took as long under torch as SB3's).
    """

    def __init__(self, shapes: dict[str, tuple[int, ...]]):
        self.shapes = dict(shapes)
        sizes = [int(np.prod(s)) for s in self.shapes.values()]
        self.flat = np.zeros(sum(sizes), np.float32)
        self.grad = np.zeros_like(self.flat)
        self.views: dict[str, np.ndarray] = {}
        self.grads: dict[str, np.ndarray] = {}
        start = 0
        for (name, shape), size in zip(self.shapes.items(), sizes):
            self.views[name] = self.flat[start:start + size].reshape(shape)
            self.grads[name] = self.grad[start:start + size].reshape(shape)
            start += size

    def __getitem__(self, name: str) -> np.ndarray:
        return self.views[name]

    def state_dict(self) -> dict[str, np.ndarray]:
        return {name: view.copy() for name, view in self.views.items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        if set(state) != set(self.views):
            raise InvariantError(f"weights {sorted(state)} do not match this network's {sorted(self.views)}")
        for name, arr in state.items():
            if tuple(arr.shape) != self.shapes[name]:
                raise InvariantError(f"{name}: shape {tuple(arr.shape)}, this network has {self.shapes[name]}")
            self.views[name][...] = arr

    def copy_from(self, other: "FlatParams") -> None:
        self.flat[...] = other.flat


def distinct_ids(ids: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values of ``ids`` (all in [0, n)) and each one's position among them:
    ``np.unique(ids, return_inverse=True)`` by marking, without sorting (``np.unique``'s call
    overhead was 5% of a lean PPO minibatch step). Both lean learners group repeated states by it."""
    present = np.zeros(n, bool)
    present[ids] = True
    distinct = np.flatnonzero(present)
    position = np.zeros(n, np.int64)
    position[distinct] = np.arange(len(distinct))
    return distinct, position[ids]


def clip_grad_norm(grad: np.ndarray, max_norm: float) -> float:
    """Rescale ``grad`` in place to global norm <= ``max_norm`` (torch's clip_grad_norm_); returns the norm."""
    norm = float(np.sqrt(np.dot(grad, grad)))
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        grad *= coef
    return norm


class Adam:
    """Adam on a flat float32 vector, torch.optim.Adam's update (no weight decay, no amsgrad)."""

    def __init__(self, params: np.ndarray, lr: float, eps: float, betas: tuple[float, float] = (0.9, 0.999)):
        self.params, self.lr, self.eps = params, float(lr), float(eps)
        self.beta1, self.beta2 = betas
        self.exp_avg = np.zeros_like(params)
        self.exp_avg_sq = np.zeros_like(params)
        self._tmp = np.zeros_like(params)
        self.t = 0

    def step(self, grad: np.ndarray) -> None:
        self.t += 1
        b1, b2, m, v, tmp = self.beta1, self.beta2, self.exp_avg, self.exp_avg_sq, self._tmp
        np.subtract(grad, m, out=tmp)  # m <- lerp(m, g, 1 - b1)
        tmp *= 1.0 - b1
        m += tmp
        v *= b2  # v <- b2 v + (1 - b2) g^2
        np.multiply(grad, grad, out=tmp)
        tmp *= 1.0 - b2
        v += tmp
        np.sqrt(v, out=tmp)  # p <- p - lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)
        tmp *= 1.0 / np.sqrt(1.0 - b2 ** self.t)
        tmp += self.eps
        np.divide(m, tmp, out=tmp)
        tmp *= self.lr / (1.0 - b1 ** self.t)
        self.params -= tmp


def blas_single_thread():
    """A context in which numpy's BLAS uses one thread (the machines' two cores are shared, and a
    two-thread BLAS on tiny matrices only adds contention)."""
    from threadpoolctl import threadpool_limits  # a dependency of scikit-learn, so always present

    return threadpool_limits(limits=1, user_api="blas")


class LeanLearner(abc.ABC):
    """Our own learners' common part: networks built from ``seed``, K worlds around the training
    env, greedy / sampled actions, and a checkpoint of plain arrays (no pickle on load)."""

    algorithm_name: ClassVar[str]
    on_policy: ClassVar[bool]

    def __init__(self, params: BaseModel, seed: int):
        self.params = params
        self.seed = int(seed)
        self.n_envs = int(params.n_envs)
        self.model: FlatParams | None = None  # the network's weights
        self.env = None  # what build() was given: one env (sub-env 0) or a VectorEnv
        self._num_timesteps = 0
        self._obs_dim = 0
        # actions asked for outside training (predict: the Bisimulator's probes) come from their
        # own stream, so probing never shifts the training rollouts' random numbers
        self._predict_rng = np.random.default_rng([self.seed, 1])

    @property
    def ready(self) -> bool:
        return self.model is not None

    @property
    def num_timesteps(self) -> int:
        return self._num_timesteps

    @property
    def device(self) -> str:
        return "cpu"  # numpy

    @property
    def exploration_rate(self) -> float:
        """The behaviour policy's current epsilon (lean DQN overrides), 0 for PPO."""
        return 0.0

    @abc.abstractmethod
    def make_model(self, obs_dim: int) -> FlatParams:
        """The algorithm's networks for ``obs_dim`` inputs, initialised from torch's generator."""

    def build(self, env) -> None:
        """Seed torch from ``seed`` (as SB3 does: the weights' initialisation, and components built
        after the networks draw the same numbers every run) and create the networks."""
        import torch

        from policies.torch_common import set_torch_threads

        set_torch_threads()
        space = env.single_observation_space if isinstance(env, gymnasium.vector.VectorEnv) else env.observation_space
        self._obs_dim = int(np.prod(space.shape))
        torch.manual_seed(self.seed)
        self.model = self.make_model(self._obs_dim)
        self.env = env

    def vector_env(self) -> gymnasium.vector.VectorEnv:
        """The K training worlds: ``env`` itself if it is a VectorEnv (same-step autoreset),
        else ``env`` as sub-env 0 and K - 1 fresh adapters of its scenario."""
        env = self.env
        if env is None:
            raise InvariantError(f"{type(self).__name__}: learn() before build()")
        if isinstance(env, gymnasium.vector.VectorEnv):
            if env.metadata.get("autoreset_mode") != gymnasium.vector.AutoresetMode.SAME_STEP:
                raise UserError(f"{type(self).__name__}: the vector env must autoreset in the same step "
                                "(gymnasium.vector.AutoresetMode.SAME_STEP)")
            if env.num_envs != self.n_envs:
                raise UserError(f"{type(self).__name__}: the vector env has {env.num_envs} worlds, n_envs is {self.n_envs}")
            return env
        return AbmVectorEnv.around(env, self.n_envs)

    def progress_remaining(self, total_timesteps: int) -> float:
        """1 at the start of training, 0 at the end (SB3's convention for schedules)."""
        return max(0.0, 1.0 - self._num_timesteps / float(total_timesteps))

    @abc.abstractmethod
    def act(self, obs: np.ndarray, deterministic: bool, rng: np.random.Generator) -> np.ndarray:
        """Actions for a float32 batch of observations (the behaviour policy unless deterministic)."""

    def predict(self, obs: np.ndarray, deterministic: bool = False):
        """One action for one observation (an int), or an int array for a batch of rows."""
        x = np.asarray(obs, dtype=np.float32)
        a = self.act(x.reshape(-1, self._obs_dim), deterministic, self._predict_rng)
        return int(a[0]) if x.ndim == 1 else a.astype(np.int64)

    # -- checkpoint: model.zip with a JSON "data" member and one .npy per weight array -------
    def meta(self) -> dict[str, Any]:
        return {"format": LEAN_FORMAT, "backend": "lean", "algorithm": self.algorithm_name,
                "num_timesteps": int(self._num_timesteps), "obs_dim": self._obs_dim}

    def save(self, file: Path) -> None:
        with zipfile.ZipFile(file, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(zipfile.ZipInfo("data", _ZIP_DATE), json.dumps(self.meta(), indent=2))
            for name, arr in self.model.state_dict().items():
                buf = io.BytesIO()
                np.save(buf, arr, allow_pickle=False)
                archive.writestr(zipfile.ZipInfo(f"weights/{name}.npy", _ZIP_DATE), buf.getvalue())

    def read_meta(self, file: Path) -> dict[str, Any]:
        """The zip's plain-JSON ``data`` member (raises OSError/ValueError/BadZipFile on a bad file)."""
        with zipfile.ZipFile(file) as archive:
            return json.loads(archive.read("data")) if "data" in archive.namelist() else {}

    def load(self, file: Path, meta: dict[str, Any]) -> None:
        """The weights of ``file`` (after ``build``): plain arrays, shape-checked, never unpickled."""
        if meta.get("format") != LEAN_FORMAT or meta.get("algorithm") != self.algorithm_name:
            raise InvariantError(f"model.zip is not a lean {self.algorithm_name} checkpoint "
                                 f"(backend {meta.get('backend', 'sb3')!r}); train it with this backend")
        with zipfile.ZipFile(file) as archive:
            members = [n for n in archive.namelist() if n.startswith("weights/") and n.endswith(".npy")]
            state = {n[len("weights/"):-len(".npy")]: np.load(io.BytesIO(archive.read(n)), allow_pickle=False)
                     for n in members}
        self.model.load_state_dict(state)
        if isinstance(meta.get("num_timesteps"), int):
            self._num_timesteps = meta["num_timesteps"]
