"""Determinism matrix: a run's files are a function of its scenario alone.

Execution modes of one study, compared run by run on the event log's hash:
  serial (``--workers 0``)           reference (tests/test_study.py's ``serial_study``)
  local Dask cluster, 2 workers      tests/test_study.py::test_two_local_workers_give_the_serial_results_run_for_run
  loopback scheduler + worker        tests/test_study.py::test_real_scheduler_and_worker_on_loopback
  local Dask cluster, 1 worker       here
  a plain ``abm run`` of the spec    here
Repetition: the same run twice (every family, a learning lender, and once in another process with
another hash seed) gives byte-identical files; only ``summary.json``'s wall time may differ.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from abm.config import load_scenario, validate_scenario_dict
from abm.runner import run_to_folder
from abm.study import run_study
from conftest import ROOT, SCENARIOS, SMALL_SCORE_FAMILIES
from test_study import digests, event_digest, serial_study  # noqa: F401 (the shared module fixture)

RUN_FILES = ("scenario.yaml", "episodes.parquet", "events.parquet", "agents.parquet")

REPEATS = {
    "eutopia": ("eutopia.yaml", ["population.n_male=200", "population.n_female=200", "episodes.count=3",
                                 "policy.name=random", "policy.p=0.5"]),
    "eutopia-immediate": ("eutopia.yaml", ["population.n_male=150", "population.n_female=150", "episodes.count=2",
                                           "episodes.review=immediate", "arrivals.excite_on=applications"]),
    **SMALL_SCORE_FAMILIES,
    "beta_belief": ("beta-belief-loans.yaml", ["population.size=100", "episodes.count=2", "episodes.horizon=10",
                                               "outputs.events=true"]),
    "eutopia-rl": ("eutopia.yaml", ["population.n_male=100", "population.n_female=100", "episodes.count=3",
                                    "policy.name=rl", "objective=outcome:social_welfare"]),
}


def file_bytes(folder: Path) -> dict[str, bytes]:
    files = {name: (folder / name).read_bytes() for name in RUN_FILES}
    summary = json.loads((folder / "summary.json").read_text())
    summary.pop("wall_seconds")
    files["summary.json without wall time"] = json.dumps(summary, sort_keys=True).encode()
    return files


@pytest.mark.parametrize("case", list(REPEATS))
def test_the_same_run_twice_is_byte_identical(tmp_path, case):
    file, overrides = REPEATS[case]
    sc = load_scenario(SCENARIOS / file, overrides)
    first, computed_a = run_to_folder(sc, tmp_path / "a")
    second, computed_b = run_to_folder(sc, tmp_path / "b")
    assert computed_a and computed_b and first.name == second.name
    a, b = file_bytes(first), file_bytes(second)
    assert [k for k in a if a[k] != b[k]] == []
    assert len(a["events.parquet"]) > 1000  # a real log, not an empty one


def test_another_process_with_another_hash_seed_writes_the_same_bytes(tmp_path):
    file, overrides = REPEATS["eutopia"]
    here, _ = run_to_folder(load_scenario(SCENARIOS / file, overrides), tmp_path / "here")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run([sys.executable, "-m", "abm.cli", "run", str(SCENARIOS / file), "--quiet",
                           "--out", str(tmp_path / "there"), *[a for o in overrides for a in ("--set", o)]],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert file_bytes(here) == file_bytes(tmp_path / "there" / here.name)


def test_one_local_worker_gives_the_serial_results(serial_study, tmp_path):  # noqa: F811
    from abm.study import local_client

    study, serial_dir, _ = serial_study
    with local_client(1, tmp_path / "scratch") as client:
        assert list(client.nthreads().values()) == [1]
        outcome = run_study(study, tmp_path / "one", client=client, quiet=True)
    assert (outcome.succeeded, outcome.failed) == (4, 0)
    reference = digests(serial_dir)
    assert digests(tmp_path / "one") == reference and len(reference) == 4


def test_a_study_run_equals_the_plain_run_of_its_scenario(serial_study, tmp_path):  # noqa: F811
    study, serial_dir, _ = serial_study
    for spec in study.runs[:2]:
        folder, _ = run_to_folder(validate_scenario_dict(spec.scenario, spec.run_id), tmp_path)
        assert event_digest(folder) == event_digest(serial_dir / "runs" / spec.run_id)
        assert (folder / "events.parquet").read_bytes() == (serial_dir / "runs" / spec.run_id / "events.parquet").read_bytes()
