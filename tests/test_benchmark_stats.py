"""benchmarks/benchmark_stats.py: the benchmark's tables from its ledger, each environment's own
reward and gap, and each method against approve-all (Welch, Holm within the environment), checked
against scipy on a small study across two families; bad input is refused in one line."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import benchmark_stats  # noqa: E402
from seed002_budget_stats import holm  # noqa: E402

STUDY = {"study": {"name": "cross", "seed": 3, "seeds": 3},
         "base": str(ROOT / "scenarios" / "lending-credit.yaml"),
         "groups": {
             "lending": {"overrides": {"population.size": 100, "episodes.count": 2, "episodes.horizon": 100,
                                       "outputs.events": False},
                         "policies": [{"name": "approve_all"}, {"name": "max_util", "label": "Max-util"},
                                      {"name": "reject_all"}]},
             "infectious": {"base": str(ROOT / "scenarios" / "infectious-disease.yaml"),
                            "overrides": {"episodes.count": 4, "outputs.events": False},
                            "policies": [{"name": "approve_all"}, {"name": "most_connected"}]}}}


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    from abm.study import run_study
    from abm.study.spec import load_study
    from study_ledger import study_rows

    tmp = tmp_path_factory.mktemp("bstats")
    study = tmp / "cross.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    assert run_study(load_study(study), tmp / "out", workers=0, quiet=True).succeeded == 15
    path = tmp / "ledger.csv"
    study_rows(tmp / "out").to_csv(path, index=False)
    return path, study


def test_each_environment_gets_its_own_headline_and_welch_holm_against_approve_all(ledger, capsys):
    path, study = ledger
    benchmark_stats.main([str(path), str(study)])
    text = capsys.readouterr().out
    assert "| method | return | recall_gap | approved share | seeds |" in text
    assert "| method | average_return | average_benefit_gap | approved share | seeds |" in text
    rows = pd.read_csv(path)
    runs = benchmark_stats.runs_of(str(study))
    data = rows.merge(runs, on="run_id")
    inf = data[data["environment"] == "infectious"]
    a = inf[inf["method"] == "most_connected"]["average_return"].to_numpy()
    b = inf[inf["method"] == "approve_all"]["average_return"].to_numpy()
    assert a.mean() == pytest.approx(inf[inf["method"] == "most_connected"]["cumulative_profit"].mean() / 4)
    p = stats.ttest_ind(a, b, equal_var=False).pvalue
    tests = benchmark_stats.against(inf, ("average_return", "average_benefit_gap"))
    mine = next(r for r in tests if r["method"] == "most_connected" and r["metric"] == "average_return")
    assert mine["p"] == pytest.approx(p) and mine["diff"] == pytest.approx(a.mean() - b.mean())
    tested = [r for r in tests if not np.isnan(r["p"])]
    assert [r["holm"] for r in tested] == pytest.approx(list(holm([r["p"] for r in tested])))
    # the deterministic baselines of lending: reject-all approves nobody, approve-all everyone
    lending = text.split("### lending")[1].split("###")[0]
    assert "| approve_all |" in lending and "| 1 ± 0 | 3 |" in lending.split("| approve_all |")[1].splitlines()[0]
    assert "| reject_all | recall_gap | +0 | identical in every seed | - |" in lending
    assert "| Max-util |" in lending  # a labelled method is named by its label
    assert "| method | infectious | lending |" in text or "| method | lending | infectious |" in text
    assert f"All 15 runs: {rows['cpu_s'].sum():,.0f} CPU seconds." in text


def test_bad_input_is_one_line(ledger, tmp_path, capsys):
    path, study = ledger
    cases = [([str(tmp_path / "none.csv"), str(study)], "no such ledger"),
             ([str(path), str(tmp_path / "none.yaml")], "none.yaml"),
             ([str(path)], "the following arguments are required")]
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**STUDY, "study": {**STUDY["study"], "seed": 99}}))
    cases.append(([str(path), str(other)], "the ledger is of another study"))
    for argv, says in cases:
        with pytest.raises(SystemExit) as exit_:
            benchmark_stats.main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_.value.code == 2 and len(err) == 1 and says in err[0], err


def test_the_results_page_holds_the_shipped_ledgers_tables_verbatim():
    """docs/results/benchmark.md quotes benchmark_stats.py's output on the shipped ledger whole: a
    ledger or code change that moves a number must regenerate the page."""
    tables = benchmark_stats.markdown(benchmark_stats.frame(str(ROOT / "docs" / "results" / "benchmark.csv"),
                                                           str(ROOT / "scenarios" / "studies" / "benchmark.yaml")))
    assert "All 215 runs" in tables
    assert tables.strip() in (ROOT / "docs" / "results" / "benchmark.md").read_text()
