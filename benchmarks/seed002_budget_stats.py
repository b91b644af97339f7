"""Tests between methods of a seed 002 study at its budget (docs/results/seed002-table{1,2,5}.md):
each run's final episode, averaged over its evaluation episodes as in report/seed_tables.md.

Two uses. Pairs: a two-sided Welch test per pair and metric, its p raw and Holm-adjusted over
the pairs and metrics of the command:

    python benchmarks/seed002_budget_stats.py outputs/studies/table5-budget-session \
        ppo,bisim_ppo ppo,elbert_po --metrics cumulative_return,recall_gap,recall_mean,recall_sd

Claims: the seed's claims about a table, written down in ``benchmarks/seed002_claims.yaml``
(the section named as the ledger: ``table1``), each decided by the rule below; a markdown table
of every test and verdict, then each method's approval rate in the final episode:

    python benchmarks/seed002_budget_stats.py docs/results/table1.csv --claims benchmarks/seed002_claims.yaml

How a claim is decided (fixed before any claim was computed; docs/results/seed002-table1.md):
- ``less`` / ``greater`` (a below / above b): two-sided Welch test, Holm-adjusted over every
  Welch test of the table's claims (both scenarios). Holds at adjusted p < 0.05 in the claimed
  direction; does not hold at adjusted p < 0.05 the other way, or when TOST finds the two within
  the margin; cannot tell otherwise.
- ``similar`` (matches, comparable): TOST, two one-sided Welch tests against the margin +-delta
  (p = the larger one-sided p; holds at p < 0.05, i.e. the 90% CI of a - b inside +-delta); does
  not hold when the Welch test rejects equality (Holm-adjusted p < 0.05); cannot tell otherwise.
- ``not_less`` / ``not_greater`` (similar or higher / match or surpass): the one TOST side
  (non-inferiority at the margin, p < 0.05); does not hold when Welch finds a below (above) b at
  adjusted p < 0.05; cannot tell otherwise.
- b may be the seed's own row, ``seed: [mean, half-width of its 95% CI]`` over 10 seeds: the
  Welch test from summary statistics (its SD is the half-width x sqrt(10) / t(0.975, 9)).
- Two constant samples (every seed the same value): the difference is exact, no test.
- A claim of several tests: holds if all hold; partial if some hold and some do not; does not
  hold if none holds and one does not; cannot tell otherwise.

The margin delta (MARGIN, stated before looking): 5% of the distance between lending to everyone
and lending to nobody, the ``approve_all`` and ``reject_all`` rows' means in the same scenario, on
that metric; a metric the two share (the recall gap, recall SD: 0 for both) takes the recall's
distance (1), one undefined for reject-all (the social burden of nobody admitted) the distance
from approve-all's value to 0.

(``recall_mean`` / ``recall_sd``: over the groups' recalls, with more than two groups, as Table 5.)
``--label PARAM,...`` tells apart configurations of one method that differ in a policy parameter:
a run whose policy sets PARAM is the method ``name[PARAM=value]`` (``elbert_po[alpha=20000]``;
a run at the default keeps the plain name).

``--pool FOLDER`` adds the runs of another study of the same scenario and budget (e.g. a
session study holding only the methods the first one left out) to the first folder's. A ledger
of runs (``benchmarks/study_ledger.py``, a .csv) stands wherever a study folder does. A run in
more than one of them (the same ``run_id``: a ledger that copied another's rows) counts once; two
copies whose episodes digests differ are two computations of one run and are refused.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from abm.reports.seed002 import final_rows

from oneline import OneLineParser, fail

ALPHA = 0.05
MARGIN = 0.05  # of the approve-all-to-reject-all distance (module docstring)
RECALL_LIKE = {"recall_gap": "recall_G1", "recall_sd": "recall_G1"}  # 0 for both trivial lenders
KINDS = ("less", "greater", "similar", "not_less", "not_greater")
SEED_N = 10



def finals(folder: str) -> pd.DataFrame:
    if folder.endswith(".csv"):  # a ledger: its rows are the runs' final rows already
        from study_ledger import read_ledger

        out = read_ledger(Path(folder))
    else:
        table = Path(folder) / "study.parquet"
        if not table.is_file():
            fail(f"{folder}: no study.parquet (render it with: abm report {folder})")
        out = final_rows(pd.read_parquet(table), folder).rename(columns={"study_group": "group"})  # as a ledger
    out = out.copy()  # one block: a wide ledger (10 groups) read column by column warns "fragmented"
    out["method"] = out["policy"].str.extract(r"^([a-z_]+)", expand=False) + \
        out["policy"].str.contains("variant=full").map({True: "_full", False: ""})
    return out


def once_per_run(final: pd.DataFrame) -> pd.DataFrame:
    """Each run once: a run in several pooled sources (the same ``run_id``) would otherwise count as
    that many seeds. Copies whose ``episodes_sha256`` differ (where both have one) are refused."""
    if "run_id" not in final:
        return final
    if "episodes_sha256" in final:
        digests = final.dropna(subset=["episodes_sha256"]).groupby("run_id")["episodes_sha256"].nunique()
        clash = digests[digests > 1]
        if len(clash):
            fail(f"--pool: run {clash.index[0]} is in more than one source with different episodes digests "
                 "(two computations of one run); pool sources that agree")
    return final.drop_duplicates("run_id", keep="first").reset_index(drop=True)


def label(out: pd.DataFrame, params: list[str]) -> pd.DataFrame:
    """Append ``[PARAM=value]`` to the method of each run whose policy label sets PARAM."""
    for param in params:
        values = out["policy"].str.extract(rf"[(,]{param}=([^,)]+)", expand=False)
        if values.isna().all():
            fail(f"--label {param}: no run's policy sets {param} (policies: "
                 f"{', '.join(sorted(out['policy'].unique()))})")
        out["method"] = out["method"].where(values.isna(), out["method"] + "[" + param + "=" + values + "]")
    return out


def recall_columns(out: pd.DataFrame) -> pd.DataFrame:
    recalls = [c for c in out.columns if c.startswith("recall_G")]
    if len(recalls) > 2:  # Table 5's columns, as report/seed_tables.md computes them
        out["recall_mean"] = out[recalls].astype(float).mean(axis=1)
        out["recall_sd"] = out[recalls].astype(float).std(axis=1, ddof=0)
    return out


# -- the statistics ----------------------------------------------------------------------------
def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjustment: the i-th smallest p times (m - i), made monotone, capped at 1."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p, kind="stable")
    scaled = np.maximum.accumulate(p[order] * (len(p) - np.arange(len(p))))
    out = np.empty_like(p)
    out[order] = np.minimum(scaled, 1.0)
    return out


@dataclass
class Sample:
    """One side of a comparison: the seeds' values, or the seed paper's mean and 95% half-width."""

    mean: float
    var: float  # of one observation
    n: int

    @classmethod
    def of(cls, values) -> "Sample":
        x = np.asarray(values, dtype=float)
        return cls(float(x.mean()), float(x.var(ddof=1)), len(x))

    @classmethod
    def seed(cls, mean: float, half_width: float, n: int = SEED_N) -> "Sample":
        sd = half_width * math.sqrt(n) / stats.t.ppf(0.975, n - 1)
        return cls(float(mean), sd * sd, n)


def welch(a: Sample, b: Sample, shift: float = 0.0, alternative: str = "two-sided"):
    """Welch's t of (a.mean + shift) - b.mean: (t, df, p); scipy's ttest_ind_from_stats."""
    res = stats.ttest_ind_from_stats(a.mean + shift, math.sqrt(a.var), a.n, b.mean, math.sqrt(b.var), b.n,
                                     equal_var=False, alternative=alternative)
    se2 = a.var / a.n + b.var / b.n
    df = se2 ** 2 / ((a.var / a.n) ** 2 / (a.n - 1) + (b.var / b.n) ** 2 / (b.n - 1))
    return float(res.statistic), float(df), float(res.pvalue)


def tost(a: Sample, b: Sample, delta: float):
    """Two one-sided Welch tests of |a - b| < delta: (p, 90% CI of a - b)."""
    diff = a.mean - b.mean
    if a.var == 0 and b.var == 0:
        return (0.0 if abs(diff) < delta else 1.0), (diff, diff)
    _, df, p_low = welch(a, b, shift=delta, alternative="greater")   # H0: a - b <= -delta
    _, _, p_high = welch(a, b, shift=-delta, alternative="less")     # H0: a - b >= +delta
    half = stats.t.ppf(1 - ALPHA, df) * math.sqrt(a.var / a.n + b.var / b.n)
    return max(p_low, p_high), (diff - half, diff + half)


def margins(part: pd.DataFrame, metrics) -> dict[str, float]:
    """delta per metric of one scenario (MARGIN of the approve-all-to-reject-all distance)."""
    have = set(part["method"])
    if not {"approve_all", "reject_all"} <= have:
        fail("--claims: the ledger has no approve_all and reject_all runs in every scenario (the margins "
             "are a share of their distance; add them to the study)")
    out = {}
    for m in metrics:
        ref = RECALL_LIKE.get(m, m)
        aa = part.loc[part.method == "approve_all", ref].astype(float).mean()
        ra = part.loc[part.method == "reject_all", ref].astype(float).mean()
        out[m] = MARGIN * abs(aa - (0.0 if math.isnan(ra) else ra))
    return out


# -- the claims -------------------------------------------------------------------------------
def load_claims(path: str, section: str) -> list[dict]:
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        fail(f"{path}: no such claims file")
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        fail(f"{path}: not a claims file ({str(exc).splitlines()[0]})")
    if not isinstance(doc, dict) or section not in doc:
        fail(f"{path}: no section {section!r} (sections: {', '.join(sorted(doc)) if isinstance(doc, dict) else 'none'})")
    claims = doc[section]
    if not isinstance(claims, list) or not claims:
        fail(f"{path}: {section}: a list of claims is needed")
    for i, claim in enumerate(claims):
        where = f"{path}: {section}[{i}]"
        if not isinstance(claim, dict) or not {"id", "claim", "tests"} <= set(claim):
            fail(f"{where}: a claim needs id, claim and tests")
        if not isinstance(claim["tests"], list) or not claim["tests"]:
            fail(f"{where} ({claim['id']}): tests must be a non-empty list")
        for test in claim["tests"]:
            if not isinstance(test, dict) or not {"a", "b", "metric", "kind"} <= set(test):
                fail(f"{where} ({claim['id']}): a test needs a, b, metric and kind")
            if test["kind"] not in KINDS:
                fail(f"{where} ({claim['id']}): kind {test['kind']!r} is not one of {', '.join(KINDS)}")
            seed = test["b"].get("seed") if isinstance(test["b"], dict) else None
            if isinstance(test["b"], dict) and not (isinstance(seed, list) and len(seed) == 2
                                                    and all(isinstance(v, (int, float)) for v in seed)):
                fail(f"{where} ({claim['id']}): b as the seed's row is {{seed: [mean, half-width]}}")
    return claims


def values(part: pd.DataFrame, method: str, metric: str) -> np.ndarray:
    return part.loc[part.method == method, metric].astype(float).dropna().to_numpy()


def decide(final: pd.DataFrame, claims: list[dict], where: str) -> tuple[list[dict], list[dict]]:
    """Every test of every claim, with its verdict, and each claim's verdict."""
    groups = list(final["group"].unique())
    rows = []
    for claim in claims:
        for test in claim["tests"]:
            for group in ([test["group"]] if "group" in test else claim.get("groups", groups)):
                part = final[final.group == group]
                if part.empty:
                    fail(f"{where}: {claim['id']}: no runs in scenario {group!r} (scenarios: {', '.join(groups)})")
                metric = test["metric"]
                if metric not in part:
                    fail(f"{where}: {claim['id']}: no metric {metric!r} in the ledger")
                x = values(part, test["a"], metric)
                if isinstance(test["b"], dict):
                    b_name, y, b = "seed 002", None, Sample.seed(*test["b"]["seed"])
                else:
                    b_name, y = test["b"], values(part, test["b"], metric)
                    if len(y) < 2:
                        fail(f"{where}: {claim['id']}: method {test['b']!r} has {len(y)} runs in {group} (2 needed)")
                    b = Sample.of(y)
                if len(x) < 2:
                    fail(f"{where}: {claim['id']}: method {test['a']!r} has {len(x)} runs in {group} (2 needed)")
                a = Sample.of(x)
                delta = margins(part, [metric])[metric]
                row = {"claim": claim["id"], "group": group, "a": test["a"], "b": b_name, "metric": metric,
                       "kind": test["kind"], "mean_a": a.mean, "mean_b": b.mean, "diff": a.mean - b.mean,
                       "delta": delta, "n_a": a.n, "n_b": b.n}
                if a.var == 0 and b.var == 0:
                    row.update(test="exact (constant samples)", t=float("nan"), df=float("nan"),
                               p=0.0 if a.mean != b.mean else 1.0, exact=True)
                else:
                    t, df, p = welch(a, b)
                    row.update(test="Welch" if y is not None else "Welch vs the seed's row", t=t, df=df, p=p,
                               exact=False)
                row["p_tost"], row["ci90"] = tost(a, b, delta)
                if test["kind"] in ("not_less", "not_greater"):
                    side = "greater" if test["kind"] == "not_less" else "less"
                    shift = delta if test["kind"] == "not_less" else -delta
                    row["p_ni"] = (0.0 if (a.mean - b.mean + shift > 0) == (side == "greater") else 1.0) \
                        if row["exact"] else welch(a, b, shift=shift, alternative=side)[2]
                rows.append(row)
    welch_rows = [r for r in rows if not r["exact"]]
    for r, adj in zip(welch_rows, holm([r["p"] for r in welch_rows])):
        r["p_holm"] = float(adj)
    for r in rows:
        r.setdefault("p_holm", r["p"])
        r["verdict"] = test_verdict(r)
    verdicts = []
    for claim in claims:
        mine = [r["verdict"] for r in rows if r["claim"] == claim["id"]]
        verdicts.append({"id": claim["id"], "claim": claim["claim"], "verdict": combine(mine),
                         "tests": len(mine)})
    return rows, verdicts


def test_verdict(r: dict) -> str:
    significant, up = r["p_holm"] < ALPHA, r["diff"] > 0
    equivalent = r["p_tost"] < ALPHA
    kind = r["kind"]
    if kind in ("less", "greater"):
        if significant:
            return "holds" if up == (kind == "greater") else "does not hold"
        return "does not hold" if equivalent else "cannot tell"
    if kind == "similar":
        return "holds" if equivalent else "does not hold" if significant else "cannot tell"
    if r["p_ni"] < ALPHA:
        return "holds"
    return "does not hold" if significant and up == (kind == "not_greater") else "cannot tell"


def combine(verdicts: list[str]) -> str:
    s = set(verdicts)
    if s == {"holds"}:
        return "holds"
    if "holds" in s and "does not hold" in s:
        return "partial"
    if "does not hold" in s:
        return "does not hold"
    return "cannot tell"


def fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"


SYMBOL = {"less": "<", "greater": ">", "similar": "≈", "not_less": "≥", "not_greater": "≤"}


def pv(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def deciding(r: dict) -> tuple[str, float]:
    """The test that decided a test row's verdict, and its p (nan: exact)."""
    if r["exact"]:
        return "exact", float("nan")
    if "p_ni" in r and r["p_ni"] < ALPHA:
        return "non-inferiority", r["p_ni"]
    if r["kind"] == "similar" and r["p_holm"] >= ALPHA:
        return "TOST", r["p_tost"]
    if r["kind"] in ("less", "greater") and r["p_holm"] >= ALPHA and r["p_tost"] < ALPHA:
        return "TOST", r["p_tost"]
    return "Welch + Holm", r["p_holm"]


def summary(mine: list[dict]) -> str:
    """A claim's tests in a few words: per verdict, how many, by which test, at which p."""
    out = []
    for verdict in ("holds", "does not hold", "cannot tell"):
        these = [deciding(r) for r in mine if r["verdict"] == verdict]
        if not these:
            continue
        parts = []
        for name in dict.fromkeys(n for n, _ in these):
            ps = [p for n, p in these if n == name]
            if name == "exact":
                parts.append("exact (constant samples)")
            elif len(ps) == 1:
                parts.append(f"{name} {pv(ps[0])}")
            else:
                lo, hi = min(ps), max(ps)
                if hi < 0.001 or f"{lo:.3f}" == f"{hi:.3f}":
                    parts.append(f"{name} {pv(hi)}")
                else:
                    parts.append(f"{name} p {'< 0.001' if lo < 0.001 else f'= {lo:.3f}'} to {hi:.3f}")
        out.append(f"{len(these)} {verdict} ({', '.join(parts)})")
    return "; ".join(out)


def claims_markdown(rows: list[dict], verdicts: list[dict]) -> str:
    lines = ["| Claim | Scenario | Test of | a | b | Test | t (df) | p | p (Holm) | TOST p; 90% CI of a − b vs ±δ | Verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        stat = "exact" if r["exact"] else f"{r['t']:.2f} ({r['df']:.1f})"
        ci = f"[{fmt(r['ci90'][0])}, {fmt(r['ci90'][1])}] vs ±{fmt(r['delta'])}"
        p_side = f"exact: {ci}" if r["exact"] else f"TOST {pv(r['p_tost'])}; {ci}"
        if "p_ni" in r and not r["exact"]:
            p_side += f"; non-inferiority {pv(r['p_ni'])}"
        test = r["test"] if r["exact"] else f"{r['test']} + Holm; TOST"
        lines.append(f"| {r['claim']} | {r['group']} | {r['metric']}: a {SYMBOL[r['kind']]} b | {r['a']} {fmt(r['mean_a'])} | "
                     f"{r['b']} {fmt(r['mean_b'])} | {test} | {stat} | {'exact' if r['exact'] else pv(r['p'])} | "
                     f"{'exact' if r['exact'] else pv(r['p_holm'])} | {p_side} | {r['verdict']} |")
    welch_n = sum(not r["exact"] for r in rows)
    lines += ["", f"{len(rows)} tests, {welch_n} Welch tests in the Holm family; α = {ALPHA}, δ = {MARGIN:.0%} of the "
              "approve-all-to-reject-all distance.", "",
              "| Claim | Seed's claim | Tests | Verdict |", "|---|---|---|---|"]
    for v in verdicts:
        mine = [r for r in rows if r["claim"] == v["id"]]
        lines.append(f"| {v['id']} | {v['claim']} | {summary(mine)} | **{v['verdict']}** |")
    return "\n".join(lines)


def approval_markdown(final: pd.DataFrame) -> str:
    """Approvals / applications in the final episode, per method and scenario: how many seeds
    approve every applicant of every group, and how many approve nobody."""
    groups = sorted({c[len("approvals_"):] for c in final.columns if c.startswith("approvals_")},
                    key=lambda g: (len(g), g))
    rate = pd.concat({g: final[f"approvals_{g}"].astype(float) / final[f"applications_{g}"].astype(float)
                      for g in groups}, axis=1)
    lowest, highest = rate.min(axis=1), rate.max(axis=1)
    lines = ["| Scenario | Method | Seeds | Approve everyone (every group ≥ 0.999) | Approve nobody | Lowest group rate, min over seeds |",
             "|---|---|---|---|---|---|"]
    for (group, method), idx in final.groupby(["group", "method"], sort=True).groups.items():
        lines.append(f"| {group} | {method} | {len(idx)} | {int((lowest[idx] >= 0.999).sum())} | "
                     f"{int((highest[idx] <= 0.001).sum())} | {lowest[idx].min():.3f} |")
    return "\n".join(lines)


def pairs_report(final: pd.DataFrame, pairs: list[str], metrics: list[str]) -> str:
    found = []
    for group, part in final.groupby("group", sort=False):
        for pair in pairs:
            a, b = pair.split(",")
            for m in metrics:
                if m not in part:
                    continue
                x, y = values(part, a, m), values(part, b, m)
                if len(x) < 2 or len(y) < 2:
                    continue
                with warnings.catch_warnings():  # two constant samples: scipy warns, p is nan (said below)
                    warnings.simplefilter("ignore", RuntimeWarning)
                    t = stats.ttest_ind(x, y, equal_var=False)
                found.append((group, a, b, m, x, y, float(t.pvalue)))
    finite = [i for i, f in enumerate(found) if not math.isnan(f[-1])]
    adjusted = dict(zip(finite, holm([found[i][-1] for i in finite])))
    lines, last = [], None
    for i, (group, a, b, m, x, y, p) in enumerate(found):
        if group != last:
            lines.append(f"## {group}: methods {sorted(final.loc[final.group == group, 'method'].unique())}")
            last = group
        const = " (both samples constant)" if x.std() == y.std() == 0 else ""
        lines.append(f"  {m}: {a} {x.mean():.4g} (n={len(x)}) - {b} {y.mean():.4g} (n={len(y)}) = "
                     f"{x.mean() - y.mean():+.4g}, Welch p = {p:.3f}; Holm p = {adjusted.get(i, float('nan')):.3f} "
                     f"(of {len(finite)}){const}; per seed {a} {np.round(x, 3).tolist()}, {b} {np.round(y, 3).tolist()}")
    return "\n".join(lines)


def main() -> None:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("pairs", nargs="*", help="method_a,method_b (policy names; bisim_ppo_full for the full variant)")
    ap.add_argument("--metrics", default="cumulative_return,recall_gap,credit_gap")
    ap.add_argument("--claims", metavar="FILE.yaml",
                    help="decide the claims of the ledger's section of FILE (benchmarks/seed002_claims.yaml)")
    ap.add_argument("--pool", action="append", default=[], metavar="FOLDER",
                    help="another study of the same scenario and budget whose runs join the first folder's")
    ap.add_argument("--label", default="", metavar="PARAM,...",
                    help="policy parameters whose values join the method name (elbert_po[alpha=20000])")
    args = ap.parse_args()
    if not args.pairs and not args.claims:
        ap.error("give method pairs (a,b) or --claims FILE")
    bad = [p for p in args.pairs if not re.fullmatch(r"[^,\s]+,[^,\s]+", p)]
    if bad:
        ap.error(f"pair {bad[0]!r} is not method_a,method_b")
    params = [p for p in args.label.split(",") if p]
    bad = [p for p in params if not re.fullmatch(r"[a-z_][a-z0-9_]*", p)]
    if bad:
        ap.error(f"argument --label: {bad[0]!r} is not a policy parameter name")
    claims = load_claims(args.claims, Path(args.folder).stem) if args.claims else None
    final = finals(args.folder)
    if args.pool:
        group = final["group"].iloc[0]
        final = once_per_run(pd.concat([final, *(finals(f).assign(group=group) for f in args.pool)],
                                       ignore_index=True))
    final = recall_columns(label(final, params))
    if args.pairs:
        print(pairs_report(final, args.pairs, args.metrics.split(",")))
    if claims:
        rows, verdicts = decide(final, claims, args.claims)
        print(claims_markdown(rows, verdicts))
        print()
        print(approval_markdown(final))


if __name__ == "__main__":
    main()
