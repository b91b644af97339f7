"""PPO lender (stable-baselines3) with seed 002 Table 6 hyperparameters as defaults.

Seed 002 D.1: "The actor and critic have MLP networks with the Tanh activation function and one
hidden layer with dimension of 256." Table 6 maps onto SB3's PPO as: batch size 512 ->
``n_steps=512`` (one env), mini batch 64 -> ``batch_size=64``, policy update epochs 5 ->
``n_epochs=5``, clip 0.2, entropy 0.01, value 0.5, max grad norm 0.5, "Clip value function loss:
True" -> ``clip_range_vf`` = the surrogate clip (CleanRL clips the value loss with the same
coefficient), "Anneal learning rate: True" -> a linear schedule from 5e-5 to 0.

``PPOLearner`` is the learner component (also of Lag-PPO, A-PPO, ELBERT-PO and the Bisimulator's
PPO variant); ``PPOLender`` is the plain lender. ``policy.backend: lean`` swaps in
``lean_ppo.LeanPPOLearner``: the same algorithm, reading the same ``PPOParams``, on ``policy.n_envs`` worlds.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from stable_baselines3 import PPO

from policies.deep.common import DeepLender, linear_schedule
from policies.deep.lean_ppo import LeanPPOLearner
from policies.deep.learner import SB3Learner
from policies.deep.params import PPOParams
from policies.torch_common import torch_device


def ppo_kwargs(p: PPOParams) -> dict[str, Any]:
    return dict(learning_rate=linear_schedule(p.learning_rate), n_steps=p.n_steps, batch_size=p.batch_size,
                n_epochs=p.n_epochs, gamma=p.gamma, gae_lambda=p.gae_lambda, clip_range=p.clip_range,
                clip_range_vf=p.clip_range, ent_coef=p.ent_coef, vf_coef=p.vf_coef,
                max_grad_norm=p.max_grad_norm, normalize_advantage=True,
                policy_kwargs=dict(net_arch=dict(pi=[p.hidden], vf=[p.hidden]), activation_fn=torch.nn.Tanh),
                device=torch_device(), verbose=0)


class PPOLearner(SB3Learner):
    """SB3's PPO with the Table 6 settings; P(approve) is the actor's probability of action 1."""

    algorithm: ClassVar[type] = PPO
    on_policy: ClassVar[bool] = True
    lean_cls: ClassVar[type] = LeanPPOLearner  # backend: lean

    def algorithm_kwargs(self) -> dict[str, Any]:
        return ppo_kwargs(self.params)

    def approve_prob(self, obs: np.ndarray) -> np.ndarray:
        obs_t = torch.as_tensor(obs, dtype=torch.float32, device=self.model.device)
        dist = self.model.policy.get_distribution(obs_t)
        return dist.distribution.probs[:, 1].cpu().numpy().astype(float)


class PPOLender(DeepLender):
    """PPO (SB3) trained on the scenario's gym adapter; seed 002 Table 6 defaults."""

    name: ClassVar[str] = "ppo"
    Params = PPOParams
    learner_cls = PPOLearner
