"""Explore-then-commit over repeated runs: how often the committed policy breaks epsilon.

    python -m policies.fair_mdp.etc_violations [--gamma 0.8] [--presimulation 7 10] [--horizon 8]
        [--constraint dp] [--epsilon 0.1] [--n0 1000 ...] [--runs 40] [--factor 0.25 1.0] [--seed 0]

For each N0 and planning factor: the number of runs (of `runs` independent explorations) whose
committed policy has |gap| > epsilon under the true P, its one-sided 95% Clopper-Pearson upper
bound, the committed gaps, and the exact regret of one committed / exploring episode against
pi* (the fair LP on the true P at the planning tolerance).  See ``etc``.
"""
from __future__ import annotations

import numpy as np

from abm.families.loan_mdp.evaluate import evaluate_policy
from abm.families.loan_mdp.mdp import LoanMDPParams, build_loan_mdp

from .etc import DEFAULT_PLAN_EPSILON_FACTOR, repeat_explore_then_commit
from .lp import solve_fair_lp


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys
    import time

    parser = argparse.ArgumentParser(description="explore-then-commit: violation frequency over repeated runs")
    parser.add_argument("--gamma", type=float, default=0.8)
    parser.add_argument("--presimulation", type=int, nargs=2, default=(7, 10), metavar=("T_MIN", "T_MAJ"))
    parser.add_argument("--horizon", type=int, default=8)
    parser.add_argument("--constraint", choices=("dp", "eo"), default="dp")
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--n0", type=int, nargs="+", default=[1000])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--factor", type=float, nargs="+", default=[DEFAULT_PLAN_EPSILON_FACTOR, 1.0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        params = LoanMDPParams(gamma=args.gamma, presimulation_steps=tuple(args.presimulation),
                               horizon=args.horizon)
        if args.runs < 1 or min(args.n0) < 0 or not all(0 < f <= 1 for f in args.factor):
            raise ValueError("need --runs >= 1, --n0 >= 0 and each --factor in (0, 1]")
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    mdp = build_loan_mdp(params)
    unconstrained = evaluate_policy(mdp, solve_fair_lp(mdp, None, 0.0).policy)
    print(f"gamma={params.gamma} T={params.presimulation_steps} horizon={params.horizon} "
          f"{mdp.n_states} states; unconstrained |{args.constraint} gap| = "
          f"{unconstrained.constraint_value(args.constraint):.4f}, epsilon = {args.epsilon}\n")
    print("| N0 | planning epsilon | runs | violations (> epsilon) | 95% upper bound | mean abs(gap) "
          "| max abs(gap) | regret / committed episode | regret / exploring episode | R(pi*) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n0 in args.n0:
        for factor in args.factor:
            start = time.perf_counter()
            out = repeat_explore_then_commit(mdp, args.constraint, args.epsilon, n0, args.runs,
                                             np.random.default_rng(args.seed), plan_epsilon_factor=factor)
            print(f"| {n0} | {out.planning_epsilon:g} | {out.runs} | {out.violations} ({out.frequency:.3f}) | "
                  f"{out.upper_bound():.3f} | {out.constraint_value.mean():.4f} | {out.constraint_value.max():.4f} | "
                  f"{out.regret.mean():.5f} | {out.explore_regret:.5f} | {out.optimal_reward:.6f} |", flush=True)
            print(f"  ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
