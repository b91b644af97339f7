"""whynot's delayed-impact simulator (Liu et al. 2018) beside our ``fico`` family, one lending
step per applicant at fixed per-group thresholds (docs/results/whynot-fico.md).

    python benchmarks/whynot_side_by_side.py [--size 40000] [--seed 0] [--thresholds 450 600 750]

For every pair (t_black, t_white) of the given thresholds it prints, per group, the selection
rate, the repayment rate of the selected and the mean score change per group member, exact
(expected values from each implementation's own tables, decision rule and score update) and
simulated: our family run in memory (``abm.run``) with a fixed per-group threshold policy, and
whynot's ``dynamics`` applied to the same applicants (those who applied once in our run, at their
initial scores). Needs whynot 0.12.0 beside Mesa 3 (``make install``: ``pip install --no-deps
whynot==0.12.0 autograd``); its package ``__init__`` imports Mesa-0.8 models, so it is bypassed.

whynot 0.12.0 cannot run its own ``simulate`` here: a scalar score reaches
``Index.get_loc(..., method="nearest")``, which pandas 2 removed, and ``State.values()`` refuses
an array score. Its ``dynamics`` (one ``simulate`` step) runs on arrays, through its batched
nearest-score lookup; it draws repayment with one ``rng.uniform()`` per call, so it is handed an
object whose ``uniform()`` returns one independent uniform per applicant.
"""
from __future__ import annotations

import importlib
import importlib.util
import itertools
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from abm.families.fico import World, load_tables
from oneline import OneLineParser
from policies.base import NoParams, Policy

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "fico-delayed-impact.yaml"
GROUPS = ("black", "white")  # whynot's coding: group 0 Black, group 1 White
QUANTITIES = ("selection", "repayment", "score_change")
WHYNOT_MODULE = "whynot.simulators.delayed_impact.simulator"


def load_whynot():
    """whynot's delayed-impact simulator module, loaded without whynot's package ``__init__``
    (stub modules ``whynot`` and ``whynot.simulators`` whose ``__path__`` is the installed
    folder). Raises ImportError when whynot is not installed or the module does not load."""
    loaded = sys.modules.get(WHYNOT_MODULE)
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec("whynot")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("whynot is not installed (make install, or pip install --no-deps whynot==0.12.0 autograd)")
    root = Path(list(spec.submodule_search_locations)[0])
    for name, path in (("whynot", root), ("whynot.simulators", root / "simulators")):
        if name not in sys.modules:
            stub = types.ModuleType(name)
            stub.__path__ = [str(path)]
            sys.modules[name] = stub
    sys.modules["whynot"].simulators = sys.modules["whynot.simulators"]
    return importlib.import_module(WHYNOT_MODULE)


class GroupThresholdsParams(NoParams):
    thresholds: list[float] = Field(min_length=1, description="Approve iff score >= thresholds[group].")


class GroupThresholds(Policy):
    """Fixed per-group score thresholds, Liu et al.'s (and whynot's) rule: approve iff s >= t_g."""

    name = "group_thresholds"
    Params = GroupThresholdsParams
    requires = frozenset({"score_curve"})

    def _decide(self, obs, info):
        t = np.asarray(self.params.thresholds, dtype=float)
        return (self.column(obs, "credit_score") >= t[self.column(obs, "group").astype(np.int64)]).astype(float)


class PerApplicantUniforms:
    """An ``rng`` for whynot's ``dynamics``: its one ``uniform()`` call gets one draw per applicant."""

    def __init__(self, n: int, seed: int):
        self.draws = np.random.RandomState(seed).uniform(size=n)

    def uniform(self) -> np.ndarray:
        return self.draws


@dataclass
class Step:
    """One lending step of a cohort: who, at which score, and what happened."""

    group: np.ndarray
    before: np.ndarray
    approved: np.ndarray
    repaid: np.ndarray  # meaningful where approved
    after: np.ndarray

    def rates(self, g: int) -> dict[str, float]:
        mine = self.group == g
        chosen = mine & self.approved
        return {"n": int(mine.sum()), "selected": int(chosen.sum()),
                "selection": float(chosen.sum() / mine.sum()),
                "repayment": float(self.repaid[chosen].mean()) if chosen.any() else float("nan"),
                "score_change": float((self.after - self.before)[mine].mean())}


def ours(thresholds: tuple[float, float], size: int, seed: int) -> Step:
    """Our ``fico`` family in memory, one episode of size / 2 applications; the applicants who
    applied exactly once (independent of any outcome) are one lending step at their initial score."""
    import abm
    from abm.config import read_yaml

    data = read_yaml(SCENARIO)
    data["population"].update({"groups": list(GROUPS), "size": int(size)})
    data["episodes"].update({"count": 1, "horizon": float(size // 2)})
    data["outputs"]["events"] = False
    data["seed"] = int(seed)
    data["policy"] = {"name": _registered(), "thresholds": [float(t) for t in thresholds]}
    world = abm.run(data).model.world
    c = world.cols
    once = c["applications"] == 1
    return Step(c["group"][once].astype(np.int64), c["initial_score"][once], c["loans"][once] == 1,
                c["repayments"][once] == 1, c["score"][once])


def _registered() -> str:
    from abm import registry

    return registry.register_policy(GroupThresholds)


def theirs(sim, thresholds: tuple[float, float], group: np.ndarray, score: np.ndarray, seed: int) -> Step:
    """whynot's ``dynamics`` (one ``simulate`` step) on the cohort, at thresholds (t_0, t_1)."""
    config = sim.Config(threshold_g0=float(thresholds[0]), threshold_g1=float(thresholds[1]))
    n = len(group)
    _, after, profit = sim.dynamics((group, score.astype(float), np.zeros(n)), 0, config, None,
                                    PerApplicantUniforms(n, seed))
    # whynot's profit change: repayment_utility on a repaid loan, default_utility on a default, 0 else
    approved = profit != 0
    return Step(group, score, approved, profit == config.repayment_utility, np.asarray(after, dtype=float))


@dataclass
class Rule:
    """One implementation's one-step rule at given scores: the decision, P(repay) and the score
    change if the applicant would repay (``up``) or default (``down``), given the decision."""

    approved: np.ndarray
    p: np.ndarray
    up: np.ndarray
    down: np.ndarray

    def moments(self, weight: np.ndarray | None = None) -> dict[str, float]:
        """Selection rate, repayment rate of the selected and mean score change per member,
        expected under ``weight`` (None: the applicants' own mean)."""
        w = np.full(len(self.p), 1.0 / len(self.p)) if weight is None else weight / weight.sum()
        selection = float(w @ self.approved)
        return {"selection": selection,
                "repayment": float(w @ (self.approved * self.p)) / selection if selection > 0 else float("nan"),
                "score_change": float(w @ (self.p * self.up + (1 - self.p) * self.down))}


def rule_theirs(sim, thresholds, group: np.ndarray, score: np.ndarray) -> Rule:
    """whynot's own functions: ``lending_policy``, its repayment curve (nearest table score) and
    ``update_score`` as its ``dynamics`` applies it (clipped to [min_score, max_score] whatever
    the decision: a rejected applicant's score is clipped too)."""
    config = sim.Config(threshold_g0=float(thresholds[0]), threshold_g1=float(thresholds[1]))
    score = np.asarray(score, dtype=float)
    approved = np.asarray(sim.lending_policy(config, group, score), dtype=np.int64)
    p = np.where(group == 0, sim.LOAN_REPAY_PROBS[0](score), sim.LOAN_REPAY_PROBS[1](score))
    return Rule(approved.astype(bool), p.astype(float), sim.update_score(config, score, approved, 1) - score,
                sim.update_score(config, score, approved, 0) - score)


def rule_ours(thresholds, group: np.ndarray, score: np.ndarray, clip=None, clip_rejected: bool = False) -> Rule:
    """Our family's tables (P(repay) interpolated between table scores) and update (+75 / -150
    on a loan, clipped to ``World.score_range``); ``clip`` and ``clip_rejected`` put whynot's
    update on our tables instead (what the clip alone changes)."""
    tables = load_tables(list(GROUPS))
    lo, hi = World.score_range if clip is None else clip
    score = np.asarray(score, dtype=float)
    approved = score >= np.asarray(thresholds, dtype=float)[group]
    stay = np.clip(score, lo, hi) - score if clip_rejected else np.zeros(len(score))
    up = np.where(approved, np.clip(score + 75.0, lo, hi) - score, stay)
    down = np.where(approved, np.clip(score - 150.0, lo, hi) - score, stay)
    return Rule(approved, tables.curve(score, group), up, down)


def expected_theirs(sim, thresholds) -> dict[int, dict[str, float]]:
    """Exact one-step expectations per group under whynot's pmf on its score grid and its rule."""
    _, _, pis, _, grid, _ = sim.get_FICO_data(sim.DATAPATH)
    grid = np.asarray(grid, dtype=float)
    return {g: rule_theirs(sim, thresholds, np.full(len(grid), g), grid).moments(pis[g]) for g in (0, 1)}


def expected_ours(thresholds, **whynot_update) -> dict[int, dict[str, float]]:
    """Exact one-step expectations per group under our pmf on our score grid and our rule."""
    tables = load_tables(list(GROUPS))
    return {g: rule_ours(thresholds, np.full(len(tables.grid), g), tables.grid, **whynot_update).moments(tables.pmf[g])
            for g in (0, 1)}


def z_scores(step: Step, rule: Rule, g: int) -> dict[str, float]:
    """How far a simulated step is from its own rule's expectation on the same applicants, in
    standard errors: the repayments of the selected (a Poisson-binomial count) and the summed
    score change of the group's members (independent two-point changes)."""
    mine = step.group == g
    chosen = mine & step.approved
    p = rule.p
    out = {}
    for name, rows, observed, mean, var in (
            ("repayment", chosen, step.repaid[chosen].sum(), p[chosen].sum(), (p * (1 - p))[chosen].sum()),
            ("score_change", mine, (step.after - step.before)[mine].sum(), (p * rule.up + (1 - p) * rule.down)[mine].sum(),
             (p * (1 - p) * (rule.up - rule.down) ** 2)[mine].sum())):
        gap = float(observed - mean)
        out[name] = gap / np.sqrt(var) if var > 0 else (0.0 if abs(gap) < 1e-9 else float("inf"))
    return out


def side_by_side(thresholds_list, size: int, seed: int) -> list[dict[str, Any]]:
    """One row per (thresholds, group): exact values of both implementations (and of ours with
    whynot's clip), simulated values on the same applicants, and each simulation's z-scores
    against its own rule."""
    sim = load_whynot()
    rows = []
    for k, pair in enumerate(thresholds_list):
        a = ours(pair, size, seed + k)
        b = theirs(sim, pair, a.group, a.before, seed + k)
        rule_a, rule_b = rule_ours(pair, a.group, a.before), rule_theirs(sim, pair, b.group, b.before)
        exact = {"ours": expected_ours(pair), "theirs": expected_theirs(sim, pair),
                 "ours_clipped": expected_ours(pair, clip=(sim.Config.min_score, sim.Config.max_score),
                                               clip_rejected=True)}
        for g, name in enumerate(GROUPS):
            mine = a.group == g
            row = {"t_black": pair[0], "t_white": pair[1], "group": name, "n": int(mine.sum()),
                   "same_decisions": bool(np.array_equal(a.approved[mine], b.approved[mine])
                                          and np.array_equal(rule_a.approved[mine], a.approved[mine])),
                   "selected": int(a.approved[mine].sum())}
            sims = {"ours": a.rates(g), "theirs": b.rates(g)}
            zs = {"ours": z_scores(a, rule_a, g), "theirs": z_scores(b, rule_b, g)}
            for q in QUANTITIES:
                for who, values in exact.items():
                    row[f"{q}_{who}_exact"] = values[g][q]
                for who in ("ours", "theirs"):
                    row[f"{q}_{who}"] = sims[who][q]
                    if q != "selection":
                        row[f"{q}_{who}_z"] = zs[who][q]
            rows.append(row)
    return rows


def table(rows) -> str:
    lines = ["| t_black / t_white | group | n (selected) | selection: exact ours / whynot; simulated (both) | "
             "repayment: exact ours / whynot; simulated ours / whynot (z) | "
             "score change: exact ours / whynot / ours with whynot's clip; simulated ours / whynot (z) |",
             "|---|---|---:|---|---|---|"]
    for r in rows:
        same = "" if r["same_decisions"] else " DECISIONS DIFFER"
        lines.append(
            f"| {r['t_black']:g} / {r['t_white']:g} | {r['group']} | {r['n']} ({r['selected']}) | "
            f"{r['selection_ours_exact']:.4f} / {r['selection_theirs_exact']:.4f}; {r['selection_ours']:.4f}{same} | "
            f"{r['repayment_ours_exact']:.4f} / {r['repayment_theirs_exact']:.4f}; {r['repayment_ours']:.4f} / "
            f"{r['repayment_theirs']:.4f} ({r['repayment_ours_z']:+.1f}, {r['repayment_theirs_z']:+.1f}) | "
            f"{r['score_change_ours_exact']:.2f} / {r['score_change_theirs_exact']:.2f} / "
            f"{r['score_change_ours_clipped_exact']:.2f}; {r['score_change_ours']:.2f} / {r['score_change_theirs']:.2f} "
            f"({r['score_change_ours_z']:+.1f}, {r['score_change_theirs_z']:+.1f}) |")
    return "\n".join(lines)


def summary(rows) -> str:
    """The z-scores pooled per quantity: each simulation against its own rule, independent across
    rows and implementations, so their squares sum to a chi-square with one degree per z."""
    from scipy import stats

    lines = []
    for q in ("repayment", "score_change"):
        z = np.array([r[f"{q}_{who}_z"] for r in rows for who in ("ours", "theirs")])
        chi = float((z ** 2).sum())
        lines.append(f"{q}: {len(z)} z-scores, max |z| {np.abs(z).max():.2f} (two-sided p {2 * stats.norm.sf(np.abs(z).max()):.3f}), "
                     f"chi-square({len(z)}) {chi:.1f}, p {stats.chi2.sf(chi, len(z)):.2f}")
    same = sum(r["same_decisions"] for r in rows)
    lines.append(f"identical decisions for every applicant in {same} of {len(rows)} rows")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=40_000, help="population of our run (default 40000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--thresholds", type=float, nargs="+", default=[450.0, 600.0, 750.0],
                        help="per-group thresholds; every (black, white) pair of them is run")
    args = parser.parse_args(argv)
    if args.size < 100:
        parser.error(f"argument --size: at least 100, got {args.size}")
    try:
        load_whynot()
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = side_by_side(list(itertools.product(args.thresholds, repeat=2)), args.size, args.seed)
    print(table(rows))
    print()
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
