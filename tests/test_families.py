"""The score families (credit_score, fico, admissions): transitions, invariants, the FICO
loader, the analytic delayed impact of a fixed threshold, and every scenario file."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from abm.config import load_scenario
from abm.build import simulation
from abm.errors import UserError
from abm.runner import execute
from conftest import SCENARIOS

FILES = ("lending-credit", "lending-conscientiousness", "lending-10-groups", "fico-delayed-impact", "admissions")


def scenario(name: str, *overrides: str, **fields):
    return load_scenario(SCENARIOS / f"{name}.yaml", list(overrides), **fields)


@pytest.mark.parametrize("name", FILES)
def test_scenario_file_validates_and_smoke_runs(name, tmp_path):
    sc = scenario(name, "episodes.count=2", "episodes.horizon=60", f"outputs.root={tmp_path}")
    sim, episodes, events = execute(sc)  # checks the world's invariants and its event ledger
    assert len(episodes) == 2
    assert int((events["kind"].astype(str) == "apply").sum()) == 120  # one application per unit step
    groups = sim.world.group_names
    assert {f"recall_{g}" for g in groups} <= set(episodes.columns)
    assert {"recall_gap", "cumulative_return", "average_return"} <= set(episodes.columns)
    if sc.family == "admissions":
        assert {f"social_burden_{g}" for g in groups} <= set(episodes.columns)
    else:
        assert {"credit_gap", *(f"cumulative_loans_{g}" for g in groups)} <= set(episodes.columns)


def test_determinism_same_seed_same_event_log():
    a = execute(scenario("lending-conscientiousness", "episodes.count=1", "episodes.horizon=300"))[2]
    b = execute(scenario("lending-conscientiousness", "episodes.count=1", "episodes.horizon=300"))[2]
    c = execute(scenario("lending-conscientiousness", "episodes.count=1", "episodes.horizon=300", seed=1))[2]
    pd.testing.assert_frame_equal(a, b)
    assert not a["agent_id"].equals(c["agent_id"])


# -- credit_score -----------------------------------------------------------------------------

def test_credit_transition_moves_score_and_pays_reward():
    sim = simulation(scenario("lending-credit", "policy.name=approve_all"))
    w = sim.world
    rng = np.random.default_rng(0)
    for i in (0, 1, 2, 3):
        w.cols["score"][i] = w.cols["observed_score"][i] = 7.0 if i % 2 else 1.0
        w._prepare(i, rng)
        good = bool(w.cols["outcome"][i])
        before = w.cols["score"][i]
        w.apply_decisions(np.array([i]), np.array([True]), np.array([1.0]), w.observe(np.array([i])))
        assert w.last_rewards.tolist() == [1.0 if good else -1.0]
        assert w.cols["score"][i] == np.clip(before + (1 if good else -1), 1, 7)
    w._prepare(5, rng)
    w.apply_decisions(np.array([5]), np.array([False]), np.array([0.0]), w.observe(np.array([5])))
    assert w.last_rewards.tolist() == [0.0]  # no reward on rejection
    w.check_invariants()


def test_credit_scores_stay_whole_and_in_range_with_large_steps():
    sc = scenario("lending-credit", "policy.name=approve_all", "episodes.count=1", "episodes.horizon=3000",
                  "dynamics.score_change_repay=5", "dynamics.score_change_default=-4")
    sim, episodes, _ = execute(sc)
    s = sim.world.cols["score"]
    assert s.min() >= 1 and s.max() <= 7 and np.all(s == np.round(s))
    assert s.min() == 1 and s.max() == 7  # both clips were reached


def test_observation_dynamics_change_the_view_not_the_world():
    base = ["policy.name=approve_all", "episodes.count=1", "episodes.horizon=2000"]
    plain = execute(scenario("lending-credit", *base))[0].world
    seen = execute(scenario("lending-credit", *base, "observation.score_change_repay=[0.5, 2.0]",
                            "observation.score_change_default=[-1.5, -0.25]"))[0].world
    np.testing.assert_array_equal(plain.cols["score"], seen.cols["score"])  # true dynamics untouched
    assert plain.profit_total == seen.profit_total
    np.testing.assert_array_equal(plain.cols["observed_score"], plain.cols["score"])
    assert not np.array_equal(seen.cols["observed_score"], seen.cols["score"])
    assert seen.cols["observed_score"].min() >= 1 and seen.cols["observed_score"].max() <= 7
    g2 = seen.cols["group"] == 1
    assert seen.mean_scores("observed_score")[1] > seen.mean_scores()[1]  # G2 repays into a faster-rising view
    assert g2.any()


def test_conscientiousness_enters_repayment_as_documented():
    sim = simulation(scenario("lending-conscientiousness"))
    w = sim.world
    k = w.cols["conscientiousness"]
    assert abs(k.mean() - 0.55) < 0.02 and abs(k.std() - 0.1) < 0.01
    # independent of the group: equal means within sampling error (sd 0.1, 500 per group)
    assert abs(k[w.cols["group"] == 0].mean() - k[w.cols["group"] == 1].mean()) < 0.03
    idx = np.arange(20)
    expected = 0.5 * np.array([0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])[w.cols["score"][idx].astype(int) - 1] \
        + 0.5 * np.clip(k[idx], 0, 1)
    np.testing.assert_allclose(w.repay_prob(idx), expected)


def test_ten_groups_and_bad_group_inputs():
    sim = simulation(scenario("lending-10-groups", "episodes.count=1", "episodes.horizon=50"))
    assert len(sim.world.group_names) == 10 and sim.world.sizes.tolist() == [100.0] * 10
    with pytest.raises(UserError, match="observation.score_change_repay needs one value per group"):
        scenario("lending-10-groups", "observation.score_change_repay=[1, 2]")
    with pytest.raises(UserError, match="initial_distribution has 7 entries, repay_probs has 2"):
        scenario("lending-credit", "population.repay_probs=[0.5, 0.5]")
    with pytest.raises(UserError, match="equal_opportunity.*use 'eo_threshold'"):
        scenario("lending-credit", "policy.name=equal_opportunity")


def test_partial_episodes_section_keeps_the_family_defaults():
    sc = load_scenario(SCENARIOS / "lending-credit.yaml", [], episodes=3)
    assert (sc.episodes.count, sc.episodes.horizon, sc.episodes.review) == (3, 1000.0, "immediate")


def test_batch_review_decides_queued_applications():
    sc = scenario("lending-credit", "policy.name=approve_all", "episodes.count=1", "episodes.horizon=500",
                  "episodes.review=batch", "episodes.decision_interval=10")
    sim, episodes, events = execute(sc)
    assert int(episodes[[c for c in episodes if c.startswith("approvals_")]].sum(axis=1).iloc[0]) == 500
    assert events.loc[events["kind"].astype(str) == "approve", "time"].mod(10).eq(0).all()


# -- fico ---------------------------------------------------------------------------------------

def test_fico_loader_reproduces_the_data_curves():
    from abm.data import FICO_GROUPS, locate
    from abm.families.fico import load_tables, transrisk_to_fico

    paths = locate("fico", ("transrisk_cdf_by_race_ssa.csv", "transrisk_performance_by_race_ssa.csv"))
    perf = pd.read_csv(paths["transrisk_performance_by_race_ssa.csv"])
    cdf = pd.read_csv(paths["transrisk_cdf_by_race_ssa.csv"])
    tables = load_tables(list(FICO_GROUPS))
    assert transrisk_to_fico([0, 2.1, 47.7, 100]).tolist() == pytest.approx([300, 350, 650, 850])
    np.testing.assert_allclose(tables.grid, transrisk_to_fico(perf["Score"]))
    for g, (short, column) in enumerate(FICO_GROUPS.items()):
        expected = 1 - perf[column].to_numpy() / 100
        np.testing.assert_allclose(tables.curve(tables.grid, np.full(len(tables.grid), g)), expected, atol=1e-12)
        np.testing.assert_allclose(np.cumsum(tables.pmf[g]), cdf[column].to_numpy() / 100, atol=1e-3)


def test_fico_population_follows_the_cdf_and_ssa_shares():
    from abm.families.fico import load_tables

    sc = scenario("fico-delayed-impact", "population.size=200000")
    from abm.population import generate_population

    frame = generate_population(sc)
    tables = load_tables(["white", "black"])
    shares = frame["group"].value_counts(normalize=True)
    assert shares["black"] == pytest.approx(18274 / (18274 + 133165), abs=1e-5)
    for g, name in enumerate(("white", "black")):
        s = frame.loc[frame["group"] == name, "credit_score"].to_numpy()
        for q in (450.0, 600.0, 700.0):
            expected = tables.pmf[g][tables.grid <= q].sum()
            assert abs((s <= q).mean() - expected) < 0.01, (name, q)


def test_fico_scores_stay_in_range():
    sc = scenario("fico-delayed-impact", "policy.name=approve_all", "population.size=500",
                  "episodes.count=1", "episodes.horizon=5000")
    sim, _, _ = execute(sc)
    s = sim.world.cols["score"]
    assert s.min() >= 300 and s.max() <= 850 and s.min() == 300 and s.max() == 850


def test_fico_fixed_threshold_mean_score_change_matches_the_analytic_delayed_impact():
    """Liu et al.'s expected score change, Delta_g = E_{s ~ p0_g}[1{s >= t} (p(s) min(75, 850 - s)
    + (1 - p(s)) max(-150, 300 - s))], times the share of the group's members that apply
    (H/N), against the simulated change of the group's mean score; tolerance 3.5 standard
    errors (H = 5,000 steps on N = 100,000 applicants: repeat visits, which the formula
    ignores, are 2.5% of the steps and shift the mean by far less than one standard error)."""
    from abm.families.fico import load_tables

    n, horizon, t = 100_000, 5000, 620.0
    sc = scenario("fico-delayed-impact", "policy.name=single_threshold", f"policy.threshold={t}",
                  f"population.size={n}", "episodes.count=1", f"episodes.horizon={horizon}")
    sim, _, events = execute(sc)
    w = sim.world
    tables = load_tables(["white", "black"])
    kind = events["kind"].astype(str)
    before = events.loc[kind == "apply"].set_index("time")["score_after"]
    for g, name in enumerate(("white", "black")):
        s, p = tables.grid, tables.repay[g]
        delta = np.where(s >= t, p * np.minimum(75, 850 - s) + (1 - p) * np.maximum(-150, 300 - s), 0.0)
        n_g = w.sizes[g]
        analytic = horizon / n * float(tables.pmf[g] @ delta)
        mine = w.cols["group"] == g
        simulated = float(w.cols["score"][mine].mean() - w.cols["initial_score"][mine].mean())
        loans = events.loc[(kind.isin(["repay", "default"])) & (events["group"].astype(str) == name)]
        step_change = np.zeros(horizon)
        step_change[: len(loans)] = loans["score_after"].to_numpy() - before.loc[loans["time"]].to_numpy()
        se = np.sqrt(horizon * np.var(step_change)) / n_g  # H i.i.d. steps, zero when g is not served
        assert se > 0
        assert abs(simulated - analytic) < 3.5 * se, (name, simulated, analytic, se)
        assert abs(analytic) > 2 * se  # the test has power: the effect is resolved


# -- admissions ---------------------------------------------------------------------------------

def test_admissions_admitted_never_return_and_budgets_stay_non_negative():
    sc = scenario("admissions", "dynamics.manipulation_prob=1.0", policy="approve_all")
    sim, episodes, events = execute(sc)  # ledger_check: no apply after an admission
    w = sim.world
    assert w.pool_size == 0 and w.cols["admitted"].all()  # 1000 steps, 1000 applicants, all admitted once
    kind = events["kind"].astype(str)
    assert events.loc[kind == "apply", "agent_id"].is_unique
    assert (w.cols["budget"] >= 0).all()
    assert np.allclose(w.cols["budget"] + w.cols["cost_paid"], w.cols["initial_budget"])


def test_admissions_manipulation_raises_observed_not_true_scores():
    sc = scenario("admissions", "dynamics.manipulation_prob=1.0", "episodes.count=1", "episodes.horizon=5000",
                  policy="reject_all")
    sim, episodes, events = execute(sc)
    w, c = sim.world, sim.world.cols
    assert (c["budget"] >= 0).all() and (c["observed_score"] <= 10).all()
    assert np.all(c["observed_score"] - c["score"] == c["manipulations"])  # one point per manipulation
    # epsilon = 1, cost 1: every visit buys a point until the budget or the top score stops it
    np.testing.assert_array_equal(c["manipulations"], np.minimum.reduce(
        [c["applications"], c["initial_budget"].astype(int), (10 - c["score"]).astype(int)]))
    assert (c["cost_paid"] <= c["initial_budget"]).all()
    assert int((events["kind"].astype(str) == "manipulate").sum()) == int(c["manipulations"].sum())
    assert w.profit_total == -w.cum["fn"].sum()  # reject_all: -1 per would-be success


def test_admissions_subsidy_changes_costs_not_success():
    base = ["dynamics.manipulation_prob=1.0", "episodes.count=1", "episodes.horizon=3000"]
    plain = execute(scenario("admissions", *base, policy="reject_all"))[0].world
    subsidised = execute(scenario("admissions", *base, "observation.manipulation_cost=[1.0, 0.5]",
                                  policy="reject_all"))[0].world
    g2 = plain.cols["group"] == 1
    assert subsidised.cols["manipulations"][g2].sum() > plain.cols["manipulations"][g2].sum()
    np.testing.assert_array_equal(plain.cols["score"], subsidised.cols["score"])
    with pytest.raises(UserError, match="review must be 'immediate'"):
        scenario("admissions", "episodes.review=batch")


def test_social_burden_is_mean_cost_of_the_admitted():
    sc = scenario("admissions", "episodes.count=1", "episodes.horizon=400", policy="approve_all")
    sim, episodes, _ = execute(sc)
    c = sim.world.cols
    for g, name in enumerate(sim.world.group_names):
        admitted = c["admitted"] & (c["group"] == g)
        assert episodes[f"social_burden_{name}"].iloc[-1] == pytest.approx(c["cost_paid"][admitted].mean())
        assert episodes[f"cumulative_admissions_{name}"].iloc[-1] == admitted.sum()


# -- seed-002 options of issue 16 (defaults leave every existing run unchanged) ---------------------

def test_new_options_stay_out_of_the_dump_at_their_defaults():
    from abm.config import config_hash, scenario_to_dict

    credit = scenario_to_dict(scenario("lending-credit"))
    assert "metrics" not in credit and not {"model", "shift_increment"} & set(credit["dynamics"])
    assert "encoding" not in credit["observation"]
    assert "admit_failure" not in scenario_to_dict(scenario("admissions", "bank.admit_failure=0.0"))["bank"]
    set_ = scenario_to_dict(scenario("lending-credit", "metrics.credit_gap_w2=true", "dynamics.model=mass_shift"))
    assert set_["metrics"] == {"credit_gap_w2": True} and set_["dynamics"]["model"] == "mass_shift"
    assert config_hash(scenario("lending-credit")) != config_hash(scenario("lending-credit", "metrics.credit_gap_w2=true"))


def test_wasserstein2_squared_is_the_quantile_integral():
    from abm.families.steps import credit_gap_w2, wasserstein2_squared

    rng = np.random.default_rng(0)
    a, b = rng.integers(1, 8, 37).astype(float), rng.integers(1, 8, 51).astype(float)
    u = (np.arange(200_000) + 0.5) / 200_000
    brute = np.mean((np.quantile(a, u, method="inverted_cdf") - np.quantile(b, u, method="inverted_cdf")) ** 2)
    assert wasserstein2_squared(a, b) == pytest.approx(brute, abs=1e-3)
    assert wasserstein2_squared([1, 2, 3], [2, 3, 4, 5]) == pytest.approx(2.5)
    # weighted (distributions on a grid) = the same samples
    assert wasserstein2_squared([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [1, 1, 1, 0, 0], [0, 1, 1, 1, 1]) == pytest.approx(2.5)
    groups = np.array([0, 0, 0, 1, 1, 1, 1])
    assert credit_gap_w2(np.array([1, 2, 3, 2, 3, 4, 5.0]), groups, 2) == pytest.approx(2.5)


def test_credit_gap_w2_is_reported_only_when_asked():
    from abm.families.steps import credit_gap_w2

    base = ["episodes.count=1", "episodes.horizon=300"]
    plain = execute(scenario("lending-credit", *base))[1]
    sim, episodes, _ = execute(scenario("lending-credit", *base, "metrics.credit_gap_w2=true"))
    assert "credit_gap_w2" not in plain.columns
    c = sim.world.cols
    assert episodes["credit_gap_w2"].iloc[-1] == pytest.approx(credit_gap_w2(c["score"], c["group"], 2))
    assert episodes["credit_gap"].iloc[-1] == plain["credit_gap"].iloc[-1]  # the W1 column is unchanged


def test_mass_shift_moves_group_mass_like_ml_fairness_gym():
    sim = simulation(scenario("lending-credit", "dynamics.model=mass_shift", "dynamics.shift_increment=0.05",
                              policy="approve_all"))
    w = sim.world
    before = w.mass.copy()
    w._after_loan(np.array([1]), np.array([1]), np.array([True]), np.array([4.0]))  # G2 repays at score 4
    moved = w.mass - before
    assert moved[1, 3] == pytest.approx(-0.05) and moved[1, 4] == pytest.approx(0.05) and not moved[0].any()
    w._after_loan(np.array([0]), np.array([0]), np.array([False]), np.array([2.0]))  # G1 defaults at 2: bin 2 -> 1
    assert w.mass[0, 0] == pytest.approx(0.05)  # from nothing: min(increment, mass of the bin) moved down
    sim, episodes, _ = execute(scenario("lending-credit", "dynamics.model=mass_shift", "episodes.count=2",
                                        "metrics.credit_gap_w2=true", policy="approve_all"))
    m = sim.world.mass
    assert np.allclose(m.sum(axis=1), 1.0) and (m >= -1e-12).all()
    grid = np.arange(1, 8.0)
    assert episodes["mean_score_G1"].iloc[-1] == pytest.approx(m[0] @ grid)
    assert episodes["credit_gap"].iloc[-1] == pytest.approx(np.abs(np.cumsum(m[0]) - np.cumsum(m[1])).sum())
    assert episodes["observed_credit_gap"].iloc[-1] == episodes["credit_gap"].iloc[-1]


def test_one_hot_observation_appends_the_encoded_score_and_group():
    sim = simulation(scenario("lending-credit", "observation.encoding=one_hot", policy="max_util"))
    w = sim.world
    assert w.obs_fields[:4] == ("credit_score", "group", "repay_ratio", "default_ratio")
    assert w.obs_fields[4:] == tuple(f"score_{k}" for k in range(1, 8)) + ("group_G1", "group_G2")
    idx = np.array([0, 999])
    obs = w.observe(idx)
    assert obs.shape == (2, 13) and np.all(obs[:, 4:11].sum(axis=1) == 1) and np.all(obs[:, 11:].sum(axis=1) == 1)
    assert np.all(obs[np.arange(2), 3 + obs[:, 0].astype(int)] == 1.0)
    assert np.all(obs[np.arange(2), 11 + obs[:, 1].astype(int)] == 1.0)
    lo, hi = w.obs_bounds
    assert len(lo) == len(hi) == 13
    execute(scenario("lending-credit", "observation.encoding=one_hot", "episodes.count=1", "episodes.horizon=200"))


def test_admit_failure_penalty_changes_rewards_and_the_greedy_rule():
    base = ["episodes.count=1", "episodes.horizon=400"]
    zero = {p: execute(scenario("admissions", *base, "bank.admit_failure=0.0", policy=p))[0].world
            for p in ("approve_all", "max_util")}
    assert zero["approve_all"].profit_total == zero["max_util"].profit_total  # with 0 the greedy rule admits all
    sim, episodes, events = execute(scenario("admissions", *base, "bank.admit_failure=-1.0", policy="approve_all"))
    w = sim.world  # run check: invariants and the event ledger include the penalty
    assert w.profit_total == w.cum["tp"].sum() - w.cum["fp"].sum() - w.cum["fn"].sum()
    greedy = execute(scenario("admissions", *base, "bank.admit_failure=-1.0", policy="max_util"))[0].world
    assert greedy.cum["approvals"].sum() < w.cum["approvals"].sum()  # the penalty makes it reject low scores


def _external_world(path: str, *sets: str):
    sc = load_scenario(SCENARIOS / path, ["seed=31", *sets])
    return simulation(sc, external=True, log_events=False, track_applicants=False).world


@pytest.mark.parametrize("cons", [False, True])
def test_scalar_repay_probability_is_the_array_one(cons):
    """The arrival's P(repay) in Python floats (the hot path) equals ``repay_prob`` bit for bit."""
    w = _external_world("lending-credit.yaml", f"population.conscientiousness.enabled={str(cons).lower()}")
    w.cols["score"][:] = np.random.default_rng(0).integers(1, len(w.p_table) + 1, len(w.cols["score"]))
    if cons:
        w.cols["conscientiousness"][:5] = [-0.2, 1.3, 0.0, 1.0, np.nan]  # both clip edges and NaN
    every = np.arange(len(w.cols["score"]))
    expected = w.repay_prob(every)
    got = np.array([w.repay_prob_one(i) for i in every])
    assert np.array_equal(got, expected, equal_nan=True)


class _Listener:
    """A policy that only listens: its presence sends ``apply_decisions`` down the batch path."""

    def on_outcomes(self, outcomes):
        pass


def test_admissions_scalar_decision_path_matches_the_batch_path():
    """One decision with no policy to tell (the gym adapter) takes Python scalars; the same
    arrivals and decisions through the array path leave every column, counter and total bit for
    bit the same, admissions (leaving the pool) and manipulations included."""
    worlds = [_external_world("admissions.yaml", "dynamics.manipulation_prob=0.7") for _ in range(2)]
    worlds[1].model.policy = _Listener()
    decide = np.random.default_rng(3)
    plan = decide.random(3000) < 0.4
    for w in worlds:
        arrivals, outcomes = np.random.default_rng(7), np.random.default_rng(8)
        w._outcome_draw = outcomes.random  # the outcome stream _prepare reads (bound at start)
        for approve in plan:
            i = w._pick(arrivals)
            if i is None:
                break
            w._prepare(i, arrivals)
            idx = np.array([i])
            w.apply_decisions(idx, np.array([approve]), np.array([float(approve)]), w.observe(idx))
    a, b = worlds
    assert a.pool_size < len(a.cols["group"]) - 500  # many admitted: the pool swap ran
    assert a.cum["manipulations"].sum() > 0
    for key in a.cols:
        assert np.array_equal(a.cols[key], b.cols[key]), key
    for store in ("cum", "ep"):
        for key, value in getattr(a, store).items():
            assert np.array_equal(value, getattr(b, store)[key]), (store, key)
    assert np.array_equal(a.pool, b.pool) and np.array_equal(a.position, b.position) and a.pool_size == b.pool_size
    assert (a.profit_total, a.admit_reward_total) == (b.profit_total, b.admit_reward_total)
    assert a.model.log.count == b.model.log.count
    assert a.last_idx.tolist() == b.last_idx.tolist() and a.last_rewards.tolist() == b.last_rewards.tolist()
    assert np.array_equal(a.observe(np.array([3])), b.observe(np.array([3, 4]))[:1])


@pytest.mark.parametrize("n", [1, 3, 7, 1000, 10_000, 2**31 - 1, 2**32, 2**32 + 5, 10**12])
def test_block_draws_are_the_scalar_draws(n):
    """``steps.BlockDraws`` rests on numpy giving the same numbers, and leaving the generator in
    the same state, whether B values are drawn at once or one by one: checked here on the
    installed numpy for bounded integers (the applicant picks) and uniforms (the outcomes)."""
    from abm.families.steps import BLOCK, BlockDraws

    for kind in ("integers", "random"):
        one, block = np.random.default_rng(11), np.random.default_rng(11)
        if kind == "integers":
            expected = [int(one.integers(n)) for _ in range(3 * BLOCK + 5)]
            stream = BlockDraws(lambda size: block.integers(n, size=size))
        else:
            expected = [one.random() for _ in range(3 * BLOCK + 5)]
            stream = BlockDraws(block.random)
        got = [stream.next() for _ in range(3 * BLOCK + 5)]
        assert got == expected and all(type(x) is type(y) for x, y in zip(got, expected))
        for _ in range(BLOCK - 5):  # the rest of the last block: both generators at one state
            one.integers(n) if kind == "integers" else one.random()
        assert one.bit_generator.state == block.bit_generator.state


@pytest.mark.parametrize("sets, blocks", [((), True), (("arrivals.process=poisson",), False),
                                          (("dynamics.model=mass_shift",), False)])
def test_lending_draws_in_blocks_only_where_nothing_else_draws(sets, blocks):
    """The applicant and outcome streams come in blocks only while nothing else draws from them
    between two applicants (Poisson gaps and the mass-shift hook use the arrival stream), and the
    block path gives the trajectory of the scalar one: the same world, forced onto scalar draws,
    ends with every column equal."""
    from abm.families.score_lending import ScoreLendingWorld
    from abm.families.steps import BlockDraws

    def run(force_scalar: bool):
        sc = load_scenario(SCENARIOS / "lending-credit.yaml", ["seed=5", "population.size=300",
                                                               "episodes.count=2", "episodes.horizon=400", *sets],
                           policy="max_util")
        if force_scalar:
            original = ScoreLendingWorld._draws_in_blocks
            ScoreLendingWorld._draws_in_blocks = lambda self: False
        try:
            sim = simulation(sc)
            used = isinstance(getattr(sim.world._outcome_draw, "__self__", None), BlockDraws)
            sim.run()
        finally:
            if force_scalar:
                ScoreLendingWorld._draws_in_blocks = original
        return sim.world, used

    (blocked, used), (scalar, _) = run(False), run(True)
    assert used == blocks
    for key in blocked.cols:
        assert np.array_equal(blocked.cols[key], scalar.cols[key], equal_nan=True), key
    assert blocked.profit_total == scalar.profit_total
