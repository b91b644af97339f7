"""Arrival statistics: Hawkes time-rescaling, a Poisson negative control, self-selection rates.

Feedback is frozen (base slope 0, frozen approval model, approve-all, and tau_inv = tau_interest
so wealth and hence the self-selection weights never change): the group's application process
is then exactly Hawkes with rate wbar_g * (a + alpha * sum_{approvals} exp(-beta (t - t_j))).
"""

import numpy as np
import pytest
from scipy import stats

from abm.config import load_scenario
from abm.hawkes import compensator, time_rescaling_ks
from abm.runner import execute

FROZEN = ["policy.name=approve_all", "arrivals.base_slope=0", "dynamics.approval_model=frozen",
          "population.tau_inv=0.15"]


def frozen_run(*extra, episodes=200):
    sc = load_scenario("scenarios/eutopia.yaml", FROZEN + [f"episodes.count={episodes}", *extra])
    sim, ep, ev = execute(sc)
    return sc, sim, ev


def group_times(ev, group, kind):
    e = ev[(ev["group"].astype(str) == group) & (ev["kind"].astype(str) == kind)]
    return e["time"].to_numpy(), e["agent_id"].to_numpy()


@pytest.fixture(scope="module")
def frozen():
    return frozen_run()


def test_compensator_matches_direct_sum():
    rng = np.random.default_rng(0)
    ev, ex = np.sort(rng.uniform(0, 10, 50)), np.sort(rng.uniform(0, 10, 30))
    direct = [1.3 * (0.7 * t + 0.3 / 2.0 * np.sum(1 - np.exp(-2.0 * (t - ex[ex < t])))) for t in ev]
    assert np.allclose(compensator(ev, ex, 0.7, 0.3, 2.0, 1.3), direct)


@pytest.mark.parametrize("group", ["M", "F"])
def test_time_rescaling_passes_and_poisson_control_fails(frozen, group):
    sc, sim, ev = frozen
    g = ["M", "F"].index(group)
    apply_t, _ = group_times(ev, group, "apply")
    approve_t, _ = group_times(ev, group, "approve")
    assert len(apply_t) > 2000  # 200 episodes x ~25 applications
    wbar = sim.world.weight_sum[g] / sim.world.sizes[g]
    a = sc.arrivals
    hawkes = time_rescaling_ks(apply_t, approve_t, a.base_intercept, a.excitation, a.decay, wbar)
    assert hawkes.pvalue > 0.01
    # negative control: a homogeneous Poisson process with the same mean rate
    rate = len(apply_t) / (sc.episodes.count * sc.episodes.horizon)
    poisson = stats.kstest(np.diff(np.concatenate([[0.0], apply_t])) * rate, "expon")
    assert poisson.pvalue < 0.01


def test_strong_excitation_on_applications():
    """Near the stability bound (alpha (1 + selection_strength) / beta = 0.975 < 1): KS fit, wrong decay rejected."""
    sc, sim, ev = frozen_run("arrivals.excitation=1.3", "arrivals.excite_on=applications", episodes=60)
    a = sc.arrivals
    for g, name in enumerate(["M", "F"]):
        t, _ = group_times(ev, name, "apply")
        wbar = sim.world.weight_sum[g] / sim.world.sizes[g]
        assert time_rescaling_ks(t, t, a.base_intercept, a.excitation, a.decay, wbar).pvalue > 0.01
        wrong = time_rescaling_ks(t, t, a.base_intercept, a.excitation, 4.0, wbar)  # wrong decay
        assert wrong.pvalue < 0.01


def test_self_selection_rates(frozen):
    """Applications per applicant are proportional to 1 + 0.5 sigma(h_theta), bucket by bucket."""
    sc, sim, ev = frozen
    cols = sim.world.cols
    _, who = group_times(ev, "M", "apply")
    _, who_f = group_times(ev, "F", "apply")
    counts = np.bincount(np.concatenate([who, who_f]), minlength=len(cols["weight"]))
    score = cols["approval_score"]
    edges = [0.0, 0.05, 0.5, 0.95, 1.0001]
    for g in (0, 1):
        members = cols["group"] == g
        bucket = np.digitize(score[members], edges) - 1
        observed = np.bincount(bucket, weights=counts[members], minlength=4)
        expected_share = np.bincount(bucket, weights=cols["weight"][members], minlength=4)
        expected = expected_share / expected_share.sum() * observed.sum()
        keep = expected > 20
        chi = stats.chisquare(observed[keep], expected[keep] * observed[keep].sum() / expected[keep].sum())
        assert chi.pvalue > 0.01
        # tolerance on the rich/poor per-capita ratio: within 12% of 1 + 0.5 sigma's prediction
        rich, poor = score[members] >= 0.5, score[members] < 0.05
        per_cap = lambda m: counts[members][m].mean()  # noqa: E731
        predicted = cols["weight"][members][rich].mean() / cols["weight"][members][poor].mean()
        assert predicted > 1.3
        assert abs(per_cap(rich) / per_cap(poor) / predicted - 1) < 0.12


@pytest.mark.slow
def test_time_rescaling_pvalues_uniform_across_seeds():
    pvalues = []
    for seed in range(20):
        sc, sim, ev = frozen_run(f"seed={seed}", episodes=100)
        for g, name in enumerate(["M", "F"]):
            t, _ = group_times(ev, name, "apply")
            ex, _ = group_times(ev, name, "approve")
            wbar = sim.world.weight_sum[g] / sim.world.sizes[g]
            a = sc.arrivals
            pvalues.append(time_rescaling_ks(t, ex, a.base_intercept, a.excitation, a.decay, wbar).pvalue)
    assert stats.kstest(pvalues, "uniform").pvalue > 0.01
