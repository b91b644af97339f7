"""The numbers behind docs/results/seed000-tables2-3.md's claim-by-claim reading of a Tables 2-3
study: per configuration the final-episode means, and paired t-tests (common random numbers:
replicate r of every configuration shares its population and seed) of the differences the seed's
claims are about.

    python benchmarks/seed000_tables_claims.py outputs/studies/tables2-3            # means and differences
    python benchmarks/seed000_tables_claims.py outputs/studies/tables2-3 --claims   # the claims table of the doc
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
from scipy import stats

REWARD = {"utilitarian": "UP", "social_welfare": "SW", "rawlsian": "RMM", "lagrangian:0.5": "FL"}


def finals(study: Path) -> pd.DataFrame:
    rows = []
    for run in json.loads((study / "manifest.json").read_text())["runs"]:
        folder = study / "runs" / run["run_id"]
        if not (folder / "summary.json").exists():
            continue
        last = pd.read_parquet(folder / "episodes.parquet").iloc[-1]
        side, reward = run["columns"]["objective"].split(":", 1)
        rows.append({"agent": run["run_id"].split("-")[0].upper(), "side": side.replace("two_sided(0.5)", "two-sided"),
                     "reward": REWARD[reward], "rep": run["replicate"], "gap": last["wealth_gap"],
                     "ratio": last["inequality_ratio"], "profit": last["cumulative_profit"],
                     "welfare": (last["social_welfare_M"] + last["social_welfare_F"]) / 2})
    return pd.DataFrame(rows)


def paired(f: pd.DataFrame, a: tuple, b: tuple, metric: str) -> str:
    x = f.set_index(["agent", "side", "reward", "rep"])[metric].sort_index()
    da, db = x.loc[a], x.loc[b]
    common = da.index.intersection(db.index)
    d = da.loc[common] - db.loc[common]
    p = stats.ttest_1samp(d, 0).pvalue if len(d) > 1 else float("nan")
    return f"{'/'.join(a)} - {'/'.join(b)} {metric} {d.mean():+.4g} (paired t p = {p:.2g}, {int((d > 0).sum())}/{len(d)})"


def main(study: Path) -> None:
    f = finals(study)
    f["absratio"] = (f.ratio - 1).abs()
    f["absgap"] = f.gap.abs()
    means = f.groupby(["agent", "side", "reward"])[["gap", "ratio", "profit", "welfare", "absgap", "absratio"]].mean()
    counts = f.groupby(["agent", "side", "reward"]).size()
    pd.set_option("display.width", 200)
    print(means.assign(runs=counts).round(4).to_string())
    print("\nhighest profit:", means.profit.idxmax(), " highest welfare:", means.welfare.idxmax(),
          " largest mean gap:", means.gap.idxmax())
    for agent in ("RL", "PERL"):
        m = means.loc[agent]
        print(f"{agent}: best profit {m.profit.idxmax()}, best welfare {m.welfare.idxmax()}, ratio nearest 1 "
              f"{m.absratio.idxmin()}, smallest |gap| {m.absgap.idxmin()}")
        for side in ("outcome", "dm", "two-sided"):
            s = m.loc[side]
            print(f"  {side}: best profit {s.profit.idxmax()}, best welfare {s.welfare.idxmax()}, smallest |gap| "
                  f"{s.absgap.idxmin()}, ratio nearest 1 {s.absratio.idxmin()}, range of mean gap {s.gap.max() - s.gap.min():.1f}")
            for r in ("RMM", "FL"):
                for metric in ("gap", "profit", "welfare"):
                    print("    " + paired(f, (agent, side, r), (agent, side, "UP"), metric))
    for side in ("outcome", "two-sided", "dm"):
        for r in ("UP", "RMM", "FL"):
            for metric in ("profit", "welfare", "absratio"):
                print(paired(f, ("PERL", side, r), ("RL", side, r), metric))




# -- the seed's claims, one verdict each -------------------------------------------------------

def _diff(f: pd.DataFrame, a: tuple, b: tuple, metric: str) -> tuple[float, float, int, int]:
    x = f.set_index(["agent", "side", "reward", "rep"])[metric].sort_index()
    da, db = x.loc[a], x.loc[b]
    d = (da - db.reindex(da.index)).dropna()
    p = float(stats.ttest_1samp(d, 0).pvalue) if len(d) > 1 and d.std() > 0 else float("nan")
    return float(d.mean()), p, int((d > 0).sum()), len(d)


def best_of(f: pd.DataFrame, claimed: tuple, rivals: list[tuple], metric: str, larger: bool = True) -> tuple[str, str]:
    """Is ``claimed`` the best of ``rivals`` on ``metric`` (paired t-test against the runner-up or the best)?"""
    means = f.groupby(["agent", "side", "reward"])[metric].mean()
    sign = 1 if larger else -1
    ranked = sorted(rivals, key=lambda c: -sign * means.loc[c])
    name = lambda c: "/".join(c)
    if ranked[0] == claimed:
        d, p, k, n = _diff(f, claimed, ranked[1], metric)
        verdict = "holds" if p < 0.05 else "holds in direction, not significant"
        return verdict, f"{name(claimed)} ranks first ({means.loc[claimed]:.4g}); − runner-up {name(ranked[1])} {d:+.4g} (paired t-test p = {p:.2g}, {k}/{n})"
    d, p, k, n = _diff(f, ranked[0], claimed, metric)
    verdict = "does not hold" if p < 0.05 else "cannot tell"
    return verdict, f"first is {name(ranked[0])} ({means.loc[ranked[0]]:.4g}) vs {name(claimed)} {means.loc[claimed]:.4g}; difference {d:+.4g} (paired t-test p = {p:.2g}, {k}/{n})"


def tost(values: pd.Series, centre: float, margin: float) -> float:
    """Two one-sided t-tests: p of 'the mean lies within centre ± margin'."""
    lo = stats.ttest_1samp(values, centre - margin, alternative="greater").pvalue
    hi = stats.ttest_1samp(values, centre + margin, alternative="less").pvalue
    return float(max(lo, hi))


def claims(f: pd.DataFrame) -> list[tuple[str, str, str]]:
    configs = sorted(set(map(tuple, f[["agent", "side", "reward"]].drop_duplicates().to_numpy())))
    rows = []
    rl = [c for c in configs if c[0] == "RL"]
    for metric in ("profit", "welfare"):
        v, s = best_of(f, ("PERL", "outcome", "FL"), configs, metric)
        rows.append((f"PERL outcome FL: highest {metric} of any configuration", v, s))
    r = f[(f.agent == "PERL") & (f.side == "outcome") & (f.reward == "FL")].ratio
    p = tost(r, 1.0, 0.05)
    rows.append(("PERL outcome FL: inequality ratio essentially at parity", "holds" if p < 0.05 else "cannot tell",
                 f"ratio {r.mean():.3f} ± {r.std():.3f}; TOST within 1 ± 0.05: p = {p:.2g}"))
    rl_ud = [c for c in rl if c[2] != "SW"]  # UP = SW for equal groups: one candidate
    v, s = best_of(f, ("RL", "two-sided", "UP"), rl_ud, "profit")
    rows.append(("RL two-sided UP: highest profit of any RL configuration", v, s))
    v, s = best_of(f, ("RL", "two-sided", "RMM"), rl_ud, "absratio", larger=False)
    rows.append(("RL two-sided RMM: inequality ratio closest to parity of any RL configuration", v, s))
    v, s = best_of(f, ("RL", "two-sided", "FL"), [c for c in rl_ud if c[1] == "two-sided"], "welfare")
    rows.append(("RL two-sided: FL achieves the best social welfare", v, s))
    for side, better in (("outcome", "PERL"), ("two-sided", "RL")):
        worse = "RL" if better == "PERL" else "PERL"
        for metric in ("profit", "welfare") + (("absratio",) if side == "outcome" else ()):
            parts, signs = [], []
            for reward in ("UP", "RMM", "FL"):
                d, p, k, n = _diff(f, (better, side, reward), (worse, side, reward), metric)
                d = -d if metric == "absratio" else d
                signs.append((d > 0, p < 0.05))
                parts.append(f"{reward}{' = SW' if reward == 'UP' else ''} {d:+.4g} (p = {p:.2g})")
            if all(pos and sig for pos, sig in signs):
                verdict = "holds"
            elif any((not pos) and sig for pos, sig in signs):
                verdict = "does not hold"
            else:
                verdict = "cannot tell"
            what = "closeness of the ratio to parity" if metric == "absratio" else metric
            rows.append((f"{side}: {better} outperforms {worse} on {what} for every reward", verdict,
                         f"paired t-test, {better} − {worse}: " + "; ".join(parts)))
    for agent in ("RL", "PERL"):
        out = [(agent, "outcome", r) for r in ("UP", "RMM", "FL")]
        for metric in ("profit", "welfare"):
            v, s = best_of(f, (agent, "outcome", "FL"), out, metric)
            rows.append((f"{agent} outcome: FL achieves the best {metric}", v, s))
        v, s = best_of(f, (agent, "outcome", "RMM"), out, "absgap", larger=False)
        rows.append((f"{agent} outcome: RMM achieves the smallest wealth gap", v, s))
        mine = [c for c in configs if c[0] == agent and c[2] != "SW"]
        v, s = best_of(f, (agent, "dm", "UP"), mine, "gap")
        rows.append((f"{agent}: DM UP has the largest wealth gap of its configurations", v, s))
    two = [("RL", "two-sided", r) for r in ("UP", "RMM", "FL")]
    v, s = best_of(f, ("RL", "two-sided", "UP"), two, "profit")
    rows.append(("RL two-sided: UP achieves the highest profit", v, s))
    v, s = best_of(f, ("RL", "two-sided", "RMM"), two, "absgap", larger=False)
    rows.append(("RL two-sided: RMM achieves the best wealth gap", v, s))
    lowered, total, cheaper = 0, 0, 0
    parts = []
    for agent in ("RL", "PERL"):
        for side in ("outcome", "two-sided", "dm"):
            for reward in ("RMM", "FL"):
                dg, pg, _, _ = _diff(f, (agent, side, reward), (agent, side, "UP"), "absgap")
                dp, pp, _, _ = _diff(f, (agent, side, reward), (agent, side, "UP"), "profit")
                total += 1
                lowered += dg < 0 and pg < 0.05
                cheaper += dp < 0 and pp < 0.05
                parts.append(f"{agent} {side} {reward}: abs gap {dg:+.3g} (p = {pg:.2g}), profit {dp:+.4g} (p = {pp:.2g})")
    rows.append(("Conclusion: FL and RMM give better long-run equity than UP without systematically sacrificing profit",
                 "holds" if lowered > total / 2 and cheaper == 0 else ("does not hold" if cheaper > total / 2 else "partial"),
                 f"paired t-test, reward − UP: abs gap significantly lower in {lowered} of {total} (agent, side, reward) "
                 f"cases, profit significantly lower in {cheaper} of {total}. " + "; ".join(parts)))
    return rows


def claims_markdown(study: Path) -> str:
    f = finals(study)
    f["absratio"] = (f.ratio - 1).abs()
    f["absgap"] = f.gap.abs()
    lines = ["| seed claim | verdict | statistic |", "|---|---|---|"]
    for claim, verdict, stat in claims(f):
        lines.append(f"| {claim} | **{verdict}** | {stat} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if "--claims" in sys.argv:
        print(claims_markdown(Path(sys.argv[1])))
    else:
        main(Path(sys.argv[1]))
