"""The default study backend (no --workers, no --scheduler): in process below a local cluster's
measured break-even, the cluster above it (``abm.study.execute.AutoBackend``); explicit flags
keep their meaning; every path writes the same files."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from abm.errors import UserError
from abm.study import run_study, study_from_dict
from abm.study.execute import CLUSTER_START_S, IN_PROCESS, WARMUP_FACTOR, AutoBackend
from conftest import call_in_process

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
# the files a run or a study computes (not its timings: run_times.csv, runs.csv, summary.json)
RESULT_FILES = ("episodes.parquet", "events.parquet", "agents.parquet")


def tiny_doc() -> dict:
    """4 runs of a 2 x 200-applicant Eutopia market, 3 episodes each (about 0.1 s a run, warm)."""
    return {
        "study": {"name": "tiny", "seed": 11, "episodes": 3, "seeds": 1},
        "base": str(SCENARIOS / "eutopia.yaml"),
        "overrides": {"population.n_male": 200, "population.n_female": 200},
        "grid": {"arrivals.base_slope": [0.01, 0.03]},
        "policies": [{"name": "approve_all"}, {"name": "random", "p": 0.5}],
    }


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The tiny study with ``workers=0`` (explicit: a plain loop in this process)."""
    folder = tmp_path_factory.mktemp("serial") / "out"
    study = study_from_dict(tiny_doc(), "tiny")
    outcome = run_study(study, folder, workers=0, quiet=True, auto=AutoBackend(start_s=0.0, warmup_factor=0.0))
    assert (outcome.succeeded, outcome.backend, outcome.choice) == (4, IN_PROCESS, "")  # the rule is not asked
    return study, folder


def same_files(a: Path, b: Path) -> None:
    """Byte for byte: every run's result files, ``study.parquet`` and ``summary.parquet``."""
    runs = sorted(p.name for p in (a / "runs").iterdir())
    assert runs == sorted(p.name for p in (b / "runs").iterdir()) and len(runs) == 4
    for run in runs:
        for name in RESULT_FILES:
            assert (a / "runs" / run / name).read_bytes() == (b / "runs" / run / name).read_bytes(), (run, name)
    for name in ("study.parquet", "summary.parquet"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


# ---------------------------------------------------------------------------------------------
# The rule, from its inputs alone


def test_the_rule_waits_for_a_warm_run_and_weighs_the_runs_left_against_the_break_even():
    rule = AutoBackend(start_s=1.5, warmup_factor=2.0, cores=2)
    assert rule.decide([30.0], 100)[0] is False  # one run: mostly warm-up for short runs; measure another
    # the smoke study in a fresh process: 0.7 s first (warm-up), 0.08 s after: 6 runs ~0.5 s, far below
    cluster, per_run, estimate, even = rule.decide([0.7, 0.08], 6)
    assert not cluster and per_run == pytest.approx(0.08) and estimate == pytest.approx(0.48)
    assert even == pytest.approx((1.5 + 2.0 * 0.62) * 2)  # F * n / (n - 1), n = 2
    # 1.1 s runs, 6 left: 6.6 s in process against (1.5 + 2 * 0.1) * 2 = 3.4 s: the cluster pays
    cluster, _, estimate, even = rule.decide([1.2, 1.1], 6)
    assert cluster and estimate == pytest.approx(6.6) and even == pytest.approx(3.4)
    # a heavy warm-up (10 s of imports each worker pays again) keeps the same runs in process
    assert rule.decide([11.1, 1.1], 6)[0] is False
    # more cores: a smaller break-even (n / (n - 1)), never more workers than runs left
    four = AutoBackend(start_s=1.5, warmup_factor=0.0, cores=4)
    assert four.break_even_s(10) == pytest.approx(2.0) and four.workers(3) == 3
    assert four.break_even_s(3) == pytest.approx(2.25)


def test_one_worker_never_pays():
    assert AutoBackend(cores=1).break_even_s(1000) == math.inf
    assert AutoBackend(cores=1).decide([5.0, 5.0, 5.0], 1000)[0] is False
    assert AutoBackend(start_s=0.0, warmup_factor=0.0, cores=8).decide([5.0, 5.0], 1)[0] is False  # one run left


def test_the_measured_constants_are_the_defaults():
    rule = AutoBackend()
    assert (rule.start_s, rule.warmup_factor) == (CLUSTER_START_S, WARMUP_FACTOR)
    assert rule.break_even_s(8, 0.0) > 0


# ---------------------------------------------------------------------------------------------
# The default on a study


def test_a_tiny_study_runs_in_process_by_default_with_the_same_files(serial, tmp_path):
    study, serial_dir = serial
    lines: list[str] = []
    outcome = run_study(study, tmp_path / "auto", quiet=True, on_backend=lines.append)
    assert (outcome.succeeded, outcome.failed, outcome.backend) == (4, 0, IN_PROCESS)
    assert len(lines) == 1 and lines[0] == outcome.choice and lines[0].startswith("backend: in process, 4 runs")
    assert "\n" not in lines[0]
    assert not (tmp_path / "auto" / ".dask-scratch").exists()
    same_files(serial_dir, tmp_path / "auto")


def test_above_the_break_even_the_default_starts_a_cluster_for_the_runs_left(serial, tmp_path):
    from abm.study.aggregate import read_run_times

    study, serial_dir = serial
    lines: list[str] = []
    free = AutoBackend(start_s=0.0, warmup_factor=0.0, cores=2)  # a cluster that costs nothing: it always pays
    outcome = run_study(study, tmp_path / "auto", quiet=True, auto=free, on_backend=lines.append)
    assert (outcome.succeeded, outcome.failed) == (4, 0)
    assert outcome.backend == "2 in process, then dask local cluster, 2 workers"  # two runs measured here first
    assert len(lines) == 1 and lines[0].startswith("backend: a local cluster of 2 workers for the 2 runs left")
    times = read_run_times(tmp_path / "auto")
    assert list(times["backend"])[:2] == [IN_PROCESS] * 2
    assert sorted(times["backend"][2:]) == ["dask local cluster, 2 workers"] * 2
    assert not (tmp_path / "auto" / ".dask-scratch").exists()
    same_files(serial_dir, tmp_path / "auto")


def test_explicit_workers_and_scheduler_keep_their_meaning(serial, tmp_path):
    study, _ = serial
    with pytest.raises(UserError, match="--workers: must be >= 0"):
        run_study(study, tmp_path / "neg", workers=-1, quiet=True)
    with pytest.raises(UserError, match="with --scheduler the cluster's own workers"):
        run_study(study, tmp_path / "both", workers=2, scheduler="tcp://127.0.0.1:9", quiet=True)
    lines: list[str] = []
    outcome = run_study(study, tmp_path / "w0", workers=0, quiet=True, on_backend=lines.append,
                        auto=AutoBackend(start_s=0.0, warmup_factor=0.0, cores=2))  # the rule is not asked
    assert (outcome.backend, outcome.choice, lines) == (IN_PROCESS, "", [])


def test_the_cli_says_which_path_and_why_in_one_line(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_doc(), sort_keys=False))
    code, out, err = call_in_process("study", str(path), "--out", str(tmp_path / "s"), "--quiet")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("backend: in process, 4 runs in ") and "--workers N starts a cluster" in lines[0]
    assert "[in process, no dask]" in lines[1]
    code, out, err = call_in_process("study", str(path), "--out", str(tmp_path / "w0"), "--workers", "0", "--quiet")
    assert code == 0 and "backend:" not in out and "[in process, no dask]" in out  # explicit: no choice to report
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "s" / "study.parquet"),
                                  pd.read_parquet(tmp_path / "w0" / "study.parquet"))
    code, out, err = call_in_process("study", str(path), "--out", str(tmp_path / "bad"), "--workers", "-1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--workers" in err
