"""Statistical validation (``make test-slow``): the simulated processes against their definitions,
across scenarios and seeds. Tolerances are stated beside each assertion; every test uses fixed
seeds, so a failure is reproducible, and each significance level is 1% (a correct model fails one
of these assertions by chance with probability about 1% per assertion).

Extends tests/test_arrivals.py (one fast KS test, one slow uniform-p-values test on the default
Eutopia scenario) to other scenarios, excitation settings and review modes; docs/RELIABILITY.md
summarises the figures.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from abm.config import load_scenario
from abm.hawkes import time_rescaling_ks
from abm.population import generate_population
from abm.runner import execute
from test_arrivals import FROZEN, group_times

pytestmark = pytest.mark.slow
SEEDS = range(10)

# Feedback frozen (see tests/test_arrivals.py): the group's applications are then exactly Hawkes
HAWKES_SCENARIOS = {
    "pretraining, excite on approvals, batch review": ("scenarios/eutopia.yaml", []),
    "evaluation regime": ("scenarios/eutopia-eval.yaml", []),
    "excite on applications, immediate review": ("scenarios/eutopia.yaml", [
        "arrivals.excite_on=applications", "episodes.review=immediate"]),
    "strong excitation (branching 0.6), small groups": ("scenarios/eutopia.yaml", [
        "arrivals.excite_on=applications", "arrivals.excitation=1.2", "population.n_male=500",
        "population.n_female=1500"]),
}


def hawkes_pvalues(path: str, extra: list[str], seed: int, decay_factor: float = 1.0) -> list[float]:
    sc = load_scenario(path, FROZEN + ["episodes.count=60", f"seed={seed}", *extra])
    sim, _, ev = execute(sc)
    a = sc.arrivals
    out = []
    for g, name in enumerate(sim.world.group_names):
        t, _ = group_times(ev, name, "apply")
        excite, _ = group_times(ev, name, "approve" if a.excite_on == "approvals" else "apply")
        wbar = sim.world.weight_sum[g] / sim.world.sizes[g]
        out.append(time_rescaling_ks(t, excite, a.base_intercept, a.excitation, a.decay * decay_factor, wbar).pvalue)
    return out


@pytest.mark.parametrize("name", list(HAWKES_SCENARIOS))
def test_time_rescaling_pvalues_are_uniform(name):
    """20 KS p-values (10 seeds x 2 groups) per scenario: uniform on [0, 1] (KS, 1% level)."""
    path, extra = HAWKES_SCENARIOS[name]
    pvalues = [p for seed in SEEDS for p in hawkes_pvalues(path, extra, seed)]
    assert stats.kstest(pvalues, "uniform").pvalue > 0.01, (name, np.round(pvalues, 3))
    assert min(pvalues) > 0.01 / len(pvalues)  # Bonferroni: no single run rejects the model


def test_time_rescaling_detects_a_wrong_decay():
    """Negative control: the same runs judged with twice the decay are rejected."""
    path, extra = HAWKES_SCENARIOS["strong excitation (branching 0.6), small groups"]
    pvalues = [p for seed in range(4) for p in hawkes_pvalues(path, extra, seed, decay_factor=2.0)]
    assert stats.kstest(pvalues, "uniform").pvalue < 0.01 and np.median(pvalues) < 0.01


@pytest.mark.parametrize("strength", [0.5, 2.0])
def test_self_selection_rates_across_seeds(strength):
    """Applications per applicant are proportional to 1 + lambda sigma(h_theta): pooled over 5
    seeds, the rich (score >= 0.5) / poor (score < 0.05) per-capita ratio is within 6% of the
    prediction, and score buckets pass a chi-square test at 1%."""
    observed_ratio, predicted_ratio, chis = [], [], []
    for seed in range(5):
        sc = load_scenario("scenarios/eutopia.yaml", FROZEN + [
            "episodes.count=100", f"seed={seed}", f"population.selection_strength={strength}"])
        sim, _, ev = execute(sc)
        cols = sim.world.cols
        who = ev.loc[ev["kind"].astype(str) == "apply", "agent_id"].to_numpy()
        counts = np.bincount(who, minlength=len(cols["weight"]))
        for g in (0, 1):
            members = cols["group"] == g
            score, weight, n = cols["approval_score"][members], cols["weight"][members], counts[members]
            rich, poor = score >= 0.5, score < 0.05
            observed_ratio.append((n[rich].sum(), rich.sum(), n[poor].sum(), poor.sum()))
            predicted_ratio.append((weight[rich].mean() / weight[poor].mean(), rich.sum() + poor.sum()))
            bucket = np.digitize(score, [0.0, 0.05, 0.5, 0.95, 1.0001]) - 1
            obs = np.bincount(bucket, weights=n, minlength=4)
            exp = np.bincount(bucket, weights=weight, minlength=4)
            keep = exp / exp.sum() * obs.sum() > 20
            chis.append(stats.chisquare(obs[keep], exp[keep] / exp[keep].sum() * obs[keep].sum()).pvalue)
    o = np.array(observed_ratio, dtype=float)
    ratio = (o[:, 0].sum() / o[:, 1].sum()) / (o[:, 2].sum() / o[:, 3].sum())
    p = np.array(predicted_ratio)
    predicted = np.average(p[:, 0], weights=p[:, 1])
    assert predicted > 1 + strength * 0.4  # the effect is there to be measured
    assert abs(ratio / predicted - 1) < 0.06, (ratio, predicted)
    assert stats.kstest(chis, "uniform").pvalue > 0.01 and min(chis) > 0.01 / len(chis), chis


def test_loanly_distribution_facts_across_seeds():
    """LOANLY over 20 seeds of 6,000 applicants: the default rate is p_def = 0.085 (pooled within
    4 binomial sd, each seed within 4 sd), loans are N(30, 10^2) clipped to [10, 100] (pooled mean
    and floor share within 4 sd of the analytic values), men are wealthier than women in every
    seed (the Adult income gap, > $5K), and each group's mean wealth is its Adult pool's (4 sd)."""
    from abm.families.loanly import wealth_scores

    sc0 = load_scenario("scenarios/eutopia.yaml")
    pool = wealth_scores(None)
    pop_conf = sc0.population
    defaults, loans, gaps, means = [], [], [], {0: [], 1: []}
    for seed in range(20):
        frame = generate_population(load_scenario("scenarios/eutopia.yaml", [f"seed={seed}"]))
        n = len(frame)
        assert abs(frame["default"].mean() - 0.085) < 4 * np.sqrt(0.085 * 0.915 / n)
        defaults.append(frame["default"].to_numpy())
        loans.append(frame["loan_amount"].to_numpy())
        by = frame.groupby("group")["wealth"].mean()
        gaps.append(by[0] - by[1])
        for g in (0, 1):
            means[g].append(by[g])
    d = np.concatenate(defaults)
    assert abs(d.mean() - 0.085) < 4 * np.sqrt(0.085 * 0.915 / len(d))
    loan = np.concatenate(loans)
    mu, sd, lo, hi = pop_conf.loan_mean, pop_conf.loan_sd, pop_conf.loan_min, pop_conf.loan_max
    a, b = (lo - mu) / sd, (hi - mu) / sd
    norm = stats.norm
    mean_clipped = (lo * norm.cdf(a) + hi * norm.sf(b) + mu * (norm.cdf(b) - norm.cdf(a))
                    + sd * (norm.pdf(a) - norm.pdf(b)))
    assert abs(loan.mean() - mean_clipped) < 4 * loan.std() / np.sqrt(len(loan))
    floor = norm.cdf(a)
    assert abs((loan == lo).mean() - floor) < 4 * np.sqrt(floor * (1 - floor) / len(loan))
    assert min(gaps) > 5.0
    for g, n_g in ((0, pop_conf.n_male), (1, pop_conf.n_female)):
        w = pop_conf.wealth_min + pop_conf.wealth_span * pool.loc[pool["group"] == g, "score"].to_numpy()
        fpc = np.sqrt((len(w) - n_g) / (len(w) - 1))  # sampling without replacement
        se = w.std() / np.sqrt(n_g) * fpc / np.sqrt(len(means[g]))
        assert abs(np.mean(means[g]) - w.mean()) < 4 * se, (g, np.mean(means[g]), w.mean())


def test_fico_initial_scores_and_repayment_follow_the_curves():
    """FICO (Hardt et al. tables): per seed and group, initial scores pass a chi-square test
    against the group's pmf (1%, bins with >= 20 expected); and the repayments of an approve-all
    run match P(repay | score, group) bin by bin (chi-square at 1% over 5 seeds pooled)."""
    from abm.families.fico import load_tables

    tables = load_tables(["white", "black"])
    for seed in range(5):
        sc = load_scenario("scenarios/fico-delayed-impact.yaml", ["population.size=50000", f"seed={seed}"])
        frame = generate_population(sc)
        for g, name in enumerate(tables.groups):
            s = frame.loc[frame["group"] == name, "credit_score"].to_numpy()
            counts = np.array([(np.isclose(s, x)).sum() for x in tables.grid])
            assert counts.sum() == len(s)  # every score is a grid point
            expected = tables.pmf[g] / tables.pmf[g].sum() * len(s)
            keep = expected >= 20
            obs, exp = counts[keep], expected[keep] / expected[keep].sum() * counts[keep].sum()
            assert stats.chisquare(obs, exp).pvalue > 0.01, (seed, name)
    rows = []
    for seed in range(5):
        sc = load_scenario("scenarios/fico-delayed-impact.yaml", [
            "population.size=20000", "episodes.count=1", "episodes.horizon=20000", "policy.name=approve_all",
            f"seed={seed}"])
        _, _, ev = execute(sc)
        kind = ev["kind"].astype(str)
        applies = ev[kind == "apply"][["time", "agent_id", "group", "score_after"]]
        outcomes = ev[kind.isin(["repay", "default"])][["time", "agent_id", "kind"]]
        rows.append(applies.merge(outcomes, on=["time", "agent_id"], validate="one_to_one"))
    import pandas as pd

    data = pd.concat(rows)
    assert len(data) == 5 * 20000
    group = data["group"].astype(str).map({n: i for i, n in enumerate(tables.groups)}).to_numpy()
    p = tables.curve(data["score_after"].to_numpy(), group)
    repaid = (data["kind"].astype(str) == "repay").to_numpy()
    bins = np.digitize(p, np.linspace(0, 1, 11)[1:-1])
    for g in range(len(tables.groups)):
        obs, exp, var = [], [], []
        for k in range(10):
            m = (bins == k) & (group == g)
            if m.sum() >= 50:
                obs.append(repaid[m].sum())
                exp.append(p[m].sum())
                var.append((p[m] * (1 - p[m])).sum())
        z2 = (np.array(obs) - np.array(exp)) ** 2 / np.array(var)
        assert stats.chi2.sf(z2.sum(), len(z2)) > 0.01, (tables.groups[g], z2)
        assert abs(repaid[group == g].mean() - p[group == g].mean()) < 4 * np.sqrt(
            (p[group == g] * (1 - p[group == g])).sum()) / (group == g).sum()
