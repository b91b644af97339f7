"""Shared machinery of the deep-RL lenders of seed 002: train on the gym adapter, decide in the engine.

How a trained policy fits the ``Policy`` protocol. ``abm run --policy ppo`` builds the policy like
any other; the engine then calls ``policy.prepare(sim)`` once, before its clock starts. A deep policy
trains there, on ``abm.gym.AbmEnv`` of the *same* scenario, with a training seed drawn from the run's
``policy`` stream (so the run stays a function of the scenario seed, and training never replays the
evaluation trajectory), or loads ``model_path``. ``decide`` then maps each observation row to the
trained net's approval probability (``deterministic: true``, the default: its greedy action, 0 or
1). After the run the runner saves the model into the run folder (``policy/model.zip`` +
``policy/config.json``), which ``model_path`` reloads, and what training did: ``policy/training.csv``
(the metrics row of every scenario episode the training worlds finished, ``abm.gym``'s training
history) and, with a Bisimulator, ``policy/bisimulator.csv`` (one row per outer iteration: J_rew
before and after its reward step; in the full variant J_dyn and omega after each dynamics phase). Torch runs on one thread (two shared cores).
``eval_episodes`` > 1 adds evaluation episodes (``evaluate_more``, at the end of this file).

Composition. Every registered deep lender is a ``DeepLender`` whose subclass only names its
``Params`` and picks its components (class attributes, read once in ``__init__``):

* ``learner_cls`` (required): the RL algorithm behind ``policies.deep.learner.Learner``
  (``PPOLearner``, ``DQNLearner``; ``backend: lean``: their ``lean_cls``): networks, training, checkpoint;
* ``adjuster_cls`` (optional, the fair PPO variants): ``for_env(env, params, seed)`` builds an
  ``AdvantageAdjuster`` after the learner's networks; the learner calls it on every rollout
  (``LagrangeMultipliers``, ``RecallGapTracker``, ``BenefitCritic``);
* ``bisimulator_cls`` (optional): ``(params, seed, learner)`` builds a component that wraps the
  training env (``attach``), follows the learner's decisions (``on_step``) and in between runs its
  own optimisation, driving the learner for extra rollouts (``policies.deep.bisimulator.BisimTrainer``);
  it also sets the agent's side of the evaluation world (``configure_world``). Training: ``train``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from abm.errors import InvariantError, UserError
from abm.gym import AbmEnv
from policies.base import Policy
from policies.deep.learner import AdvantageAdjuster, ExecutionFields, Learner, Record, select_learner
from policies.torch_common import set_torch_threads

SEED_BOUND = 2**31 - 1  # SB3 seeds numpy's legacy generator, which takes 32-bit seeds
MODEL_FILE, CONFIG_FILE = "model.zip", "config.json"
TRAINING_FILE, BISIM_FILE = "training.csv", "bisimulator.csv"  # what training did (module docstring)


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """``rows`` as a CSV file (columns in first-seen order); nothing when there are none (a
    loaded model was not trained here)."""
    if rows:
        import pandas as pd

        pd.DataFrame(rows).to_csv(path, index=False)


class DeepParams(ExecutionFields):
    """Parameters every deep lender shares (network and optimiser settings live in subclasses)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    total_timesteps: int = Field(400_000, ge=1, le=10**9,
                                 description="Training decisions (seed 002 D.3: '400 thousands steps of training').")
    deterministic: bool = Field(True, description="Decide with the greedy action (0/1) instead of pi(approve | s).")
    model_path: str | None = Field(None, description="Folder written by save() (a run's policy/): load it instead of training.")
    sim_episodes: int | None = Field(None, ge=1, le=10**6,
                                     description="Scenario episodes per training gym episode (null: the run's episodes.count).")
    eval_episodes: int = Field(1, ge=1, le=100, exclude=True, description=(  # exclude: the model is the same
        "Evaluation episodes (seed 002 §5: 5): the run's trajectory + eval_episodes - 1 more (policy/evaluations.json)."))


class AdjusterFactory(Protocol):
    def for_env(self, env: AbmEnv, params: Any, seed: int) -> AdvantageAdjuster: ...


class TrainingComponent(Protocol):
    """The Bisimulator's slot in a ``DeepLender`` (see the module docstring)."""

    def attach(self, env: AbmEnv): ...

    def on_step(self, records: list[Record]) -> None: ...

    def configure_world(self, world) -> None: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...

    def history_rows(self) -> list[dict[str, Any]]: ...


class DeepLender(Policy):
    """A deep RL lender assembled from a learner and optional fairness components."""

    Params: ClassVar[type[BaseModel]] = DeepParams
    requires = frozenset({"decision_env"})  # trains on the gym adapter (abm.gym)
    saves = True  # the run folder keeps policy/model.zip + policy/config.json
    learner_cls: ClassVar[Callable[[Any, int], Learner]]
    adjuster_cls: ClassVar[AdjusterFactory | None] = None
    bisimulator_cls: ClassVar[Callable[[Any, int, Learner], TrainingComponent] | None] = None

    def __init__(self, params, context, rng: np.random.Generator):
        super().__init__(params, context, rng)
        self.train_seed = int(rng.integers(0, SEED_BOUND))  # the policy stream's only draw
        self.obs_fields = tuple(context.obs_fields)
        self.learner: Learner = select_learner(type(self), params)(params, self.train_seed)  # policy.backend
        self.adjuster: AdvantageAdjuster | None = None  # built with the networks (train or load)
        self.bisimulator: TrainingComponent | None = (
            None if self.bisimulator_cls is None else self.bisimulator_cls(params, self.train_seed, self.learner))
        self.train_env = None  # the env trained on (the Bisimulator's wrapper around the adapter)
        self.training_history: list[dict[str, Any]] = []  # the training worlds' episode rows (abm.gym)

    @property
    def model(self):
        """The learner's underlying algorithm object (the SB3 model), None before ``prepare``."""
        return self.learner.model

    # -- training -------------------------------------------------------------------------
    def prepare(self, sim) -> None:
        """Train (or load) once, then set the agent's side of ``sim.world``; the engine calls
        this before the run's clock starts."""
        if not self.learner.ready:
            set_torch_threads()
            if self.params.model_path:
                self.load(self.params.model_path, sim.scenario)
            else:
                self.train(sim.scenario)
        self.configure_world(sim.world)
        evaluate_more(self, sim)  # eval_episodes > 1: the further evaluation episodes

    def configure_world(self, world) -> None:
        """What the trained agent changes on its side of the world (the Bisimulator's
        observation dynamics). Nothing without a Bisimulator."""
        if self.bisimulator is not None:
            self.bisimulator.configure_world(world)

    def train(self, scenario) -> None:
        """Train on ``scenario``'s gym adapter (its gym episode: ``sim_episodes`` scenario
        episodes). Random numbers are drawn in this order: the adapter's probe simulation, the
        Bisimulator (torch.manual_seed), the learner's networks (SB3 reseeds torch and numpy),
        the adjuster (ELBERT's critic draws from torch), then training."""
        # privileged: the decision records carry the true outcome (A-PPO's and ELBERT-PO's
        # recall-type constraints read it; the policy acts on the observation alone)
        raw = AbmEnv(scenario, sim_episodes=self.params.sim_episodes or scenario.episodes.count, privileged=True)
        self.training_history = raw.history  # the K training worlds share it (AbmVectorEnv.around)
        env = raw if self.bisimulator is None else self.bisimulator.attach(raw)
        self.train_env = env
        self.learner.build(env)
        if self.adjuster_cls is not None:
            self.adjuster = self.adjuster_cls.for_env(raw, self.params, self.train_seed)
            self.adjuster.bind_learner(self.learner)  # normalize: minibatch hooks into the update
        self.learner.learn(self.params.total_timesteps,
                           on_step=None if self.bisimulator is None else self.bisimulator.on_step,
                           adjust_advantages=self.adjuster)

    # -- deciding -------------------------------------------------------------------------
    def _decide(self, obs: np.ndarray, info: Any) -> np.ndarray:
        if not self.learner.ready:
            raise InvariantError(f"policy {self.name!r} has no trained model: prepare(scenario) was not called")
        with torch.no_grad():
            p = self.learner.approve_prob(np.asarray(obs, dtype=np.float32))
        return (p >= 0.5).astype(float) if self.params.deterministic else np.clip(p, 0.0, 1.0)

    # -- persistence ----------------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        """The components' JSON-able state saved beside the weights (multipliers, omega...)."""
        state: dict[str, Any] = {}
        if self.adjuster is not None:
            state.update(self.adjuster.state())
        if self.bisimulator is not None:
            state.update(self.bisimulator.state())
        return state

    def save(self, path: str | Path) -> Path:
        if not self.learner.ready:
            raise InvariantError(f"policy {self.name!r}: nothing to save (not trained)")
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        self.learner.save(folder / MODEL_FILE)
        config = {"policy": self.name, "params": self.params.model_dump(), "obs_fields": list(self.obs_fields),
                  "train_seed": self.train_seed, "extra": self.extra_state()}
        (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2))
        write_evaluations(self, folder)
        write_csv(folder / TRAINING_FILE, self.training_history)
        if self.bisimulator is not None:
            write_csv(folder / BISIM_FILE, self.bisimulator.history_rows())
        return folder

    def load(self, path: str | Path, scenario) -> None:
        """Rebuild the networks for ``scenario`` and load only their weights from ``path``."""
        import zipfile

        folder = Path(path)
        cfg_path, model_file = folder / CONFIG_FILE, folder / MODEL_FILE
        if not cfg_path.is_file() or not model_file.is_file():
            raise UserError(f"policy.model_path: {folder} has no model.zip + config.json (a run's policy/ folder)")
        try:
            config = json.loads(cfg_path.read_text())
            meta = self.learner.read_meta(model_file)
        except (OSError, UnicodeDecodeError, ValueError, zipfile.BadZipFile) as exc:
            raise UserError(f"policy.model_path: {folder}: unreadable model ({type(exc).__name__})") from None
        if not isinstance(config, dict) or not isinstance(meta, dict):
            raise UserError(f"policy.model_path: {folder}: config.json or the model's data is not a mapping")
        if config.get("policy") != self.name:
            raise UserError(f"policy.model_path: {folder} holds a {config.get('policy')!r} model, not {self.name!r}")
        if self.obs_fields and list(self.obs_fields) != config.get("obs_fields"):
            raise UserError(f"policy.model_path: {folder} was trained on observation fields "
                            f"{config.get('obs_fields')}, this scenario has {list(self.obs_fields)}")
        env = AbmEnv(scenario)
        self.learner.build(env)
        if self.adjuster_cls is not None:
            self.adjuster = self.adjuster_cls.for_env(env, self.params, self.train_seed)
        try:
            self.learner.load(model_file, meta)
        except Exception as exc:  # torch/zip/shape errors of a foreign or damaged file
            raise UserError(f"policy.model_path: {folder}: weights do not fit this policy "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
        if self.bisimulator is not None:
            self.bisimulator.load_state(config.get("extra", {}))

    def state(self) -> dict[str, Any]:
        """Facts for summary.json: the training seed, steps trained, the components' state."""
        return {"train_seed": self.train_seed, "trained_timesteps": self.learner.num_timesteps,
                **self.extra_state()}


# SB3 cloudpickles this closure into model.zip's ``data`` by value, code object included: its
# file, qualified name and *line numbers* are part of the checkpoint bytes. The golden digests
# (benchmarks/golden.py) were taken with ``def linear_schedule`` on line 212 of this file, so
# keep it on that line (pad or trim above it; code may follow) until the digests are retaken; a later
# learner of our own should store its schedule as plain numbers instead.
def linear_schedule(initial: float):
    """SB3 schedule annealing the learning rate linearly to 0 (seed 002 Tables 6-7: 'Anneal learning rate')."""
    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial

    return schedule


# -- evaluation episodes (seed 002 §5: "10 seeds and 5 evaluation episodes per seed") ---------------
EVALUATIONS_FILE = "evaluations.json"


def evaluation_seed(scenario_seed: int, k: int) -> int:
    """Root seed of evaluation episode ``k`` >= 1 (episode 0 is the run itself, seeded by the scenario)."""
    return int(np.random.default_rng([int(scenario_seed), 2002, k]).integers(0, 2**63 - 1))


def evaluate_more(lender: DeepLender, sim) -> None:
    """With ``eval_episodes`` = n > 1, run the scenario n - 1 more times with the trained policy
    (each a fresh population and trajectory, ``evaluation_seed``) and keep each run's final row.
    The policy decides as in the run itself (it learns nothing while deciding), so the run's own
    trajectory is unchanged by these."""
    n = lender.params.eval_episodes
    if n <= 1 or getattr(lender, "_evaluating", False) or getattr(lender, "evaluations", None) is not None:
        return
    from abm.build import simulation

    lender._evaluating, rows = True, []
    try:
        for k in range(1, n):
            seed = evaluation_seed(sim.scenario.seed, k)
            extra = simulation(sim.scenario.model_copy(update={"seed": seed}), lender, log_events=False)
            extra.run()
            rows.append({"evaluation": k, "seed": seed, **extra.episode_rows[-1]})
    finally:
        lender._evaluating = False
    lender.evaluations = rows


def write_evaluations(lender: DeepLender, folder: Path) -> None:
    rows = getattr(lender, "evaluations", None)
    if rows:
        clean = [{k: (None if isinstance(v, float) and not np.isfinite(v) else
                      v.item() if isinstance(v, np.generic) else v) for k, v in row.items()} for row in rows]
        (folder / EVALUATIONS_FILE).write_text(json.dumps(clean, indent=2))
