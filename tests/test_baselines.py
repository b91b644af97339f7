"""Threshold and classifier baselines (policies/baselines.py): exact threshold maths on a
hand-made context, and their fairness behaviour on fixed-seed runs of the score families."""

from __future__ import annotations

import numpy as np
import pytest

from abm.config import load_scenario
from abm.errors import UserError
from abm.families.steps import RewardTable, ThresholdContext
from abm.runner import execute
from conftest import SCENARIOS
from abm.registry import POLICIES, build, get

P = np.array([0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])
COUNTS = [np.array([0, 10, 10, 20, 30, 30, 0]), np.array([10, 10, 20, 30, 30, 0, 0])]


def context(rewards=RewardTable(1.0, -1.0)):
    def score_counts():
        out = []
        for c in COUNTS:
            keep = c > 0
            out.append((np.arange(1, 8, dtype=float)[keep], c[keep]))
        return out

    return ThresholdContext(("credit_score", "group", "repay_ratio", "default_ratio"), ("G1", "G2"),
                            "credit_score", lambda s, g: np.interp(s, np.arange(1, 8), P), rewards,
                            score_counts, family="credit_score")


def make(name, **params):
    cfg = type("Cfg", (), {"name": name, "params": params})()
    return build(cfg, context(), np.random.default_rng(0))


def expected_rates(policy, weight):
    """Per group: the expected rate sum_s a(s) w(s) / sum_s w(s) and expected reward."""
    rates, reward = [], 0.0
    for g, c in enumerate(COUNTS):
        s = np.arange(1, 8, dtype=float)
        obs = np.column_stack([s, np.full(7, g), np.zeros(7), np.zeros(7)])
        a = policy.decide(obs)
        w = c * (P if weight == "good" else 1.0)
        rates.append(float(a @ w / w.sum()))
        reward += float(a @ (c * (2 * P - 1)))
    return np.array(rates), reward


def test_max_util_approves_exactly_the_profitable_scores():
    policy = make("max_util")
    obs = np.column_stack([np.arange(1, 8), np.zeros(7), np.zeros(7), np.zeros(7)])
    assert policy.decide(obs).tolist() == [0, 0, 0, 1, 1, 1, 1]  # 2p - 1 > 0 iff p > 0.5 (score 3 breaks even)


@pytest.mark.parametrize("name, weight", [("eo_threshold", "good"), ("dp_threshold", "all")])
def test_group_thresholds_equalise_the_rate_and_maximise_reward(name, weight):
    policy = make(name)
    rates, reward = expected_rates(policy, weight)
    assert rates[0] == pytest.approx(rates[1], abs=1e-12)
    assert rates[0] == pytest.approx(policy.rate)
    # brute force: the best common rate on a fine grid never beats the breakpoint optimum
    best = -np.inf
    for tau in np.linspace(0, 1, 401):
        fixed = make(name, target=float(tau))
        r, value = expected_rates(fixed, weight)
        assert r[0] == pytest.approx(tau, abs=1e-9) and r[1] == pytest.approx(tau, abs=1e-9)
        best = max(best, value)
    assert reward >= best - 1e-9
    if name == "eo_threshold":  # here equal TPRs need a coin on G2's boundary score
        assert policy.thresholds.tolist() == [4.0, 3.0] and 0 < policy.boundary[1] < 1


def test_single_threshold_is_the_best_group_blind_cut():
    policy = make("single_threshold")
    assert policy.threshold == 4.0
    assert make("single_threshold", threshold=6).decide(
        np.array([[5.0, 0, 0, 0], [6.0, 1, 0, 0]])).tolist() == [0.0, 1.0]


def test_registry_keeps_eutopia_rules_and_adds_the_baselines():
    for name in ("max_util", "eo_threshold", "dp_threshold", "single_threshold", "classifier"):
        assert POLICIES[name].startswith("policies.baselines:")
    assert get("equal_opportunity").__module__ == "policies.heuristics"
    assert get("demographic_parity").__module__ == "policies.heuristics"


def test_score_baselines_refuse_eutopia_and_eutopia_rules_refuse_score_families(eutopia_small):
    from abm.build import simulation

    with pytest.raises(UserError, match="'eo_threshold' does not apply to family 'eutopia': it needs a known score curve"):
        simulation(eutopia_small("policy.name=eo_threshold"))  # refused when the scenario is validated
    with pytest.raises(UserError, match="use 'dp_threshold'"):
        load_scenario(SCENARIOS / "fico-delayed-impact.yaml", policy="demographic_parity")


def run(name: str, policy: str, *overrides: str):
    sc = load_scenario(SCENARIOS / f"{name}.yaml", ["outputs.events=false", *overrides], policy=policy)
    return execute(sc)[1].iloc[-1]


def test_equal_opportunity_equalises_recall_and_max_util_does_not():
    """Seed 002's horizon (10,000 steps, seed 0): EO's recall gap within 0.04 (sampling noise of
    two recalls on ~3,000 repayers each is about 0.01), max_util's above 0.1."""
    eo = run("lending-credit", "eo_threshold")
    mu = run("lending-credit", "max_util")
    assert eo["recall_gap"] < 0.04
    assert mu["recall_gap"] > 0.1
    assert mu["recall_G1"] > mu["recall_G2"]  # the disadvantaged group is the one left out
    assert eo["cumulative_loans_G2"] > mu["cumulative_loans_G2"]


def test_classifier_learns_after_burn_in_and_freezes():
    sc = load_scenario(SCENARIOS / "lending-credit.yaml",
                       ["episodes.count=2", "policy.name=classifier", "policy.burn_in=500"])
    sim, episodes, _ = execute(sc)
    pol = sim.policy
    # fitted right after the 500th decision, before its outcome: 499 outcomes, then frozen
    assert pol.fits == 1 and pol.decisions == 2000 and pol.state()["outcomes_seen"] == 499
    low = np.array([[1.0, 1, 0, 0], [2.0, 0, 0, 0]])
    high = np.array([[7.0, 0, 1, 0], [6.0, 1, 1, 0]])
    assert pol.decide(low).tolist() == [0.0, 0.0] and pol.decide(high).tolist() == [1.0, 1.0]


def test_classifier_retrain_refits_each_episode():
    sc = load_scenario(SCENARIOS / "lending-credit.yaml", ["episodes.count=3", "episodes.horizon=300",
                                                           "policy.name=classifier", "policy.burn_in=100",
                                                           "policy.mode=retrain"])
    pol = execute(sc)[0].policy
    assert pol.fits == 1 + 3  # once after the burn-in, then at each of the 3 episode ends


@pytest.mark.slow
def test_fico_equal_opportunity_equalises_recall_and_max_util_does_not():
    eo = run("fico-delayed-impact", "eo_threshold")
    mu = run("fico-delayed-impact", "max_util")
    assert eo["recall_gap"] < 0.05
    assert mu["recall_gap"] > 0.2
