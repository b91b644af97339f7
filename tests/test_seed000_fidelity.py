"""Seed 000 fidelity options (issue 18): the bank's revenue reading and the continuous refit.

* ``population.revenue``: the seed books a repaid loan as "+(1 + tau_interest) l_i" (revenue)
  in one place and "tau_interest . l_i" (profit) in another. Either reading changes the bank's
  ledger only: for a policy that does not read profit, every decision, arrival and borrower's
  wealth is the same for a fixed seed, and the ledger check follows the reading.
* ``dynamics.refit: prior`` (the default): a MAP fit around the published model, continuous in
  the decisions (approving 99% and 100% publish nearly the same model; ``keep_single_class``,
  the default before, jumps).
* Run identity: ``revenue`` leaves the dump at its default, ``refit`` at its old default
  (keep_single_class), so an old run folder's name still means what it computed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from abm.config import RUN_ID, config_hash, load_scenario, scenario_to_dict
from abm.errors import InvariantError
from abm.families import eutopia, loanly
from abm.runner import execute

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
PPI = "population.revenue=principal_plus_interest"


# -- the revenue reading ------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [("policy.name=random", "policy.p=0.7"), ("policy.name=oracle",),
                                    ("policy.name=demographic_parity",)])
def test_revenue_reading_changes_only_the_bank_ledger(eutopia_small, policy):
    sim_a, ep_a, ev_a = execute(eutopia_small(*policy))
    sim_b, ep_b, ev_b = execute(eutopia_small(*policy, PPI))  # execute runs the ledger check too
    ca, cb = sim_a.world.cols, sim_b.world.cols
    # borrowers: identical trajectories, decisions and wealth
    assert np.array_equal(ca["wealth"], cb["wealth"])
    for key in ("applications", "approvals", "repayments", "defaults"):
        assert np.array_equal(ca[key], cb[key])
    pd.testing.assert_frame_equal(ev_a, ev_b)  # every event, its time and amount
    same = [c for c in ep_a.columns if "profit" not in c]
    pd.testing.assert_frame_equal(ep_a[same], ep_b[same])
    # the bank: + the repaid principal, per episode and in total
    principal = float(np.sum(ca["repayments"] * ca["loan_amount"]))
    assert principal > 0
    assert sim_b.world.profit_total == pytest.approx(sim_a.world.profit_total + principal, rel=1e-12)
    repaid = ev_a[ev_a["kind"] == "repay"].groupby("episode")["amount"].sum()
    gain = (ep_b["profit"] - ep_a["profit"]).to_numpy()
    assert np.allclose(gain, repaid.reindex(range(len(ep_a)), fill_value=0.0).to_numpy(), rtol=1e-12, atol=1e-9)
    # the ledger check reads the scenario's reading (and refuses the other one)
    assert eutopia.ledger_profit(ev_b, 1.15) == pytest.approx(sim_b.world.profit_total, abs=1e-6)
    sim_b.world.ledger_check(ev_b, ep_b)
    sim_b.world.check_invariants()
    sim_b.world.profit_total = sim_a.world.profit_total
    with pytest.raises(InvariantError, match="event ledger"):
        sim_b.world.ledger_check(ev_b, ep_b)


def test_revenue_reading_sets_the_break_even(eutopia_small):
    """A lender's per-$ repayment return (``LoanlyContext.tau_interest``) follows the reading, so
    the one-step predictor's break-even is 1/(1 + 0.15) under interest and 1/(2 + 0.15) under the
    seed's revenue."""
    from abm.build import simulation

    for extra, rate, threshold in (((), 0.15, 1 / 1.15), ((PPI,), 1.15, 1 / 2.15)):
        sc = eutopia_small("policy.name=one_step", *extra)
        assert sc.population.repay_rate == pytest.approx(rate)
        sim = simulation(sc)
        assert sim.world.policy_context().tau_interest == pytest.approx(rate)
        assert sim.policy.threshold == pytest.approx(threshold)


def test_old_readings_keep_their_run_id_and_the_new_default_is_written(eutopia_small):
    """revenue: interest and refit: keep_single_class (the refit's older reading) leave the run
    id, as they did when keep_single_class was the default; the scenario's dump writes the refit
    out (a run folder's scenario.yaml reloads as what it ran) and the default refit enters the id."""
    old = eutopia_small("dynamics.refit=keep_single_class")
    written = eutopia_small("population.revenue=interest", "dynamics.refit=keep_single_class",
                            "dynamics.refit_prior=1.0")
    run_id = json.loads(old.model_dump_json(context=RUN_ID))
    assert "revenue" not in run_id["population"]
    assert "refit" not in run_id["dynamics"] and "refit_prior" not in run_id["dynamics"]
    assert scenario_to_dict(old)["dynamics"]["refit"] == "keep_single_class"
    assert config_hash(old) == config_hash(written)
    default = json.loads(eutopia_small().model_dump_json(context=RUN_ID))
    assert default["dynamics"]["refit"] == "prior" and "refit_prior" not in default["dynamics"]
    other = eutopia_small(PPI, "dynamics.refit=prior", "dynamics.refit_prior=2.0")
    data = scenario_to_dict(other)
    assert data["population"]["revenue"] == "principal_plus_interest"
    assert data["dynamics"]["refit"] == "prior" and data["dynamics"]["refit_prior"] == 2.0
    assert len({config_hash(other), config_hash(old), config_hash(eutopia_small())}) == 3


# -- the continuous refit -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def population():
    sc = load_scenario(SCENARIOS / "eutopia.yaml")
    frame, model = loanly.generate(sc.population, np.random.default_rng(0))
    return frame["wealth"].to_numpy(), frame["group"].to_numpy(), model


@pytest.mark.parametrize("n", [100, 1000, 3000])
def test_prior_refit_is_continuous_in_the_approval_share(population, n):
    """Approving 99% vs 100% of n applicants: the prior refit publishes nearly the same model
    (tolerance: the published scores sigma(h_theta) of all 6,000 applicants differ by at most
    0.05, their mean by at most 0.015); keep_single_class jumps (mean score 0.99 vs LOANLY's
    0.13, since an all-approve episode keeps the initial model)."""
    wealth, group, model = population
    rng = np.random.default_rng(n)
    idx = rng.choice(len(wealth), n, replace=False)
    w, g = wealth[idx], group[idx]
    all_yes = np.ones(n, dtype=bool)
    most = all_yes.copy()
    most[rng.choice(n, max(1, n // 100), replace=False)] = False
    a = loanly.fit_approval_model_prior(w, g, all_yes, model, 1.0).prob(wealth, group)
    b = loanly.fit_approval_model_prior(w, g, most, model, 1.0).prob(wealth, group)
    assert np.max(np.abs(a - b)) <= 0.05
    assert abs(a.mean() - b.mean()) <= 0.015
    # keep_single_class: 100% keeps LOANLY's model, 99% publishes ~0.99 for everyone
    assert loanly.fit_approval_model(w, g, all_yes, model.wealth_mean, model.wealth_std) is None
    old = loanly.fit_approval_model(w, g, most, model.wealth_mean, model.wealth_std).prob(wealth, group)
    assert old.mean() - model.prob(wealth, group).mean() > 0.5


def test_prior_refit_is_the_map_estimate(population):
    """The fit's gradient vanishes (it is the minimiser), a huge precision keeps the prior, and a
    single-class episode moves the model towards that class."""
    wealth, group, model = population
    rng = np.random.default_rng(7)
    idx = rng.choice(len(wealth), 400, replace=False)
    w, g = wealth[idx], group[idx]
    y = rng.random(400) < 0.6
    fit = loanly.fit_approval_model_prior(w, g, y, model, 1.0)
    x = np.column_stack([g, (w - model.wealth_mean) / model.wealth_std, np.ones(400)])
    theta = np.array([fit.theta_g, fit.theta_x, fit.bias])
    theta0 = np.array([model.theta_g, model.theta_x, model.bias])
    grad = x.T @ (1 / (1 + np.exp(-x @ theta)) - y) + (theta - theta0)
    assert np.max(np.abs(grad)) < 1e-6
    stiff = loanly.fit_approval_model_prior(w, g, y, model, 1e9)
    assert np.allclose([stiff.theta_g, stiff.theta_x, stiff.bias], theta0, atol=1e-5)
    up = loanly.fit_approval_model_prior(w, g, np.ones(400, bool), model, 1.0).prob(wealth, group)
    down = loanly.fit_approval_model_prior(w, g, np.zeros(400, bool), model, 1.0).prob(wealth, group)
    base = model.prob(wealth, group)
    assert up.mean() > base.mean() > down.mean()


def test_prior_refit_in_a_run(eutopia_small):
    """approve_all: keep_single_class keeps LOANLY's model; the prior refit (the default) raises
    the published scores, and random(p = 0.99) then gets nearly the same published model as
    approve_all."""
    keep = execute(eutopia_small("dynamics.refit=keep_single_class"))[0].world.approval
    prior_all = execute(eutopia_small())[0]
    prior_99 = execute(eutopia_small("policy.name=random", "policy.p=0.99"))[0]
    old_99 = execute(eutopia_small("dynamics.refit=keep_single_class", "policy.name=random", "policy.p=0.99"))[0]
    w = prior_all.world.cols["initial_wealth"]
    g = prior_all.world.cols["group"]
    s_keep = keep.prob(w, g).mean()
    s_all = prior_all.world.approval.prob(w, g).mean()
    s_99 = prior_99.world.approval.prob(w, g).mean()
    s_old99 = old_99.world.approval.prob(w, g).mean()
    assert s_all > s_keep + 0.3
    assert abs(s_all - s_99) < 0.05
    assert s_old99 - s_keep > 0.5  # the jump of keep_single_class
