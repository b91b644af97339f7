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
from stable_baselines3 import DQN

from policies.deep.common import DeepLender, linear_schedule
from policies.deep.lean_dqn import EXPLORATION_INITIAL_EPS, LeanDQNLearner
from policies.deep.learner import SB3Learner
from policies.deep.params import DQNParams
from policies.torch_common import torch_device


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
