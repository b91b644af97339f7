"""The seed-001 loan MDP (Wen, Bastani, Topcu): the model the ``beta_belief`` family is built on.

Pure maths (numpy + scipy), no simulation engine and nothing above the families layer.  Model
and definitions: docs/MODEL.md, "Fair sequential decisions on a known MDP (seed 001)".  The
planners solved on this model (fair LP, constrained cross-entropy, baselines,
explore-then-commit, the rollout evaluator and the registered lenders) live on the policy shelf,
``policies.fair_mdp``, and import this package, never the other way round.

Model (`mdp`)
    LoanMDPParams(...)                      frozen, validated parameters (Figure 1 defaults; the
                                            conventions risk_term, reward_offset,
                                            fairness_average, fairness_divisor)
    build_loan_mdp(params) -> LoanMDP       enumerated states, sparse P[a], R, rho, D
    bank_reward(alpha, beta, params)        R(s, accept): E[profit] - risk term (+ offset)
    reject_reward(params)                   R(s, reject): the offset (0 by default)
    fairness_weight(mdp)                    per-state weight of the DP/EO statistic on Lambda
    presimulated_distribution(a, b, T)      Beta-binomial law of the entry state
    MINORITY, MAJORITY, Action, PUBLIC_CODE_OFFSET
State lookup (`lookup`)                     the family's observation rows <-> MDP states
    OBS_FIELDS, state_observations(mdp), StateIndex(mdp)
Exact evaluation (`evaluate`)               policies are pi[s] = P(accept | s) or pi[s, a]
    evaluate_policy(mdp, pi) -> PolicyEvaluation(reward, discounted_return, offer_rate,
                                qualified_offer_rate, occupancy; dp_gap, eo_gap,
                                constraint_value(constraint))
    occupancy_measure(mdp, pi), state_occupancy(mdp, pi), value_function(mdp, pi),
    accept_probability, induced_transition, subpopulation_masks, subpopulation_rates
    Constraint.DEMOGRAPHIC_PARITY / EQUAL_OPPORTUNITY, LayeredEvaluator(mdp)

Import the submodules (``abm.families.loan_mdp.mdp`` ...): this file imports nothing, so the
family pays for scipy's sparse solvers only when it evaluates exactly.
"""
