"""Reproduce the comparison of seed 001's Figure 1 under exact evaluation.

    python -m policies.fair_mdp.figure1 [--gamma 0.5] [--horizon 50] [--epsilon 0.1] [--seed 0]

Prints a markdown table: for DP and EO, the reward and constraint value of race-blind,
optimistic, CCE (Algorithm 2), the LP (Algorithm 1) and the conservative baselines, and which
of the seed's orderings hold.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from .baselines import conservative_policy, optimistic_policy, race_blind_policy
from .cce import CCEConfig, ExactEvaluator, constrained_cross_entropy, loan_features, \
    sigmoid_policy
from .evaluate import Constraint, evaluate_policy
from .lp import solve_fair_lp
from .mdp import LoanMDPParams, build_loan_mdp


def compare(params: LoanMDPParams, constraint: Constraint, epsilon: float,
            seed: int) -> dict[str, tuple[float, float, float]]:
    """name -> (reward <Lambda, R>, discounted return, constraint value)."""
    mdp = build_loan_mdp(params)
    evaluator = ExactEvaluator(mdp, constraint, loan_features(mdp))
    cce = constrained_cross_entropy(evaluator, evaluator.features.shape[1],
                                    CCEConfig(epsilon=epsilon), np.random.default_rng(seed))
    policies = {
        "race-blind": race_blind_policy(mdp),
        "optimistic (LP)": optimistic_policy(mdp, constraint, epsilon).policy,
        "Algorithm 2 (CCE)": sigmoid_policy(evaluator.features, cce.theta),
        "Algorithm 1 (LP)": solve_fair_lp(mdp, constraint, epsilon).policy,
        "conservative (one q)": conservative_policy(mdp, constraint, epsilon).policy,
        "conservative (q per group)": conservative_policy(mdp, constraint, epsilon,
                                                          per_group=True).policy,
    }
    rows = {}
    for name, policy in policies.items():
        evaluation = evaluate_policy(mdp, policy)
        rows[name] = (evaluation.reward, evaluation.discounted_return,
                      evaluation.constraint_value(constraint))
    return rows


def orderings(rows: dict[str, tuple[float, float, float]], epsilon: float) -> list[str]:
    """The seed's Figure-1 claims, each marked as holding or not."""
    r = {k: v[0] for k, v in rows.items()}
    c = {k: v[2] for k, v in rows.items()}
    blind, opt, cce, cons = ("race-blind", "optimistic (LP)", "Algorithm 2 (CCE)",
                             "conservative (one q)")
    claims = [
        ("reward: race-blind >= optimistic", r[blind] >= r[opt] - 1e-12),
        ("reward: optimistic >= Algorithm 2", r[opt] >= r[cce] - 1e-12),
        ("reward: Algorithm 2 > conservative", r[cce] > r[cons]),
        ("constraint: race-blind > optimistic", c[blind] > c[opt]),
        ("constraint: optimistic > Algorithm 2", c[opt] > c[cce]),
        (f"constraint: Algorithm 2 <= epsilon = {epsilon}", c[cce] <= epsilon + 1e-12),
        ("constraint: conservative = 0", abs(c[cons]) <= 1e-12),
    ]
    return [f"{'holds' if ok else 'FAILS'}: {text}" for text, ok in claims]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gamma", type=float, default=LoanMDPParams.gamma)
    parser.add_argument("--horizon", type=int, default=LoanMDPParams.horizon)
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        params = LoanMDPParams(gamma=args.gamma, horizon=args.horizon)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"gamma={params.gamma} horizon={params.horizon} epsilon={args.epsilon} "
          f"seed={args.seed}\n")
    for constraint in (Constraint.DEMOGRAPHIC_PARITY, Constraint.EQUAL_OPPORTUNITY):
        start = time.perf_counter()
        rows = compare(params, constraint, args.epsilon, args.seed)
        print(f"### {constraint.name.replace('_', ' ').lower()} "
              f"({time.perf_counter() - start:.0f} s)\n")
        print("| policy | reward <Lambda,R> | discounted return | constraint value |")
        print("|---|---:|---:|---:|")
        for name, (reward, ret, value) in rows.items():
            print(f"| {name} | {reward:.6f} | {ret:.6f} | {value:.4f} |")
        print()
        for line in orderings(rows, args.epsilon):
            print(f"- {line}")
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
