"""benchmarks/study_ledger.py: a study's finished runs as one CSV row each (the seed tables'
per-run values, cost, code and episodes digest), appended over sittings; its tables are the
report's; ``abm study --skip`` and seed002_budget_stats.py read it; bad input
is refused in one line."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
LEDGER = BENCH / "study_ledger.py"
sys.path.insert(0, str(BENCH))


def tiny_study(tmp_path: Path, seeds: int = 2) -> Path:
    doc = {"study": {"name": "tiny-ledger", "seed": 7, "episodes": 2, "seeds": seeds},
           "base": str(ROOT / "scenarios" / "lending-credit.yaml"),
           "overrides": {"population.size": 200, "episodes.horizon": 100.0, "outputs.events": False},
           "policies": [{"name": "max_util"}, {"name": "eo_threshold"}]}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def script(path: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture
def computed(tmp_path):
    from abm.study.execute import run_study
    from abm.study.spec import load_study

    study = tiny_study(tmp_path)
    folder = tmp_path / "study"
    assert run_study(load_study(study), folder, workers=0, quiet=True).succeeded == 4
    return study, folder


def test_a_ledger_holds_each_run_once_and_gives_the_reports_tables(computed, tmp_path):
    from abm.reports.seed002 import seed_tables

    study, folder = computed
    ledger = tmp_path / "ledger.csv"
    first = script(LEDGER, "add", str(folder), str(ledger))
    assert first.returncode == 0 and first.stdout.strip() == f"{ledger}: 4 runs added, 4 in all", first.stderr
    again = script(LEDGER, "add", str(folder), str(ledger))
    assert again.stdout.strip() == f"{ledger}: 0 runs added, 4 in all"
    rows = pd.read_csv(ledger)
    assert len(rows) == 4 and rows["run_id"].is_unique and rows["cpu_s"].notna().all()
    assert rows["episodes_sha256"].str.fullmatch("[0-9a-f]{64}").all() and (rows["code"] != "unknown").all()
    tables = script(LEDGER, "tables", str(ledger))
    assert tables.returncode == 0
    report = seed_tables(pd.read_parquet(folder / "study.parquet"), folder)
    assert tables.stdout.startswith(report)  # the same tables, from the CSV's values
    assert "## Cost" in tables.stdout and tables.stdout.rstrip().endswith("CPU-hours)")


def test_a_run_computed_differently_is_refused(computed, tmp_path):
    study, folder = computed
    ledger = tmp_path / "ledger.csv"
    assert script(LEDGER, "add", str(folder), str(ledger)).returncode == 0
    rows = pd.read_csv(ledger)
    from abm.study.execute import machine

    assert rows["machine"].str.startswith(machine().split("; torch")[0]).all()  # the processor of each run
    rows.loc[0, "episodes_sha256"] = "0" * 64
    rows.loc[0, "machine"] = "Other CPU; torch 2.13.0 AVX2"
    rows.to_csv(ledger, index=False)
    from abm.study.aggregate import latest_run_times

    recorded = latest_run_times(folder).at[rows.loc[0, "run_id"], "machine"]
    done = script(LEDGER, "add", str(folder), str(ledger))
    assert done.returncode == 2
    assert done.stderr == f"{ledger}: run {rows.loc[0, 'run_id']} is in the ledger with another episodes digest " \
                          f"(two computations of one run disagree; machines: ledger Other CPU; torch 2.13.0 AVX2, " \
                          f"study {recorded})\n"
    assert pd.read_csv(ledger).loc[0, "episodes_sha256"] == "0" * 64  # the ledger is left as it was


def test_the_next_sitting_skips_the_ledgers_runs(computed, tmp_path):
    study, folder = computed
    ledger = tmp_path / "ledger.csv"
    assert script(LEDGER, "add", str(folder), str(ledger)).returncode == 0
    bigger = tiny_study(tmp_path / "more", seeds=3)  # the same runs and one more replicate each
    out = tmp_path / "next"
    done = subprocess.run([sys.executable, "-m", "abm.cli", "study", str(bigger), "--skip", str(ledger), "--out",
                           str(out), "--workers", "0"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "6 runs: 2 succeeded, 0 skipped, 4 held by --skip, 0 failed" in done.stdout
    assert sorted(p.name.rsplit("-", 1)[1] for p in (out / "runs").iterdir()) == ["r2", "r2"]
    added = script(LEDGER, "add", str(out), str(ledger))
    assert added.stdout.strip() == f"{ledger}: 2 runs added, 6 in all"
    stats = script(BENCH / "seed002_budget_stats.py", str(ledger), "max_util,eo_threshold", "--metrics", "recall_gap")
    assert stats.returncode == 0, stats.stderr
    assert "(n=3)" in stats.stdout and "Welch p" in stats.stdout


@pytest.mark.parametrize("content, message", [
    (None, "no such ledger"), ("a,b\n1,2\n", "not a ledger (no column 'run_id')"),
    ("\x00\xff\xfe", "not a ledger CSV"),
])
def test_a_bad_ledger_is_named_in_one_line(tmp_path, content, message):
    ledger = tmp_path / "ledger.csv"
    if content is not None:
        ledger.write_bytes(content.encode("latin-1"))
    done = script(LEDGER, "tables", str(ledger))
    assert done.returncode == 2 and done.stderr.startswith(f"{ledger}: {message}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_folder_that_is_no_study_is_named(tmp_path):
    done = script(LEDGER, "add", str(tmp_path), str(tmp_path / "ledger.csv"))
    assert done.returncode == 2 and done.stderr == f"{tmp_path}: no study folder (no manifest.json)\n"
    assert not (tmp_path / "ledger.csv").exists()
    bad = script(LEDGER, "remove", "x")
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and len(bad.stderr.splitlines()) == 1


def test_what_a_policy_learned_becomes_flat_columns():
    from study_ledger import flat_extra

    assert flat_extra({"omega": [0.5, -1.0], "j_rew": 0.1, "nu": {"G1": [1, 2]}, "note": None}) == {
        "extra.omega.0": 0.5, "extra.omega.1": -1.0, "extra.j_rew": 0.1, "extra.nu.G1.0": 1, "extra.nu.G1.1": 2,
        "extra.note": None}
