"""Tests of the seed-001 loan MDP and its exact evaluation (abm.families.loan_mdp) and of the
planners on it (policies.fair_mdp): LP, CCE, baselines, ETC."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from abm.config import load_scenario
from abm.families.loan_mdp.evaluate import (Constraint, LayeredEvaluator, evaluate_policy,
                                           subpopulation_masks, value_function)
from abm.families.loan_mdp.mdp import (MAJORITY, MINORITY, Action, LoanMDPParams, bank_reward,
                                      build_loan_mdp, presimulated_distribution)
from policies.fair_mdp.baselines import (conservative_policy, depends_only_on_belief,
                                         optimistic_policy, race_blind_policy,
                                         unconstrained_optimum)
from policies.fair_mdp.cce import (CCEConfig, ExactEvaluator, constrained_cross_entropy,
                                   loan_features, sigmoid_policy)
from policies.fair_mdp.etc import explore_then_commit, simulate_transitions
from policies.fair_mdp.lp import solve_fair_lp

DP = Constraint.DEMOGRAPHIC_PARITY
EO = Constraint.EQUAL_OPPORTUNITY
# The numbers below are pinned at CEM_loan.py's setting (gamma 0.5, T = (1, 5)), the named
# variant beta-belief-loans-cem.yaml, not at the default (Figure 1's gamma 0.8, T = (7, 10)).
CEM = load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / "beta-belief-loans-cem.yaml").mdp_params()

# Two groups with clearly different priors and a 2-epoch horizon: 8 or 12 decision states,
# small enough to enumerate every deterministic policy.
TINY = LoanMDPParams(prior_alpha=(1.5, 3.0), prior_beta=(1.0, 0.5), presimulation_steps=(0, 0),
                     horizon=2, gamma=0.8, qualified_threshold=0.5)
TINY_EO = LoanMDPParams(prior_alpha=(1.5, 3.0), prior_beta=(1.0, 0.5),
                        presimulation_steps=(1, 0), horizon=2, gamma=0.8,
                        qualified_threshold=0.5)
# CEM_loan.py's setting at a short horizon: unconstrained DP gap 0.72, EO gap 0.85.
SMALL = replace(CEM, horizon=8)


@pytest.fixture(scope="module")
def small_mdp():
    return build_loan_mdp(SMALL)


# ---------------------------------------------------------------------------- model

def test_presimulation_is_beta_binomial():
    dist = presimulated_distribution(1.51578208, 0.19009129, 5)
    expected = stats.betabinom.pmf(np.arange(6), 5, 1.51578208, 0.19009129)
    np.testing.assert_allclose(dist, expected, rtol=1e-12)


def test_default_initial_distribution_and_groups():
    mdp = build_loan_mdp(replace(CEM, horizon=3))
    entry = mdp.initial_distribution > 0
    assert mdp.initial_distribution.sum() == pytest.approx(1.0, abs=1e-14)
    assert mdp.initial_distribution[mdp.group == MAJORITY].sum() == pytest.approx(0.70705682)
    # T_min = 1 -> 2 entry states, T_maj = 5 -> 6 entry states, all at depth 0.
    assert (entry & (mdp.group == MINORITY)).sum() == 2
    assert (entry & (mdp.group == MAJORITY)).sum() == 6
    assert np.all(mdp.depth[entry] == 0)
    # Qualified at entry (mean >= 0.82): minority with one repayment, majority with 4 or 5.
    qualified_means = np.sort(mdp.repay_probability[entry & mdp.qualified])
    np.testing.assert_allclose(qualified_means, [5.51578208 / 6.70587337,
                                                 2.4614873 / 2.97628441,
                                                 6.51578208 / 6.70587337])


def test_transitions_follow_the_beta_update():
    mdp = build_loan_mdp(replace(CEM, horizon=3))
    for matrix in mdp.transition:
        np.testing.assert_allclose(np.asarray(matrix.sum(axis=1)).ravel(), 1.0, atol=1e-14)
    s = int(np.flatnonzero((mdp.initial_distribution > 0) & (mdp.group == MINORITY))[0])
    a, b = mdp.alpha[s], mdp.beta[s]
    accept = mdp.transition[Action.ACCEPT][s].toarray().ravel()
    nxt = np.flatnonzero(accept)
    got = {(round(mdp.alpha[t], 9), round(mdp.beta[t], 9)): accept[t] for t in nxt}
    assert got == {(round(a + 1, 9), round(b, 9)): pytest.approx(a / (a + b)),
                   (round(a, 9), round(b + 1, 9)): pytest.approx(b / (a + b))}
    reject = mdp.transition[Action.REJECT][s].toarray().ravel()
    t = int(np.flatnonzero(reject)[0])
    assert (mdp.alpha[t], mdp.beta[t]) == pytest.approx((a, b + 0.1))
    assert mdp.group[t] == mdp.group[s] and mdp.qualified[t] == mdp.qualified[s]


def test_bank_reward_is_mean_minus_lambda_variance():
    params = LoanMDPParams()
    # Beta(3, 1): mean 0.75, variance 3 / (16 * 5) = 0.0375.
    scale = 1.17318629
    expected = scale * 0.75 - 1.0 - 0.01 * scale ** 2 * 0.0375
    assert bank_reward(np.array([3.0]), np.array([1.0]), params)[0] == pytest.approx(expected)


@pytest.mark.parametrize("bad", [dict(gamma=1.0), dict(horizon=0), dict(majority_share=1.5),
                                 dict(prior_alpha=(0.0, 1.0)), dict(presimulation_steps=(-1, 2))])
def test_invalid_parameters_fail_loudly(bad):
    with pytest.raises(ValueError):
        LoanMDPParams(**bad)


# ---------------------------------------------------------------------------- evaluation

def test_evaluation_matches_hand_computed_tree():
    """Horizon 2, one entry state per group: sum_t gamma^t E[R_t] enumerated by hand."""
    mdp = build_loan_mdp(TINY)
    params, gamma = TINY, TINY.gamma
    accept_probability = 0.3
    expected_return, expected_rate = 0.0, {}
    for z in (MINORITY, MAJORITY):
        a, b = params.prior_alpha[z], params.prior_beta[z]
        share = params.group_share(z)
        p = a / (a + b)
        successors = [(accept_probability * p, a + 1, b),
                      (accept_probability * (1 - p), a, b + 1),
                      (1 - accept_probability, a, b + params.reject_penalty)]
        step1 = sum(w * bank_reward(np.array([x]), np.array([y]), params)[0]
                    for w, x, y in successors)
        step0 = bank_reward(np.array([a]), np.array([b]), params)[0]
        expected_return += share * accept_probability * (step0 + gamma * step1)
        expected_rate[z] = (1 - gamma) * accept_probability * (1 + gamma)
    evaluation = evaluate_policy(mdp, np.full(mdp.n_states, accept_probability))
    assert evaluation.discounted_return == pytest.approx(expected_return, rel=1e-12)
    assert evaluation.reward == pytest.approx((1 - gamma) * expected_return, rel=1e-12)
    assert evaluation.offer_rate == pytest.approx((expected_rate[0], expected_rate[1]))
    assert evaluation.dp_gap == pytest.approx(0.0, abs=1e-15)


def test_occupancy_value_and_layered_agree(small_mdp):
    rng = np.random.default_rng(1)
    policy = rng.random(small_mdp.n_states)
    evaluation = evaluate_policy(small_mdp, policy)
    assert evaluation.occupancy.sum() == pytest.approx(1.0, abs=1e-12)
    values = value_function(small_mdp, policy)
    assert evaluation.discounted_return == pytest.approx(
        values @ small_mdp.initial_distribution, rel=1e-11)
    layered = LayeredEvaluator(small_mdp).state_occupancy(policy)
    np.testing.assert_allclose(layered, evaluation.occupancy.sum(axis=1), atol=1e-15)
    # Separability: each group's discounted state mass is its initial mass.
    for z in (MINORITY, MAJORITY):
        mask = small_mdp.group == z
        assert evaluation.occupancy[mask].sum() == pytest.approx(
            small_mdp.initial_distribution[mask].sum(), rel=1e-12)


def test_policy_validation(small_mdp):
    with pytest.raises(ValueError, match="shape"):
        evaluate_policy(small_mdp, np.zeros(3))
    with pytest.raises(ValueError, match="accept probabilities"):
        evaluate_policy(small_mdp, np.full(small_mdp.n_states, 1.5))


# ---------------------------------------------------------------------------- LP vs brute force

def _batch_evaluate(mdp, constraint, policies):
    """Exact (reward, signed gap) of many policies at once on a tiny MDP (dense solves)."""
    p0 = mdp.transition[Action.REJECT].toarray()
    p1 = mdp.transition[Action.ACCEPT].toarray()
    p_pi = p0[None] + policies[:, :, None] * (p1 - p0)[None]
    system = np.eye(mdp.n_states)[None] - mdp.gamma * np.transpose(p_pi, (0, 2, 1))
    rhs = np.broadcast_to((1 - mdp.gamma) * mdp.initial_distribution,
                          (len(policies), mdp.n_states))[..., None]
    occupancy = np.linalg.solve(system, rhs)[..., 0]
    accepted = occupancy * policies
    reward = (occupancy - accepted) @ mdp.reward[:, 0] + accepted @ mdp.reward[:, 1]
    low, high = subpopulation_masks(mdp, constraint)
    weight = mdp.individual_reward[:, 1] * (high / mdp.initial_distribution[high].sum()
                                            - low / mdp.initial_distribution[low].sum())
    return reward, accepted @ weight


def _brute_force_optimum(mdp, constraint, epsilon):
    """Best policy randomising in at most one state (enough for one active constraint,
    Altman 1999).  On a DAG reward and gap are affine in pi(s) for a single s, so each edge
    of the hypercube of deterministic policies is optimised exactly."""
    live = np.flatnonzero(~mdp.terminal)
    n = len(live)
    bits = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(float)
    policies = np.zeros((2 ** n, mdp.n_states))
    policies[:, live] = bits
    reward, gap = _batch_evaluate(mdp, constraint, policies)
    best = reward[np.abs(gap) <= epsilon].max(initial=-np.inf)
    for k in range(n):
        lo = np.flatnonzero(bits[:, k] == 0)
        hi = lo + 2 ** k
        dr, dg = reward[hi] - reward[lo], gap[hi] - gap[lo]
        with np.errstate(divide="ignore", invalid="ignore"):
            t1 = (epsilon - gap[lo]) / dg
            t2 = (-epsilon - gap[lo]) / dg
        t_min = np.where(dg == 0, 0.0, np.maximum(np.minimum(t1, t2), 0.0))
        t_max = np.where(dg == 0, 1.0, np.minimum(np.maximum(t1, t2), 1.0))
        ok = (t_min <= t_max) & ((dg != 0) | (np.abs(gap[lo]) <= epsilon))
        t = np.where(dr > 0, t_max, t_min)
        candidate = reward[lo] + t * dr
        best = max(best, candidate[ok].max(initial=-np.inf))
        if k == 0:   # check the affine claim on a few edges
            mid = policies[lo[:4]].copy()
            mid[:, live[k]] = 0.5
            r_mid, g_mid = _batch_evaluate(mdp, constraint, mid)
            np.testing.assert_allclose(r_mid, reward[lo[:4]] + 0.5 * dr[:4], atol=1e-14)
            np.testing.assert_allclose(g_mid, gap[lo[:4]] + 0.5 * dg[:4], atol=1e-14)
    return best, policies, reward, gap


@pytest.mark.parametrize("params,constraint", [(TINY, DP), (TINY_EO, EO), (TINY_EO, DP)])
def test_lp_equals_brute_force_on_tiny_mdp(params, constraint):
    mdp = build_loan_mdp(params)
    unconstrained = evaluate_policy(mdp, unconstrained_optimum(mdp))
    epsilon = 0.4 * unconstrained.constraint_value(constraint)     # constraint binds
    lp = solve_fair_lp(mdp, constraint, epsilon)
    best, _, _, _ = _brute_force_optimum(mdp, constraint, epsilon)
    assert lp.objective == pytest.approx(best, abs=1e-10)
    assert lp.objective < unconstrained.reward - 1e-4
    # No fully stochastic policy does better (random search over [0, 1]^S).
    rng = np.random.default_rng(0)
    reward, gap = _batch_evaluate(mdp, constraint, rng.random((20000, mdp.n_states)))
    feasible = np.abs(gap) <= epsilon
    assert feasible.sum() > 100
    assert reward[feasible].max() <= lp.objective + 1e-12
    # The optimum is stochastic: no deterministic feasible policy reaches it.
    _, policies, det_reward, det_gap = _brute_force_optimum(mdp, constraint, epsilon)
    assert det_reward[np.abs(det_gap) <= epsilon].max() < lp.objective - 1e-6


@pytest.mark.parametrize("constraint", [DP, EO])
def test_lp_value_equals_exact_evaluation_and_satisfies_constraint(small_mdp, constraint):
    lp = solve_fair_lp(small_mdp, constraint, 0.1)
    evaluation = evaluate_policy(small_mdp, lp.policy)
    assert evaluation.reward == pytest.approx(lp.objective, abs=1e-9)
    assert evaluation.constraint_value(constraint) <= 0.1 + 1e-7
    # The unconstrained gap is ~0.7-0.85, so the constraint is active at the optimum.
    assert evaluation.constraint_value(constraint) == pytest.approx(0.1, abs=1e-7)


def test_lp_with_large_epsilon_is_the_unconstrained_optimum(small_mdp):
    best = evaluate_policy(small_mdp, unconstrained_optimum(small_mdp)).reward
    assert solve_fair_lp(small_mdp, DP, 1.0).objective == pytest.approx(best, abs=1e-10)
    assert solve_fair_lp(small_mdp, None, 0.0).objective == pytest.approx(best, abs=1e-10)
    exact_parity = solve_fair_lp(small_mdp, DP, 0.0)
    assert abs(evaluate_policy(small_mdp, exact_parity.policy).dp_gap) <= 1e-7
    assert exact_parity.objective < best


# ---------------------------------------------------------------------------- CCE

def test_cce_finds_constrained_optimum_of_a_toy_problem():
    """evaluate(theta) = (-|theta - (1, 2)|^2, |theta_0|): optimum theta = (0.9 (1-s), 2)."""
    target = np.array([1.0, 2.0])

    def evaluate(theta):
        return -float(np.sum((theta - target) ** 2)), abs(float(theta[0]))

    config = CCEConfig(n_samples=200, n_iterations=60, epsilon=0.5, sigma=0.1)
    result = constrained_cross_entropy(evaluate, 2, config, np.random.default_rng(3))
    assert result.feasible and result.constraint_value <= 0.45
    np.testing.assert_allclose(result.theta, [0.45, 2.0], atol=0.02)


def test_cce_on_loan_mdp_is_fair_deterministic_and_below_lp(small_mdp):
    evaluator = ExactEvaluator(small_mdp, DP, loan_features(small_mdp))
    config = CCEConfig(n_samples=40, n_iterations=25)
    first = constrained_cross_entropy(evaluator, 4, config, np.random.default_rng(7))
    again = constrained_cross_entropy(evaluator, 4, config, np.random.default_rng(7))
    np.testing.assert_array_equal(first.theta, again.theta)
    exact = evaluate_policy(small_mdp, sigmoid_policy(evaluator.features, first.theta))
    assert first.feasible
    assert exact.constraint_value(DP) == pytest.approx(first.constraint_value, abs=1e-12)
    assert exact.constraint_value(DP) <= config.threshold + 1e-12
    assert exact.reward == pytest.approx(first.reward, abs=1e-12)
    lp = solve_fair_lp(small_mdp, DP, config.epsilon)
    assert exact.reward <= lp.objective + 1e-12
    # The 4-parameter sigmoid class cannot represent the LP optimum; it gets most of it.
    assert exact.reward > 0.6 * lp.objective


def test_cce_requires_a_generator():
    with pytest.raises(TypeError, match="Generator"):
        constrained_cross_entropy(lambda t: (0.0, 0.0), 1, CCEConfig(n_iterations=1), 0)


# ---------------------------------------------------------------------------- baselines

@pytest.mark.parametrize("constraint", [DP, EO])
def test_optimistic_violates_where_lp_does_not(small_mdp, constraint):
    """Constraining only the static first decision lets the gap grow through dynamics."""
    optimistic = optimistic_policy(small_mdp, constraint, 0.1)
    opt_eval = evaluate_policy(small_mdp, optimistic.policy)
    lp_eval = evaluate_policy(small_mdp, solve_fair_lp(small_mdp, constraint, 0.1).policy)
    # The static (initial-distribution) gap of the optimistic policy is within epsilon ...
    low, high = subpopulation_masks(small_mdp, constraint)
    d0, pi = small_mdp.initial_distribution, optimistic.policy
    static_gap = (d0 * pi)[high].sum() / d0[high].sum() - (d0 * pi)[low].sum() / d0[low].sum()
    assert abs(static_gap) <= 0.1 + 1e-7
    # ... but its discounted gap is not, while the LP's is; the LP pays for it in reward.
    assert opt_eval.constraint_value(constraint) > 0.15
    assert lp_eval.constraint_value(constraint) <= 0.1 + 1e-7
    assert opt_eval.reward > lp_eval.reward
    assert optimistic.objective == pytest.approx(opt_eval.reward, abs=1e-9)


@pytest.mark.parametrize("per_group", [False, True])
def test_conservative_is_state_independent(small_mdp, per_group):
    solution = conservative_policy(small_mdp, DP, 0.1, per_group=per_group)
    evaluation = evaluate_policy(small_mdp, solution.policy)
    for z in (MINORITY, MAJORITY):
        assert np.unique(solution.policy[small_mdp.group == z]).size == 1
    assert evaluation.reward == pytest.approx(solution.reward, abs=1e-12)
    assert evaluation.reward <= solve_fair_lp(small_mdp, DP, 0.1).objective
    if per_group:
        assert evaluation.constraint_value(DP) <= 0.1 + 1e-9
    else:
        assert np.unique(solution.policy).size == 1
        assert evaluation.constraint_value(DP) == pytest.approx(0.0, abs=1e-12)
        assert evaluation.constraint_value(EO) == pytest.approx(0.0, abs=1e-12)


def test_race_blind_policy_ignores_the_group():
    # Identical priors and pre-simulation: the two groups share every belief state.
    params = LoanMDPParams(prior_alpha=(2.0, 2.0), prior_beta=(1.0, 1.0),
                           presimulation_steps=(1, 1), horizon=6)
    mdp = build_loan_mdp(params)
    blind = race_blind_policy(mdp)
    assert depends_only_on_belief(mdp, blind)
    assert not depends_only_on_belief(mdp, np.where(mdp.group == MAJORITY, 1.0, 0.0))
    best = evaluate_policy(mdp, unconstrained_optimum(mdp)).reward
    assert evaluate_policy(mdp, blind).reward == pytest.approx(best, abs=1e-12)
    # Same groups -> blind policy is fair.
    assert evaluate_policy(mdp, blind).dp_gap == pytest.approx(0.0, abs=1e-12)


# ---------------------------------------------------------------------------- ETC

def test_simulated_transitions_match_the_model():
    mdp = build_loan_mdp(TINY)
    counts = simulate_transitions(mdp, np.full(mdp.n_states, 1.0), 20000,
                                  np.random.default_rng(5))
    s = int(np.argmax(mdp.initial_distribution))            # majority entry, Beta(3, 0.5)
    row = counts[Action.ACCEPT][s].toarray().ravel()
    expected = mdp.transition[Action.ACCEPT][s].toarray().ravel()
    assert row.sum() == pytest.approx(20000 * mdp.initial_distribution[s], rel=0.03)
    np.testing.assert_allclose(row / row.sum(), expected, atol=0.01)   # ~4 sd
    assert counts[Action.REJECT].sum() == 0


def test_etc_estimate_converges_and_reports_every_episode():
    mdp = build_loan_mdp(replace(CEM, horizon=5))
    errors = []
    for n_explore in (30, 300, 3000):
        result = explore_then_commit(mdp, DP, 0.1, n_explore, 2 * n_explore,
                                     np.random.default_rng(11))
        errors.append(result.transition_error)
        assert result.regret.shape == result.violation.shape == (2 * n_explore,)
        # Exploration episodes use the uniform policy: fair, and worse than the optimum.
        assert np.all(result.violation[:n_explore] == 0.0)
        assert np.all(result.regret[:n_explore] > 0.0)
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.25 * errors[0]      # ~ 1 / sqrt(N0): 10x data -> ~3.2x smaller
    # With 3000 episodes the committed policy is near-optimal and near-fair.
    assert abs(result.regret[-1]) < 0.01 * result.optimal_reward + 1e-3
    assert result.constraint_value[-1] < 0.1 + 0.02


# ---------------------------------------------------------------------------- full size

@pytest.mark.slow
@pytest.mark.parametrize("constraint", [DP, EO])
def test_full_size_lp_matches_evaluation(constraint):
    mdp = build_loan_mdp(CEM)
    lp = solve_fair_lp(mdp, constraint, 0.05)
    evaluation = evaluate_policy(mdp, lp.policy)
    assert evaluation.reward == pytest.approx(lp.objective, abs=1e-8)
    assert evaluation.constraint_value(constraint) <= 0.05 + 1e-7
