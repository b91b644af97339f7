"""Fair sequential lending decisions on a known MDP (seed 001): the planners.

The model they plan on (the MDP, its state lookup, the exact evaluator) is the families
layer's ``abm.families.loan_mdp``, which the ``beta_belief`` family is built on; it is
re-exported here for convenience.  Apart from the registered lenders (`policies.py`) and the
rollout evaluator (`rollout.py`, short runs of the `beta_belief` world) this package is pure
maths: numpy + scipy.  Model and definitions: docs/MODEL.md, "Fair sequential decisions on a
known MDP (seed 001)".

Model (`abm.families.loan_mdp.mdp`, re-exported)
    LoanMDPParams(...)                      frozen, validated parameters (seed defaults)
    build_loan_mdp(params) -> LoanMDP       enumerated states, sparse P[a], R, rho, D
    bank_reward(alpha, beta, params)        E[profit] - risk term (variance or sd) (+ offset)
Evaluation (`abm.families.loan_mdp.evaluate`, re-exported)
                                            policies are pi[s] = P(accept | s) or pi[s, a]
    evaluate_policy(mdp, pi) -> PolicyEvaluation(reward, discounted_return, offer_rate,
                                qualified_offer_rate, occupancy; dp_gap, eo_gap,
                                constraint_value(constraint))
    occupancy_measure(mdp, pi), state_occupancy(mdp, pi), value_function(mdp, pi)
    Constraint.DEMOGRAPHIC_PARITY / EQUAL_OPPORTUNITY, LayeredEvaluator(mdp)
Algorithm 1 (`lp`)
    solve_fair_lp(mdp, constraint, epsilon) -> LPSolution(policy, occupancy, objective)
Algorithm 2 (`cce`)
    constrained_cross_entropy(evaluate, dim, CCEConfig(..., elite_weighting=reward|exponential|
                              equal), rng, reward_baseline=None) -> CCEResult
    ExactEvaluator(mdp, constraint, loan_features(mdp, policy_class=linear|extended|tabular))
                                            theta -> (reward, constraint value)
    sigmoid_policy(features, theta), elite_weights(rewards, weighting, baseline)
Baselines (`baselines`)
    unconstrained_optimum(mdp), race_blind_policy(mdp),
    optimistic_policy(mdp, constraint, epsilon) -> LPSolution,
    conservative_policy(mdp, constraint, epsilon, per_group=False) -> ConservativeSolution
Unknown transitions (`etc`)                plans at plan_epsilon_factor x epsilon (0.25)
    explore_then_commit(mdp, constraint, epsilon, n_explore, n_episodes, rng) -> ETCResult
    repeat_explore_then_commit(mdp, constraint, epsilon, n_explore, runs, rng) -> ETCRepeated
        (violation frequency over repeated runs, Clopper-Pearson bound, regret vs pi*)
    python -m policies.fair_mdp.etc_violations [--horizon 8] [--n0 1000] [--runs 40] [--factor 0.25 1.0]
Figure 1 table: python -m policies.fair_mdp.figure1 [--conventions seed|public] (Figure 1's
    gamma 0.8, T = (7, 10) by default); from a finished fig1 study:
    abm report outputs/studies/fig1 (report/seed001_tables.md, abm.reports.seed001)
"""
from abm.families.loan_mdp.evaluate import (Constraint, LayeredEvaluator, PolicyEvaluation,
                                           evaluate_policy, occupancy_measure, state_occupancy,
                                           value_function)
from abm.families.loan_mdp.mdp import (MAJORITY, MINORITY, Action, LoanMDP, LoanMDPParams,
                                      bank_reward, build_loan_mdp)

from .baselines import (conservative_policy, optimistic_policy, race_blind_policy,
                        unconstrained_optimum)
from .cce import (CCEConfig, CCEResult, ExactEvaluator, constrained_cross_entropy,
                  elite_weights, loan_features, sigmoid_policy)
from .etc import ETCRepeated, ETCResult, explore_then_commit, repeat_explore_then_commit
from .lp import LPSolution, solve_fair_lp

__all__ = [
    "Action", "CCEConfig", "CCEResult", "Constraint", "ETCRepeated", "ETCResult", "ExactEvaluator",
    "LPSolution", "LayeredEvaluator", "LoanMDP", "LoanMDPParams", "MAJORITY", "MINORITY",
    "PolicyEvaluation", "bank_reward", "build_loan_mdp", "conservative_policy",
    "constrained_cross_entropy", "elite_weights", "evaluate_policy", "explore_then_commit",
    "loan_features", "repeat_explore_then_commit",
    "occupancy_measure", "optimistic_policy", "race_blind_policy", "sigmoid_policy",
    "solve_fair_lp", "state_occupancy", "unconstrained_optimum", "value_function",
]
