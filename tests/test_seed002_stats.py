"""benchmarks/seed002_budget_stats.py --claims: its statistics against scipy on fixed inputs (Welch,
TOST, the 90% interval, a Welch test against the seed's row from its mean and 95% half-width,
Holm's adjustment by hand), the verdict rule on a small ledger, and bad claims files refused in
one line."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import seed002_budget_stats as s  # noqa: E402

from test_budget_stats import script  # noqa: E402

X = np.array([3.1, 2.9, 3.4, 3.0, 3.3, 2.8, 3.2, 3.05])
Y = np.array([2.5, 2.9, 2.2, 2.7, 2.4, 2.8, 2.6, 2.3, 2.65, 2.55])


def test_holm_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> monotone 0.06, 0.06
    assert s.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert s.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert s.holm([0.04]) == pytest.approx([0.04])


def test_welch_is_scipys():
    t, df, p = s.welch(s.Sample.of(X), s.Sample.of(Y))
    ref = stats.ttest_ind(X, Y, equal_var=False)
    assert (t, df, p) == pytest.approx((ref.statistic, ref.df, ref.pvalue))


def test_tost_is_two_one_sided_scipy_welch_tests_and_its_interval_scipys():
    delta = 0.9
    p, (lo, hi) = s.tost(s.Sample.of(X), s.Sample.of(Y), delta)
    low = stats.ttest_ind(X + delta, Y, equal_var=False, alternative="greater").pvalue
    high = stats.ttest_ind(X - delta, Y, equal_var=False, alternative="less").pvalue
    assert p == pytest.approx(max(low, high))
    ci = stats.ttest_ind(X, Y, equal_var=False).confidence_interval(0.90)
    assert (lo, hi) == pytest.approx((ci.low, ci.high))
    assert p < 0.05 and hi < delta  # the interval inside the margin is the same decision as TOST p < 0.05
    p_narrow, _ = s.tost(s.Sample.of(X), s.Sample.of(Y), 0.6)
    assert p_narrow > 0.05


def test_the_seeds_row_from_its_mean_and_half_width_is_its_sample():
    z = np.array([0.52, 0.58, 0.49, 0.61, 0.55, 0.50, 0.57, 0.53, 0.60, 0.56])
    half = stats.t.ppf(0.975, 9) * z.std(ddof=1) / np.sqrt(10)
    from_ci = s.welch(s.Sample.of(Y / 4), s.Sample.seed(z.mean(), half))
    ref = stats.ttest_ind(Y / 4, z, equal_var=False)
    assert from_ci[0] == pytest.approx(ref.statistic) and from_ci[2] == pytest.approx(ref.pvalue)


def _ledger(path: Path) -> Path:
    """Two scenarios' worth of runs: approve_all 100 / reject_all 0 (delta = 5 on the return),
    'same' within 1 of approve_all, 'low' 30 below it, 'wide' spread too far to tell."""
    rows, rng = [], np.random.default_rng(0)
    values = {"approve_all": 100 + rng.normal(0, 1, 8), "reject_all": np.zeros(8),
              "same": 100.5 + rng.normal(0, 1, 8), "low": 70 + rng.normal(0, 1, 8),
              "wide": 100 + rng.normal(0, 40, 8)}
    for name, vals in values.items():
        for r, v in enumerate(vals):
            rows.append({"run_id": f"{name}-x-r{r}", "config_id": "x", "config": name, "group": "g", "groups": "g",
                         "policy": name, "objective": "none", "replicate": r, "seed": r, "eval_episodes": 1,
                         "cumulative_return": v, "recall_G1": 1.0 if name != "reject_all" else 0.0,
                         "recall_gap": 0.0, "approvals_G1": 5.0 if name != "reject_all" else 0.0,
                         "applications_G1": 5.0, "code": "c", "episodes_sha256": f"{name}{r}"})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


CLAIMS = """\
t:
  - id: A
    claim: same matches approve-all
    tests: [{a: same, b: approve_all, metric: cumulative_return, kind: similar}]
  - id: B
    claim: low below approve-all, and similar to it
    tests:
      - {a: low, b: approve_all, metric: cumulative_return, kind: less}
      - {a: low, b: approve_all, metric: cumulative_return, kind: similar}
  - id: C
    claim: wide matches approve-all
    tests: [{a: wide, b: approve_all, metric: cumulative_return, kind: similar}]
  - id: D
    claim: same above approve-all; recall gaps equal exactly
    tests:
      - {a: same, b: approve_all, metric: cumulative_return, kind: greater}
      - {a: same, b: approve_all, metric: recall_gap, kind: not_greater}
  - id: E
    claim: low not below approve-all
    tests: [{a: low, b: approve_all, metric: cumulative_return, kind: not_less}]
"""


def test_claims_are_decided_by_the_rule(tmp_path):
    ledger = _ledger(tmp_path / "t.csv")
    (tmp_path / "c.yaml").write_text(CLAIMS)
    done = script(BENCH / "seed002_budget_stats.py", str(ledger), "--claims", str(tmp_path / "c.yaml"))
    assert done.returncode == 0, done.stderr
    verdict = {line.split(" | ")[0][2:]: line.rsplit("**", 2)[1]
               for line in done.stdout.splitlines() if line.endswith("** |")}
    assert verdict == {"A": "holds", "B": "partial", "C": "cannot tell", "D": "partial",
                       "E": "does not hold"}
    b_rows = [line for line in done.stdout.splitlines() if line.startswith("| B |")]
    assert b_rows[0].endswith("| holds |") and b_rows[1].endswith("| does not hold |")
    assert "exact (constant samples)" in done.stdout
    assert "δ = 5% of the approve-all-to-reject-all distance" in done.stdout
    assert "| g | low | 8 | 8 | 0 | 1.000 |" in done.stdout  # approval rates in the final episode
    assert "| g | reject_all | 8 | 0 | 8 | 0.000 |" in done.stdout


def test_partial_is_some_holding_and_some_not():
    assert s.combine(["holds", "does not hold", "cannot tell"]) == "partial"
    assert s.combine(["holds", "cannot tell"]) == "cannot tell"
    assert s.combine(["does not hold", "cannot tell"]) == "does not hold"
    assert s.combine(["holds", "holds"]) == "holds"


@pytest.mark.parametrize("text, message", [
    ("other: []\n", "no section 't'"),
    ("t: []\n", "t: a list of claims is needed"),
    ("t: [{id: A, claim: x}]\n", "t[0]: a claim needs id, claim and tests"),
    ("t: [{id: A, claim: x, tests: [{a: same, b: approve_all, metric: m}]}]\n", "a test needs a, b, metric and kind"),
    ("t: [{id: A, claim: x, tests: [{a: same, b: approve_all, metric: m, kind: bigger}]}]\n", "kind 'bigger' is not one of"),
    ("t: [{id: A, claim: x, tests: [{a: same, b: {seed: 3}, metric: m, kind: less}]}]\n", "{seed: [mean, half-width]}"),
    ("t: [{id: A, claim: x, tests: [{a: same, b: approve_all, metric: nope, kind: less}]}]\n", "no metric 'nope'"),
    ("t: [{id: A, claim: x, tests: [{a: gone, b: approve_all, metric: cumulative_return, kind: less}]}]\n",
     "method 'gone' has 0 runs"),
    ("t: [unclosed\n", "not a claims file"),
])
def test_a_bad_claims_file_is_one_line(tmp_path, text, message):
    ledger = _ledger(tmp_path / "t.csv")
    (tmp_path / "c.yaml").write_text(text)
    done = script(BENCH / "seed002_budget_stats.py", str(ledger), "--claims", str(tmp_path / "c.yaml"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert message in done.stderr


def test_a_missing_claims_file_and_no_trivial_lenders_are_one_line(tmp_path):
    ledger = _ledger(tmp_path / "t.csv")
    done = script(BENCH / "seed002_budget_stats.py", str(ledger), "--claims", str(tmp_path / "none.yaml"))
    assert done.returncode == 2 and "no such claims file" in done.stderr
    frame = pd.read_csv(ledger)
    frame[frame.policy != "reject_all"].to_csv(ledger, index=False)
    (tmp_path / "c.yaml").write_text(CLAIMS)
    done = script(BENCH / "seed002_budget_stats.py", str(ledger), "--claims", str(tmp_path / "c.yaml"))
    assert done.returncode == 2 and "no approve_all and reject_all runs" in done.stderr


def test_neither_pairs_nor_claims_is_one_line(tmp_path):
    done = script(BENCH / "seed002_budget_stats.py", str(_ledger(tmp_path / "t.csv")))
    assert done.returncode == 2 and done.stderr.startswith("error: give method pairs")


def test_the_shipped_claims_file_parses_for_every_table():
    for section in ("table1", "table2", "table5"):
        assert s.load_claims(str(BENCH / "seed002_claims.yaml"), section)
