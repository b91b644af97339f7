"""The benchmark harness: the vectorised reference agrees with the engine (statistically, not a
timing), the per-capita scaling helper, and ``abm bench --quick`` writing valid JSON."""

import json
import math

import numpy as np
import pytest

from abm import bench
from abm.build import simulation


def _pair(scenario, reference_scenario=None, episodes=40):
    sim = simulation(scenario)
    ref = bench.load_reference().ReferenceEutopia(reference_scenario or scenario)
    sim.run(episodes)
    ref.run(episodes)
    return sim, ref


def test_reference_agrees_with_engine_and_a_wrong_rate_is_caught(eutopia_small):
    old = "dynamics.refit=keep_single_class"  # the reference implements the discontinuous refit
    sc = eutopia_small("episodes.count=40", "outputs.events=false", old)
    sim, ref = _pair(sc)
    # same seed -> same population (only arrivals and decisions are drawn differently)
    assert np.array_equal(ref.loan, sim.world.cols["loan_amount"])
    assert np.array_equal(ref.default, sim.world.cols["default"])
    assert np.allclose(sim.world.mu0, ref.mu0, rtol=0, atol=1e-12)
    same = bench.agreement(sim.episode_rows, sim.world.mu0, ref.rows, ref.mu0)
    assert same["agree"], same
    assert sum(r["applications_M"] for r in ref.rows) > 4000  # enough events for the test to have power
    # negative control: a reference whose base rate is 30% higher must be told apart
    wrong = eutopia_small("episodes.count=40", "outputs.events=false", "arrivals.base_intercept=13.0", old)
    _, ref_wrong = _pair(sc, wrong, episodes=40)
    differ = bench.agreement(sim.episode_rows, sim.world.mu0, ref_wrong.rows, ref_wrong.mu0)
    assert not differ["agree"]
    assert max(differ["p_applications_M"], differ["p_applications_F"]) < bench.P_AGREE
    assert np.mean([r["applications_M"] for r in ref_wrong.rows]) > np.mean([r["applications_M"] for r in sim.episode_rows])


def test_reference_refuses_what_it_does_not_model(eutopia_small):
    from abm.errors import UserError

    with pytest.raises(UserError, match="review=batch"):
        bench.load_reference().ReferenceEutopia(eutopia_small("dynamics.loan_term=1.0"))


def test_per_capita_scaling_helper():
    small, big = bench.eutopia_scenario(6000), bench.eutopia_scenario(600_000)
    assert (small.population.n_male, small.population.n_female) == (3000, 3000)
    assert not small.population.sample_with_replacement
    assert big.population.sample_with_replacement
    assert big.arrivals.base_intercept == pytest.approx(100 * small.arrivals.base_intercept)
    assert big.arrivals.base_slope == pytest.approx(100 * small.arrivals.base_slope)
    fixed = bench.eutopia_scenario(1_000_000, per_capita=False)
    assert fixed.arrivals.base_intercept == small.arrivals.base_intercept


def test_quick_bench_writes_valid_json(cli, tmp_path):
    out = tmp_path / "bench.json"
    done = cli("bench", "--quick", "--json", str(out))
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())  # strict JSON: no NaN/Infinity
    assert set(bench.KEYS) <= set(data)
    measured = ("engine_over_reference_6k", "abm_policies_s")  # what --quick measures
    for key in (*measured, "engine_sim_time_per_s_6k", "reference_sim_time_per_s_6k", "python_start_s"):
        assert isinstance(data[key], float) and math.isfinite(data[key]) and data[key] > 0
    assert data["abm_policies_max_s"] >= data["abm_policies_s"] > data["python_start_s"]
    assert data["mode"] == "quick" and isinstance(data["agree_6k"], bool)
    assert all(data[k] is None for k in bench.KEYS if k not in measured)
    assert data["commit"] and data["cpu_count"] >= 1
    assert "skipped (--quick)" in done.stdout and "engine_over_reference_6k" in done.stdout
