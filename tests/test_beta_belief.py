"""The beta_belief family (seed 001's loan MDP on the engine) and the fair-MDP policies.

Agreement tests compare a run's pooled simulated estimates with the exact evaluation of the
policy it used: |simulated - exact| <= 4 standard errors (two-sided; under the CLT a correct
simulator fails one such check with probability ~6e-5), on fixed seeds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from abm.config import load_scenario
from abm.errors import UserError
from abm.families.loan_mdp.mdp import presimulated_distribution

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "beta-belief-loans.yaml"
# the setting before issue 18 (CEM_loan.py's gamma 0.5, T = (1, 5)): tests that pin its numbers read it
CEM = ROOT / "scenarios" / "beta-belief-loans-cem.yaml"
SMALL = ("episodes.horizon=6", "episodes.count=2", "population.size=200", "outputs.events=true")


def scenario(*overrides, policy=None, path=SCENARIO):
    return load_scenario(path, list(overrides), policy=policy)


def simulate(sc):
    from abm.runner import execute

    return execute(sc)


def test_entry_distribution_is_the_presimulated_beta_binomial():
    from abm.families.beta_belief import population_table

    sc = scenario("population.size=20000")
    table = population_table(sc, np.random.default_rng(3))
    params = sc.mdp_params()
    share = (table["group"] == "majority").mean()
    assert abs(share - params.majority_share) <= 1 / len(table)  # stratified allocation
    for z, name in enumerate(("minority", "majority")):
        part = table[table["group"] == name]
        steps = params.presimulation_steps[z]
        expected = presimulated_distribution(params.prior_alpha[z], params.prior_beta[z], steps)
        observed = np.bincount(part["repayments"], minlength=steps + 1) / len(part)
        se = np.sqrt(expected * (1 - expected) / len(part))
        assert np.all(np.abs(observed - expected) <= 4 * se + 1e-12)
        assert np.all(part["repayments"] + part["defaults"] == steps)
        assert np.array_equal(part["qualified"], part["repay_belief"] >= params.qualified_threshold)


def test_transitions_accept_and_reject():
    sim, episodes, events = simulate(scenario("episodes.horizon=1", "episodes.count=1", "population.size=20000",
                                              "outputs.events=false", policy="approve_all"))
    w, p = sim.world, sim.world.params
    agents = w.agents_table()
    # one decision each, all accepted: repaid with probability alpha / (alpha + beta) at entry
    z = w.cols["group"].astype(int)
    steps = np.asarray(p.presimulation_steps)[z]
    assert np.all(agents["offers"] == 1) and np.all(agents["rejections"] == 0)
    assert np.all(agents["repayments"] + agents["defaults"] == steps + 1)
    repaid_now = (agents["final_belief"] > agents["initial_belief"]).to_numpy()  # the belief mean rose
    k = agents["repayments"].to_numpy() - repaid_now                               # entry state
    for g in (0, 1):
        for kk in np.unique(k[z == g]):
            sel = (z == g) & (k == kk)
            if sel.sum() < 300:
                continue
            prob = (p.prior_alpha[g] + kk) / (p.prior_alpha[g] + p.prior_beta[g] + steps[sel][0])
            assert abs(repaid_now[sel].mean() - prob) <= 4 * np.sqrt(prob * (1 - prob) / sel.sum())
    # the first cohort's cash ledger: I P per repayment, -P per default
    assert w.profit_total == pytest.approx(p.interest * repaid_now.sum() - (~repaid_now).sum())

    sim, _, _ = simulate(scenario("episodes.horizon=7", "episodes.count=1", "population.size=50", policy="reject_all"))
    agents = sim.world.agents_table()
    z = sim.world.cols["group"].astype(int)
    assert np.all(agents["rejections"] == 7) and np.all(agents["offers"] == 0)
    expected_beta = np.asarray(p.prior_beta)[z] + agents["defaults"] + 0.1 * 7
    assert np.allclose(agents["beta"], expected_beta, rtol=0, atol=1e-12)
    assert sim.world.exact["exact_reward"] == 0.0 and np.all(agents["discounted_offers"] == 0)


@pytest.mark.parametrize("policy, extra", [
    ("fair_lp", ("policy.constraint=dp", "policy.epsilon=0.1")),
    ("race_blind", ()),
])
def test_simulated_agrees_with_exact(policy, extra):
    sim, episodes, _ = simulate(scenario("episodes.horizon=10", "episodes.count=4", "population.size=3000",
                                         *extra, policy=policy, path=CEM))
    head = sim.world.headline_summary()
    for key in ("reward", "dp_gap", "eo_gap"):
        exact, simulated, se = head[f"exact_{key}"], head[f"sim_{key}"], head[f"sim_{key}_se"]
        assert se > 0
        assert abs(simulated - exact) <= 4 * se, (key, exact, simulated, se)
    if policy == "fair_lp":
        assert head["exact_dp_gap"] == pytest.approx(0.1, abs=1e-7)  # binding at horizon 10
    else:
        assert head["exact_dp_gap"] > 0.5                           # the unconstrained gap
    # the per-episode estimates average to the pooled one (equal cohorts)
    assert episodes["dp_gap"].mean() == pytest.approx(head["sim_dp_gap"], abs=1e-9)


def test_policy_decisions_equal_the_solved_table():
    from abm.build import simulation

    sim = simulation(scenario(*SMALL, "policy.constraint=eo", policy="fair_lp"))
    table = sim.world.policy_table()
    live = ~sim.world.mdp.terminal
    assert np.array_equal(table[live], sim.policy.table[live])
    row = sim.run_episode()
    from abm.families.loan_mdp.evaluate import evaluate_policy
    assert row["exact_eo_gap"] == pytest.approx(evaluate_policy(sim.world.mdp, sim.policy.table).eo_gap, abs=1e-12)
    assert abs(row["exact_eo_gap"]) <= 0.1 + 1e-7


POLICIES = [
    ("fair_lp", ("policy.constraint=none",)),
    ("fair_cce", ("policy.iterations=2", "policy.samples=8")),
    ("fair_cce", ("policy.evaluator=rollout", "policy.iterations=1", "policy.samples=3",
                  "policy.rollout_applicants=40")),
    ("optimistic", ("policy.constraint=eo",)),
    ("conservative", ("policy.per_group=true",)),
    ("race_blind", ()),
    ("unconstrained", ()),
    ("explore_then_commit", ("policy.explore_episodes=1",)),
    ("random", ()),
]


@pytest.mark.parametrize("policy, extra", POLICIES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(POLICIES)])
def test_registered_policies_run_into_folders(tmp_path, policy, extra):
    from abm.runner import run_to_folder

    folder, _ = run_to_folder(scenario(*SMALL, *extra, policy=policy), tmp_path)
    summary = json.loads((folder / "summary.json").read_text())
    for key in ("exact_reward", "exact_dp_gap", "exact_eo_gap", "sim_reward", "sim_dp_gap", "sim_eo_gap"):
        assert key in summary and key in summary["final"]
    assert summary["invariants"] == "passed"
    if policy == "explore_then_commit":
        assert summary["policy_state"]["committed"] and summary["policy_state"]["observed_transitions"] > 0
        assert summary["world"]["pooled_from_episode"] == 1  # only the committed cohort is pooled
    if policy == "fair_cce":
        assert len(summary["policy_state"]["theta"]) == 4


def test_abm_run_cli_writes_exact_and_simulated(cli, tmp_path):
    out = cli("run", str(SCENARIO), "--policy", "fair_lp", "--set", "policy.constraint=dp", "--set",
              "policy.epsilon=0.1", "--set", "episodes.horizon=8", "--set", "episodes.count=2", "--set",
              "population.size=300", "--out", str(tmp_path), "--quiet")
    assert out.returncode == 0, out.stderr
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert abs(summary["exact_dp_gap"]) <= 0.1 + 1e-7
    assert abs(summary["sim_reward"] - summary["exact_reward"]) <= 4 * summary["sim_reward_se"]
    bad = cli("run", str(SCENARIO), "--policy", "max_util", "--out", str(tmp_path))
    assert bad.returncode == 2 and "does not apply to family 'beta_belief'" in bad.stderr


def test_bad_configurations_are_one_line_errors():
    with pytest.raises(UserError, match="review: batch"):
        scenario("episodes.review=immediate")
    with pytest.raises(UserError, match="whole number"):
        scenario("episodes.horizon=2.5")
    with pytest.raises(UserError, match="leave them out"):
        scenario("population.prior_source=fico")  # the file sets the priors explicitly
    with pytest.raises(UserError, match="constraint"):
        scenario("policy.constraint=xx")


def test_fair_policy_outside_its_family_is_refused(eutopia_small):
    from abm.build import simulation

    with pytest.raises(UserError, match="beta_belief"):
        simulation(eutopia_small("policy.name=race_blind"))


def test_fico_fitted_priors():
    from abm.data import FICO_FILES, locate
    from abm.families.beta_belief import fit_fico_priors

    try:
        locate("fico", FICO_FILES)
    except UserError as exc:
        pytest.skip(str(exc))
    alpha, beta, share = fit_fico_priors()
    # method of moments on 1 - default rate over TransRisk scores (see docs/MODEL.md)
    assert alpha == pytest.approx([0.4244, 0.6534], abs=1e-3)
    assert beta == pytest.approx([0.4065, 0.2078], abs=1e-3)
    assert share == pytest.approx(133165 / (133165 + 18274 + 14702 + 7906))


def test_rollout_evaluator_estimates_the_exact_value():
    from abm.families.loan_mdp.mdp import build_loan_mdp
    from policies.fair_mdp.cce import ExactEvaluator, loan_features
    from policies.fair_mdp.rollout import RolloutEvaluator

    sc = scenario("episodes.horizon=10", path=CEM)
    mdp = build_loan_mdp(sc.mdp_params())
    theta = np.array([20.0, 0.5, 0.3, -16.0])  # accept roughly when the belief mean exceeds 0.8
    exact = ExactEvaluator(mdp, "dp", loan_features(mdp))(theta)
    rollout = RolloutEvaluator(sc, "dp", 6000, np.random.default_rng(5))
    estimates = np.array([rollout(theta) for _ in range(2)])
    # per-applicant sd of X_R is ~0.06 and of the offer rate ~0.4: 4 SE at 6000 applicants
    assert abs(estimates[:, 0].mean() - exact[0]) <= 4 * 0.06 / np.sqrt(12000)
    assert abs(estimates[:, 1].mean() - exact[1]) <= 4 * 0.4 * np.sqrt(1 / 3500 + 1 / 8500)


def test_fig1_study_validates():
    from abm.study import load_study

    study = load_study(ROOT / "scenarios" / "studies" / "fig1.yaml")
    assert len(study.runs) == 18
    labels = {r.columns["policy"] for r in study.runs}
    assert {"race_blind", "fair_lp(constraint=dp)", "fair_cce(constraint=eo)", "conservative(constraint=eo)"} <= labels


@pytest.mark.slow
def test_full_size_agreement_at_reference_defaults():
    sim, _, _ = simulate(scenario("episodes.count=5", "population.size=4000", "policy.constraint=eo"))
    head = sim.world.headline_summary()
    for key in ("reward", "dp_gap", "eo_gap"):
        assert abs(head[f"sim_{key}"] - head[f"exact_{key}"]) <= 4 * head[f"sim_{key}_se"]


def test_fig1_table_from_a_study_folder(tmp_path):
    import pandas as pd

    from abm.reports.seed001 import tables

    values = {"race_blind": (0.08, 0.27), "optimistic": (0.079, 0.26), "fair_cce": (0.07, 0.095),
              "fair_lp": (0.077, 0.1), "conservative": (0.0, 0.0)}
    rows = []
    for name, (reward, gap) in values.items():
        for constraint in (None,) if name == "race_blind" else ("dp", "eo"):
            label = name if constraint is None else f"{name}(constraint={constraint})"
            for episode in (0, 1):
                rows.append({"run_id": label, "policy": label, "episode": episode, "bank.gamma": 0.8,
                             "exact_reward": reward, "exact_discounted_return": reward / 0.2,
                             "exact_dp_gap": gap, "exact_eo_gap": -gap, "sim_reward": reward, "sim_reward_se": 0.001,
                             "sim_dp_gap": gap, "sim_dp_gap_se": 0.01, "sim_eo_gap": -gap, "sim_eo_gap_se": 0.01})
    pd.DataFrame(rows).to_parquet(tmp_path / "study.parquet")
    text = tables(tmp_path)
    assert text.count("| race-blind | 0.080000 |") == 2 and "| 0.2700 |" in text
    assert text.count("- holds:") == 14 and "FAILS" not in text
