"""Deep RL lenders of seed 002 on the gym adapter: PPO, DQN (stable-baselines3), the fair PPO
variants Lag-PPO, A-PPO and ELBERT-PO, and the Bisimulator. One module per algorithm; torch is
imported only when one of them is used.

Each lender is a ``common.DeepLender`` assembled from components: a learner (``learner.py``:
``ppo.PPOLearner``, ``dqn.DQNLearner``), optionally an advantage adjuster (``LagrangeMultipliers``,
``RecallGapTracker``, ``BenefitCritic``) and optionally the Bisimulator's outer loop
(``bisimulator.BisimTrainer``)."""
