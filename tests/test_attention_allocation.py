"""The attention_allocation family: each behaviour ml-fairness-gym's
environments/attention_allocation_test.py asserts, on our family (written anew), plus the
offer/budget reading, the fairness signals the deep learners read, the baselines and bad inputs.

Peer test -> ours: test_sample_incidents_centered_on_incident_rates ->
test_incidents_occur_at_the_configured_rates; test_update_state -> test_discovered_never_exceeds_
occurred_nor_units; test_parties_can_interact -> test_every_baseline_runs_an_episode;
test_dynamic_rate_change -> test_dynamic_rate_change_matches_ml_fairness_gym;
test_features_centered_correctly(_no_noise): location features are not modelled (pocar's and
ELBERT's agents observe incident counts, not features; docs/MODEL.md).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import ROOT, call_in_process

from abm.build import simulation
from abm.config import load_scenario, validate_scenario_dict
from abm.errors import UserError
from abm.families.attention_allocation import discovery_table
from policies.allocation import even_split, greedy_split

FILE = ROOT / "scenarios" / "attention-allocation.yaml"


def scenario(*sets, policy="approve_all", horizon=50, count=1, sites=None, **top):
    data = {"family": "attention_allocation", "policy": {"name": policy},
            "episodes": {"count": count, "horizon": float(horizon)}, **top}
    if sites is not None:
        data["population"] = {"sites": sites}
    return validate_scenario_dict(data)


def site(name, rate, inc=0.0, dec=0.0, miss=0.0):
    return {"name": name, "incident_rate": rate, "rate_increase": inc, "rate_decrease": dec, "miss_prob": miss}


def run(sc):
    sim = simulation(sc, log_events=False)
    sim.run()
    return sim


def history(sim):
    return sim.world.policy_context().history()


# -- ml-fairness-gym's attention_allocation_test.py, behaviour by behaviour ----------------------
def test_incidents_occur_at_the_configured_rates():
    sim = run(scenario(sites=[site("A", 4.0), site("B", 3.0)], horizon=400, policy="random"))
    occurred = history(sim)[0]
    assert occurred.shape == (400, 2)
    # Poisson(rate) per step: the mean of 400 steps lies within 4 standard errors of the rate
    assert np.all(np.abs(occurred.mean(axis=0) - [4.0, 3.0]) < 4 * np.sqrt(np.array([4.0, 3.0]) / 400))


def test_discovered_never_exceeds_occurred_nor_units():
    sites = [site("A", 5.0, miss=0.2), site("B", 2.0, miss=0.5), site("C", 9.0)]
    sim = run(scenario(sites=sites, attention={"units": 4}, policy="random", horizon=200))
    occurred, discovered, units = history(sim)
    assert np.all(discovered <= occurred) and np.all(discovered <= units)
    assert np.all(units.sum(axis=1) <= 4)
    assert discovered.sum() > 0


def test_every_baseline_runs_an_episode():
    for name in ("approve_all", "reject_all", "random", "uniform_allocation", "greedy_allocation"):
        sim = run(scenario(policy=name, horizon=40))
        row = sim.episode_rows[-1]
        assert row["missed"] == sum(row[f"occurred_S{k}"] - row[f"discovered_S{k}"] for k in range(1, 6)), name
        sim.world.check_invariants()


def test_dynamic_rate_change_matches_ml_fairness_gym():
    """ml-fairness-gym: rates [4, 2], dynamic_rate 0.1, 2 units, action [2, 0] -> rates [3.8, 2.1]."""
    import abm.gym

    sc = scenario(sites=[site("A", 4.0, 0.1, 0.1), site("B", 2.0, 0.1, 0.1)], attention={"units": 2}, horizon=3)
    env = abm.gym.AbmEnv(sc)
    env.reset(seed=0)
    for action in (1, 0, 1):  # offers: A, B, then A again; the second unit at A spends the budget
        _, _, _, _, info = env.step(action)
    assert info["time"] == 1.5  # the first step resolved; the next one is offered
    assert env.sim.world.cols["rate"].tolist() == pytest.approx([3.8, 2.1])


# -- discovery: ml-fairness-gym's rule -------------------------------------------------------------
def test_discovery_table_follows_ml_fairness_gym_rule():
    rng = np.random.default_rng(0)
    assert discovery_table(3, 0.0, 5, False, rng) == [0, 1, 2, 3, 3, 3]  # each unit finds one, while any
    assert discovery_table(3, 0.0, 2, True, rng) == [0, 3, 3]  # with replacement one unit finds all
    tables = np.array([discovery_table(4, 0.3, 6, False, rng) for _ in range(4000)])
    steps = np.diff(tables, axis=1)
    assert np.all((steps == 0) | (steps == 1))  # more units never discover less, and one more at most
    # E[D(1)] = P(one unit finds one of 4 incidents) = 1 - 0.3^4 (its single find ends the search)
    assert tables[:, 1].mean() == pytest.approx(1 - 0.3 ** 4, abs=0.01)
    # with replacement each incident is found with 1 - miss^a: E[D(2)] = 4 (1 - 0.09)
    with_rep = np.array([discovery_table(4, 0.3, 2, True, rng)[2] for _ in range(4000)])
    assert with_rep.mean() == pytest.approx(4 * (1 - 0.3 ** 2), abs=0.06)


def test_more_attention_at_a_site_discovers_more_there():
    sites = [site("A", 6.0), site("B", 6.0)]
    even = run(scenario(sites=sites, attention={"units": 4}, policy="uniform_allocation", horizon=300, seed=3))
    favour = scenario(sites=sites, attention={"units": 4}, policy="greedy_allocation", horizon=300, seed=3)
    # greedy on rates it believes: feed it a world where A's estimate is higher by construction
    sim = simulation(favour, log_events=False)
    sim.policy.target = lambda step: np.array([3, 1])
    sim.run()
    assert history(sim)[1][:, 0].sum() > history(even)[1][:, 0].sum()
    assert history(sim)[1][:, 1].sum() < history(even)[1][:, 1].sum()


# -- a fixed policy's outcome and the dynamics ------------------------------------------------------
def test_reject_all_outcome_is_exact():
    sc = scenario(sites=[site("A", 2.0, inc=0.5), site("B", 1.0, inc=0.25)], policy="reject_all", horizon=10)
    sim = run(sc)
    row = sim.episode_rows[-1]
    assert sim.world.cols["rate"].tolist() == pytest.approx([2.0 + 10 * 0.5, 1.0 + 10 * 0.25])
    assert row["discovered_A"] == row["discovered_B"] == 0 and row["idle_units"] == 10 * 6
    occurred = row["occurred_A"] + row["occurred_B"]
    assert row["missed"] == occurred and row["return"] == pytest.approx(-0.25 * occurred)
    assert row["discovery_rate_A"] == 0.0 and row["discovery_gap"] == 0.0


def test_elbert_harder_dynamics_alpha_and_theta():
    sites = [site("A", 0.0, inc=0.5, dec=0.1), site("B", 4.0, inc=0.5, dec=0.1)]
    sim = run(scenario(sites=sites, policy="reject_all", horizon=1, dynamics={"alpha": 0.5, "theta": 1.0}))
    # A: at rate 0 unattended, theta = 1 brings it back to 1, then + 0.5 exp(-0.5 x 0); B: + 0.5 exp(-2)
    assert sim.world.cols["rate"].tolist() == pytest.approx([1.5, 4.0 + 0.5 * np.exp(-2.0)])
    attended = run(scenario(sites=sites, policy="approve_all", horizon=1, attention={"units": 2},
                            dynamics={"alpha": 0.5}))
    assert attended.world.cols["rate"].tolist() == pytest.approx([0.0, 4.0 - 0.1 * np.exp(-2.0)])


# -- the offer reading: budget, idle units, the learners' signals --------------------------------
def test_offers_stop_when_the_budget_is_spent_and_declined_units_idle():
    sim = simulation(scenario(policy="approve_all", horizon=20), log_events=True)
    sim.run()
    kinds = sim.log.to_frame()["kind"].astype(str)
    units = history(sim)[2]
    assert np.all(units.sum(axis=1) == 6)  # 5 sites, 6 units: round 1 gives each one, round 2 one more
    assert sorted(units[0].tolist()) == [1, 1, 1, 1, 2] and units[0].argmax() != units[1].argmax()  # rotates
    assert sim.episode_rows[-1]["idle_units"] == 0
    assert (kinds == "approve").sum() == 6 * 20 and (kinds == "apply").sum() == 6 * 20
    none = run(scenario(policy="reject_all", horizon=5))
    assert none.world.cum["offers"].sum() == 5 * 5 * 6  # declined: every site offered `units` times


def test_gym_records_give_each_sites_discoveries_exactly():
    """ELBERT's U_g (approved and good) adds up to the site's discoveries; A-PPO's TPR reads the same."""
    import abm.gym

    sc = scenario(sites=[site("A", 3.0, miss=0.3), site("B", 1.0), site("C", 5.0)], attention={"units": 3},
                  horizon=60)
    env = abm.gym.AbmEnv(sc, privileged=True)
    obs, info = env.reset(seed=4)
    rng = np.random.default_rng(1)
    found = np.zeros(3)
    total = 0.0
    while True:
        a = int(rng.random() < 0.6)
        obs, reward, _, truncated, info = env.step(a)
        total += reward
        dec = info["decided"]
        found[dec["group"]] += dec["action"] * dec["outcome"]
        if truncated:
            break
    row = info["episode_metrics"]
    assert found.tolist() == [row["discovered_A"], row["discovered_B"], row["discovered_C"]]
    assert total == pytest.approx(row["return"])


# -- the baselines' allocations ------------------------------------------------------------------------
def test_even_split_and_greedy_split():
    assert even_split(6, 5, 0).tolist() == [2, 1, 1, 1, 1]
    assert even_split(6, 5, 3).tolist() == [1, 1, 1, 2, 1]
    assert even_split(2, 5, 4).tolist() == [1, 0, 0, 0, 1]
    from scipy.stats import poisson

    rates = np.array([8.0, 6.0, 4.0, 3.0, 1.5])
    best = max((a for a in itertools.product(range(7), repeat=5) if sum(a) == 6),
               key=lambda a: sum(poisson.sf(np.arange(k), r).sum() for k, r in zip(a, rates)))
    assert greedy_split(6, rates).tolist() == list(best)


def test_greedy_allocation_follows_its_estimates():
    sc = scenario(sites=[site("A", 9.0), site("B", 0.5)], attention={"units": 4}, policy="greedy_allocation",
                  horizon=120)
    units = history(run(sc))[2]
    late = units[60:]  # after burn-in, most steps follow the estimates (epsilon 0.1 explores)
    assert (late[:, 0] >= 3).mean() > 0.8


# -- bad inputs: one line each, naming the field -------------------------------------------------------
@pytest.mark.parametrize("data, match", [
    ({"population": {"sites": [site("A", -1.0)]}}, r"population\.sites\[0\]\.incident_rate"),
    ({"population": {"sites": []}}, r"population\.sites: List should have at least 1 item"),
    ({"population": {"sites": [site("A", 1.0), site("A", 2.0)]}}, "population: site names must be unique"),
    ({"population": {"sites": [site("A", 1.0, miss=1.5)]}}, r"population\.sites\[0\]\.miss_prob"),
    ({"population": {"sites": [site("A", 1.0, inc=-0.1)]}}, r"population\.sites\[0\]\.rate_increase"),
    ({"population": {"sites": [site("A", 1.0, dec=-0.1)]}}, r"population\.sites\[0\]\.rate_decrease"),
    ({"attention": {"units": 0}}, r"attention\.units"),
    ({"attention": {"units": -3}}, r"attention\.units"),
    ({"dynamics": {"alpha": -1.0}}, r"dynamics\.alpha"),
    ({"dynamics": {"theta": 2.0}}, r"dynamics\.theta"),
    ({"episodes": {"review": "batch", "decision_interval": 1.0}}, "review must be 'immediate'"),
    ({"episodes": {"horizon": 10.5}}, "horizon must be a whole number"),
    ({"episodes": {"max_applications": 100}}, "exceed episodes.max_applications"),
    ({"policy": {"name": "bisim_ppo"}}, "use variant: reward_only"),
    ({"policy": {"name": "max_util"}}, "does not apply to family 'attention_allocation'"),
    ({"policy": {"name": "greedy_allocation", "epsilon": 1.5}}, "epsilon"),
])
def test_bad_inputs_are_refused_in_one_line(data, match):
    with pytest.raises(UserError, match=match) as err:
        validate_scenario_dict({"family": "attention_allocation", **data})
    assert "\n" not in str(err.value)


def test_baselines_are_refused_elsewhere_and_cli_exits_2():
    with pytest.raises(UserError, match="needs an attention budget per step"):
        load_scenario(ROOT / "scenarios" / "lending-credit.yaml", ["policy.name=greedy_allocation"])
    code, _, err = call_in_process("validate", str(FILE), "--set", "attention.units=-1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "attention.units" in err


def test_abm_run_prints_the_sites_and_the_whole_runs_headline(tmp_path):
    """The console summary shows the family's own per-site metrics (not the lending stems it lacks)
    and its benchmark headline: the whole run's reward and discovery gap."""
    code, out, _ = call_in_process("run", str(FILE), "--episodes", "2", "--out", str(tmp_path))
    assert code == 0
    assert all(row in out for row in ("discovery_rate", "occurred", "discovered", "units", "incident_rate"))
    assert "cumulative_profit = " in out and "run_discovery_gap = " in out and "mean_wealth" not in out
