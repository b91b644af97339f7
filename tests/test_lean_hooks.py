"""The lean PPO's minibatch hook (ELBERT-PO's and A-PPO's ``normalize: minibatch`` on ``backend:
lean``, issue 16): each minibatch's advantages go through the lender's transform with the rows it
would see from SB3's buffer (the rollout's step-major decision records), and the standardisation
switch does what it says."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from abm.build import simulation
from abm.config import load_scenario
from conftest import SCENARIOS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

LENDING = SCENARIOS / "lending-credit.yaml"
BASE = ["population.size=200", "episodes.count=1", "episodes.horizon=512", "outputs.events=false"]
FAST = ["policy.n_steps=256", "policy.batch_size=64", "policy.n_epochs=2", "policy.total_timesteps=512",
        "policy.backend=lean", "policy.normalize=minibatch"]


@pytest.mark.parametrize("name, renormalize", [("elbert_po", False), ("a_ppo", True)])
def test_fair_lenders_take_the_minibatch_hook_on_the_lean_backend(name, renormalize, monkeypatch):
    from policies.deep import lean_ppo

    seen: list[np.ndarray] = []
    original = lean_ppo.ppo_loss

    def spy(net, p, rows, inverse, mb_actions, mb_logprobs, mb_advantages, mb_returns, mb_values, norm_adv=True,
            value=True):
        seen.append((np.asarray(mb_advantages).copy(), norm_adv))
        return original(net, p, rows, inverse, mb_actions, mb_logprobs, mb_advantages, mb_returns, mb_values,
                        norm_adv=norm_adv, value=value)

    monkeypatch.setattr(lean_ppo, "ppo_loss", spy)
    sc = load_scenario(LENDING, BASE + [f"policy.name={name}", *FAST])
    policy = simulation(sc).policy
    learner = policy.learner
    assert type(learner).__name__ == "LeanPPOLearner" and learner.minibatch_hook is not None
    assert learner.minibatch_hook[1] is renormalize
    # 2 rollouts x 2 epochs x 4 minibatches, every one through the hook with the switch as the lender set it
    assert len(seen) == 16 and all(norm is renormalize for _, norm in seen)



def test_lean_minibatch_hook_sees_the_rows_and_switches_standardisation():
    from policies.deep.lean_ppo import LeanPPOLearner
    from policies.deep.ppo import PPOParams

    p = PPOParams(backend="lean", n_steps=128, batch_size=32, n_epochs=3, hidden=8)
    learner = LeanPPOLearner(p, seed=0)
    torch.manual_seed(0)  # the orthogonal initialisation draws from torch's generator
    learner.model = learner.make_model(3)
    from policies.deep.learner import Adam

    learner.optimizer = Adam(learner.model.flat, lr=1e-3, eps=1e-5)
    rng = np.random.default_rng(1)
    n = 128
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    actions = rng.integers(0, 2, n)
    logp = np.full(n, np.log(0.5), np.float32)
    adv = (rng.normal(size=n) * 10 + 3).astype(np.float32)  # far from standardised
    returns, values = rng.normal(size=n).astype(np.float32), np.zeros(n, np.float32)
    rows_seen = []

    def transform(rows, a):
        rows_seen.append(np.asarray(rows).copy())
        np.testing.assert_allclose(a, adv[rows], rtol=1e-6)  # the hook gets the advantages of those rows
        return a

    weights = {}
    for renorm in (True, False):
        torch.manual_seed(0)  # the orthogonal initialisation draws from torch's generator
        learner.model = learner.make_model(3)
        learner.optimizer = Adam(learner.model.flat, lr=1e-3, eps=1e-5)
        learner.rng = np.random.default_rng(5)
        learner.minibatch_hook = (transform, renorm)
        learner.update(obs, actions, logp, adv, returns, values, progress=1.0)
        weights[renorm] = learner.model.flat.copy()
    per_update = rows_seen[: n // 32 * 3]
    assert len(per_update) == 12
    for epoch in range(3):  # each epoch's minibatches partition the rollout's rows
        assert sorted(np.concatenate(per_update[4 * epoch: 4 * epoch + 4]).tolist()) == list(range(n))
    # an identity transform with standardisation on is the plain update; off, another one
    torch.manual_seed(0)  # the orthogonal initialisation draws from torch's generator
    learner.model = learner.make_model(3)
    learner.optimizer = Adam(learner.model.flat, lr=1e-3, eps=1e-5)
    learner.rng = np.random.default_rng(5)
    learner.minibatch_hook = None
    learner.update(obs, actions, logp, adv, returns, values, progress=1.0)
    np.testing.assert_array_equal(learner.model.flat, weights[True])
    assert not np.allclose(weights[False], weights[True])
