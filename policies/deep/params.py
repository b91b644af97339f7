"""The deep algorithms' hyperparameters, declared once: both learners of an algorithm read them
(PPO: ``ppo.ppo_kwargs`` for Stable-Baselines3 and ``lean_ppo.LeanPPOLearner``; DQN: ``dqn.dqn_kwargs``
and ``lean_dqn.LeanDQNLearner``). Defaults: seed 002 Tables 6 and 7 (the algorithms' modules say how
each maps onto SB3)."""

from __future__ import annotations

from pydantic import Field

from policies.deep.common import DeepParams


class PPOParams(DeepParams):
    """PPO's hyperparameters, read by both learners (``ppo_kwargs`` for SB3, ``LeanPPOLearner``)."""

    learning_rate: float = Field(5e-5, gt=0, le=1.0, description=(
        "Adam step size at the start of training, annealed linearly to 0 (Table 6: 'Anneal learning rate')."))
    hidden: int = Field(256, ge=1, le=65536, description="Width of the single tanh hidden layer of the actor and of the critic (D.1).")
    gamma: float = Field(0.99, gt=0, le=1.0, description="Discount factor.")
    gae_lambda: float = Field(0.95, ge=0, le=1.0, description="lambda of generalised advantage estimation (GAE).")
    n_steps: int = Field(512, ge=2, le=10**7, description=(
        "Decisions per rollout, one update each (Table 6 'batch size'); backend lean: over all n_envs worlds, "
        "n_steps / n_envs each (a multiple of n_envs)."))
    batch_size: int = Field(64, ge=2, le=10**7, description="Minibatch size of the update (Table 6 'mini batch').")
    n_epochs: int = Field(5, ge=1, le=1000, description="Passes over the rollout per update (Table 6 'policy update epochs').")
    clip_range: float = Field(0.2, gt=0, le=10.0, description=(
        "Surrogate clipping coefficient; also clips the value update around the rollout's values (Table 6 "
        "'clip value function loss')."))
    ent_coef: float = Field(0.01, ge=0, le=10.0, description="Weight of the entropy bonus.")
    vf_coef: float = Field(0.5, ge=0, le=10.0, description="Weight of the value loss.")
    max_grad_norm: float = Field(0.5, gt=0, le=1e6, description="Gradients are rescaled to at most this global norm.")


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
