"""DQN lender (stable-baselines3) with seed 002 Table 7 hyperparameters as defaults.

Table 7 maps onto SB3's DQN as: learning rate 5e-5 annealed linearly ("Anneal learning rate:
True"), gamma 0.99, batch size 512, target network update rate tau 1 (hard copies) every 10
steps (``target_update_interval=10``), "Update epochs 4" -> 4 gradient steps per update, taken
every 4 decisions (``train_freq=4``, SB3's default). The Q-network has one tanh hidden layer of
256 (D.1). Not in the table, so CleanRL's DQN defaults are used: replay buffer 10,000,
epsilon-greedy from 1 to 0.05 over half of training; learning starts after 1,000 decisions
(CleanRL: 10,000, too large for the short budgets used here). ``policy.backend: lean`` swaps in
``lean_dqn.LeanDQNLearner``: the same algorithm, reading the same ``DQNParams``, on ``policy.n_envs`` worlds.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from pydantic import Field
from stable_baselines3 import DQN

from policies.deep.common import DeepLender, DeepParams, linear_schedule
from policies.deep.lean_dqn import EXPLORATION_INITIAL_EPS, LeanDQNLearner
from policies.deep.learner import SB3Learner
from policies.torch_common import torch_device


class DQNParams(DeepParams):
    """DQN's hyperparameters, read by both learners (``dqn_kwargs`` for SB3, ``LeanDQNLearner``)."""

    learning_rate: float = Field(5e-5, gt=0, le=1.0, description=(
        "Adam step size at the start of training, annealed linearly to 0 (Table 7)."))
    hidden: int = Field(256, ge=1, le=65536, description="Width of the Q-network's single tanh hidden layer (D.1).")
    gamma: float = Field(0.99, gt=0, le=1.0, description="Discount factor.")
    batch_size: int = Field(512, ge=1, le=10**7, description="Replay minibatch size (Table 7).")
    tau: float = Field(1.0, gt=0, le=1.0, description="Target network update rate (1: a hard copy).")
    target_update_interval: int = Field(10, ge=1, le=10**9, description="Decisions between target network updates (Table 7).")
    gradient_steps: int = Field(4, ge=1, le=1000, description="Gradient steps per update (Table 7 'update epochs').")
    train_freq: int = Field(4, ge=1, le=10**6, description="Decisions between updates.")
    buffer_size: int = Field(10_000, ge=1, le=10**8, description="Transitions the replay buffer holds (the oldest are overwritten).")
    learning_starts: int = Field(1_000, ge=0, le=10**9, description=(
        "Decisions taken uniformly at random, and collected, before learning starts."))
    exploration_fraction: float = Field(0.5, gt=0, le=1.0, description="Fraction of training over which epsilon decays linearly from 1.")
    exploration_final_eps: float = Field(0.05, ge=0, le=1.0, description="Epsilon of epsilon-greedy after the decay.")


def dqn_kwargs(p: DQNParams) -> dict:
    return dict(learning_rate=linear_schedule(p.learning_rate), buffer_size=p.buffer_size,
                learning_starts=p.learning_starts, batch_size=p.batch_size, tau=p.tau, gamma=p.gamma,
                train_freq=p.train_freq, gradient_steps=p.gradient_steps,
                target_update_interval=p.target_update_interval, exploration_fraction=p.exploration_fraction,
                exploration_initial_eps=EXPLORATION_INITIAL_EPS, exploration_final_eps=p.exploration_final_eps,
                policy_kwargs=dict(net_arch=[p.hidden], activation_fn=torch.nn.Tanh), device=torch_device(), verbose=0)


class DQNLearner(SB3Learner):
    """SB3's DQN with the Table 7 settings; P(approve) is 1 where Q(s, approve) > Q(s, reject)."""

    algorithm: ClassVar[type] = DQN
    on_policy: ClassVar[bool] = False
    lean_cls: ClassVar[type] = LeanDQNLearner  # backend: lean

    def algorithm_kwargs(self) -> dict:
        return dqn_kwargs(self.params)

    def approve_prob(self, obs: np.ndarray) -> np.ndarray:
        q = self.model.q_net(torch.as_tensor(obs, dtype=torch.float32, device=self.model.device))
        return (q[:, 1] > q[:, 0]).float().cpu().numpy().astype(float)


class DQNLender(DeepLender):
    """DQN (SB3) trained on the scenario's gym adapter; seed 002 Table 7 defaults."""

    name: ClassVar[str] = "dqn"
    Params = DQNParams
    learner_cls = DQNLearner
