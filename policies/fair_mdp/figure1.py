"""Reproduce the comparison of seed 001's Figure 1 under exact evaluation.

    python -m policies.fair_mdp.figure1 [--gamma 0.8] [--presimulation 7 10] [--horizon 50]
        [--conventions seed|public] [--elite-weighting reward|exponential|equal]
        [--policy-class linear|extended|tabular] [--epsilon 0.1] [--seed 0] [--cce-grid SEEDS]

Prints a markdown table: for DP and EO, the reward and constraint value of race-blind,
optimistic, CCE (Algorithm 2), the LP (Algorithm 1) and the conservative baselines, the
discounted return on the public code's +2-per-decision scale, and which of the seed's orderings
hold; ``--cce-grid SEEDS`` prints instead CCE's reward per policy class and elite weighting.
The defaults are Figure 1's setting (gamma 0.8, T = (7, 10), as the authors' public
Figure-1 scripts), not the model's code defaults (CEM_loan.py's gamma 0.5, T = (1, 5)).
``--conventions public`` switches to the public code's sd risk term, +2 per decision,
undiscounted offers / 50 and 51 decisions (the ``--horizon`` given is then h, 51 = h + 1).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from abm.families.loan_mdp.evaluate import Constraint, evaluate_policy
from abm.families.loan_mdp.mdp import LoanMDPParams, build_loan_mdp

from .baselines import conservative_policy, optimistic_policy, race_blind_policy
from .cce import CCEConfig, ExactEvaluator, constrained_cross_entropy, loan_features, \
    sigmoid_policy
from .lp import solve_fair_lp


PUBLIC_CONVENTIONS = {"risk_term": "sd", "reward_offset": 2.0, "fairness_average": "undiscounted"}
"""The public code's conventions (wmgithub/fairness): with horizon h + 1 and divisor h."""


def figure1_params(gamma: float = 0.8, presimulation: tuple[int, int] = (7, 10), horizon: int = 50,
                   conventions: str = "seed") -> LoanMDPParams:
    """Figure 1's MDP: the seed's definitions, or the public code's (h + 1 decisions, offers / h)."""
    if conventions == "public":
        return LoanMDPParams(gamma=gamma, presimulation_steps=tuple(presimulation), horizon=horizon + 1,
                             fairness_divisor=float(horizon), **PUBLIC_CONVENTIONS)
    if conventions != "seed":
        raise ValueError(f"conventions must be seed or public, got {conventions!r}")
    return LoanMDPParams(gamma=gamma, presimulation_steps=tuple(presimulation), horizon=horizon)


def compare(params: LoanMDPParams, constraint: Constraint, epsilon: float,
            seed: int, elite_weighting: str = "reward",
            policy_class: str = "linear") -> dict[str, tuple[float, float, float]]:
    """name -> (reward <Lambda, R>, discounted return, constraint value)."""
    mdp = build_loan_mdp(params)
    evaluator = ExactEvaluator(mdp, constraint, loan_features(mdp, policy_class=policy_class))
    cce = constrained_cross_entropy(evaluator, evaluator.features.shape[1],
                                    CCEConfig(epsilon=epsilon, elite_weighting=elite_weighting),
                                    np.random.default_rng(seed),
                                    reward_baseline=evaluator.reward_lower_bound)
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


def cce_grid(params: LoanMDPParams, epsilon: float, seeds: int = 3) -> list[str]:
    """Markdown rows: CCE's mean reward (and shortfall from the LP) per policy class and elite
    weighting, for DP and EO, over CCE seeds 0 .. seeds - 1 (infeasible results count as nan)."""
    mdp = build_loan_mdp(params)
    lines = ["| class (parameters) | DP: reward (seed's) | exponential (public code) | equal "
             "| EO: reward | exponential | equal |", "|---|---:|---:|---:|---:|---:|---:|"]
    optimum = {c: solve_fair_lp(mdp, c, epsilon).objective for c in ("dp", "eo")}
    lines.append(f"| LP optimum | {optimum['dp']:.6f} | | | {optimum['eo']:.6f} | | |")
    for policy_class in ("linear", "extended", "tabular"):
        features = loan_features(mdp, policy_class=policy_class)
        cells = []
        for constraint in ("dp", "eo"):
            evaluator = ExactEvaluator(mdp, constraint, features)
            for weighting in ("reward", "exponential", "equal"):
                rewards = []
                for seed in range(seeds):
                    out = constrained_cross_entropy(evaluator, features.shape[1],
                                                    CCEConfig(epsilon=epsilon, elite_weighting=weighting),
                                                    np.random.default_rng(seed),
                                                    reward_baseline=evaluator.reward_lower_bound)
                    rewards.append(out.reward if out.feasible else np.nan)
                mean = float(np.mean(rewards))
                cells.append(f"{mean:.6f} ({100 * (1 - mean / optimum[constraint]):.1f}%)")
        lines.append(f"| {policy_class} ({features.shape[1]}) | " + " | ".join(cells) + " |")
    return lines


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
    parser.add_argument("--gamma", type=float, default=0.8)
    parser.add_argument("--presimulation", type=int, nargs=2, default=(7, 10), metavar=("T_MIN", "T_MAJ"))
    parser.add_argument("--horizon", type=int, default=LoanMDPParams.horizon)
    parser.add_argument("--conventions", choices=("seed", "public"), default="seed")
    parser.add_argument("--elite-weighting", choices=("reward", "exponential", "equal"), default="reward")
    parser.add_argument("--policy-class", choices=("linear", "extended", "tabular"), default="linear")
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cce-grid", type=int, default=0, metavar="SEEDS",
                        help="instead: CCE's reward per policy class x elite weighting (mean over SEEDS seeds)")
    args = parser.parse_args(argv)
    try:
        params = figure1_params(args.gamma, tuple(args.presimulation), args.horizon, args.conventions)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.cce_grid:
        print(f"gamma={params.gamma} T={params.presimulation_steps} horizon={params.horizon} "
              f"conventions={args.conventions} epsilon={args.epsilon} CCE seeds 0-{args.cce_grid - 1}\n")
        print("\n".join(cce_grid(params, args.epsilon, args.cce_grid)))
        return 0
    print(f"gamma={params.gamma} T={params.presimulation_steps} horizon={params.horizon} "
          f"conventions={args.conventions} epsilon={args.epsilon} seed={args.seed} "
          f"CCE: {args.policy_class}, {args.elite_weighting} weights\n")
    shift = params.paper_scale_shift()
    for constraint in (Constraint.DEMOGRAPHIC_PARITY, Constraint.EQUAL_OPPORTUNITY):
        start = time.perf_counter()
        rows = compare(params, constraint, args.epsilon, args.seed, args.elite_weighting, args.policy_class)
        print(f"### {constraint.name.replace('_', ' ').lower()} "
              f"({time.perf_counter() - start:.0f} s)\n")
        print("| policy | reward <Lambda,R> | discounted return | paper-scale return | constraint value |")
        print("|---|---:|---:|---:|---:|")
        for name, (reward, ret, value) in rows.items():
            print(f"| {name} | {reward:.6f} | {ret:.6f} | {ret + shift:.4f} | {value:.4f} |")
        print()
        for line in orderings(rows, args.epsilon):
            print(f"- {line}")
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
