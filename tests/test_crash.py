"""Crash safety: ``abm run`` and ``abm study`` killed with SIGKILL at chosen and at random moments
leave no folder that looks complete but is not, and a rerun finishes with every run present
exactly once and the same bytes as an uninterrupted run. A full or read-only output folder is a
user error (exit 2, one line), with nothing half-written left behind.

The killed processes are forks of this test process running the real entry point
(``abm.cli.main``), so a kill point costs a simulation, not an interpreter start. Deterministic
kill points SIGKILL the child from inside a wrapped file-system call (before or after the n-th
``write_parquet`` / ``os.replace``); random ones SIGKILL it from here after a delay drawn from a
fixed-seed generator. tests/test_study.py kills a real ``abm study --workers 2`` subprocess once.
"""

from __future__ import annotations

import contextlib
import errno
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from abm.runner import is_complete
from abm.study import load_study, run_study
from test_fuzz import CASES, SCENARIOS, call
from test_study import digests, serial_study, tiny_doc, write_study  # noqa: F401 (the shared module fixture)

RUN_ARGS = ["run", str(SCENARIOS / "eutopia.yaml"), "--quiet", "--set", "population.n_male=300",
            "--set", "population.n_female=300", "--episodes", "6", "--policy", "random"]
FORK = multiprocessing.get_context("fork")


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    yield
    print("\ncrash cases:", {k: v for k, v in CASES.items() if "kill" in k})


def _child(args: list[str], kill: tuple | None) -> None:
    """In the fork: optionally arm a kill point, then run the console entry point quietly."""
    if kill is not None:
        module_name, attr, n, when = kill
        module = sys.modules[module_name]
        real, count = getattr(module, attr), [0]

        def armed(*a, **k):
            count[0] += 1
            if count[0] == n and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            result = real(*a, **k)
            if count[0] == n and when == "after":
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        setattr(module, attr, armed)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.argv = ["abm", *args]
    from abm import cli

    cli.main()


def run_child(args: list[str], *, kill: tuple | None = None, after_s: float | None = None) -> int:
    """Fork a child running ``abm ARGS``; SIGKILL it at ``kill`` (from inside) or after ``after_s``
    seconds (from here). Returns its exit code (-9: killed)."""
    proc = FORK.Process(target=_child, args=(args, kill))
    proc.start()
    proc.join(after_s)
    if proc.is_alive():
        os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    return proc.exitcode


def check_nothing_looks_complete_but_is_not(root: Path, episodes: int) -> tuple[set[str], int]:
    """Every folder without the temp prefix is a complete, readable run; returns (complete run
    names, number of temp leftovers)."""
    complete, leftovers = set(), 0
    for d in root.iterdir() if root.exists() else ():
        if d.name.startswith(".tmp-"):
            leftovers += 1
            assert not is_complete(d)
            continue
        summary = json.loads((d / "summary.json").read_text())
        assert summary["invariants"] == "passed" and summary["episodes"] == episodes
        assert len(pd.read_parquet(d / "episodes.parquet")) == episodes
        assert len(pd.read_parquet(d / "events.parquet")) == summary["events"]
        assert len(pd.read_parquet(d / "agents.parquet")) > 0
        complete.add(d.name)
    return complete, leftovers


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """An uninterrupted run (in-process, which also warms the data caches the forks inherit) and
    the wall time of an uninterrupted forked child, which scales the random kill moments."""
    root = tmp_path_factory.mktemp("reference")
    code, _, err = call(*RUN_ARGS, "--out", str(root / "ref"))
    assert code == 0, err
    (folder,) = (root / "ref").iterdir()
    started = time.perf_counter()
    assert run_child([*RUN_ARGS, "--out", str(root / "timed")]) == 0
    return folder, time.perf_counter() - started


RUN_KILLS = [
    ("abm.runner", "write_parquet", 1, "before"),  # temp folder holds only scenario.yaml
    ("abm.runner", "write_parquet", 2, "after"),  # ... and episodes + events
    ("os", "replace", 1, "before"),  # every file written, summary.json included, not yet renamed
    ("os", "replace", 1, "after"),  # renamed: the run is complete
]


@pytest.mark.parametrize("kill", RUN_KILLS + [f"random-{i}" for i in range(3)])
def test_killed_run_leaves_nothing_half_done_and_a_rerun_completes_it(reference_run, tmp_path, kill):
    folder, wall = reference_run
    out = tmp_path / "out"
    if isinstance(kill, str):  # a moment drawn from (5%, 95%) of an uninterrupted child's wall time
        delay = float(np.random.default_rng(int(kill[-1])).uniform(0.05, 0.95)) * wall
        code = run_child([*RUN_ARGS, "--out", str(out)], after_s=delay)
        CASES["run random kills that landed mid-run"] += code == -signal.SIGKILL
    else:
        code = run_child([*RUN_ARGS, "--out", str(out)], kill=kill)
        assert code == -signal.SIGKILL  # the kill point was reached
    CASES["run kill points survived"] += 1
    complete, _ = check_nothing_looks_complete_but_is_not(out, 6)
    assert complete <= {folder.name}
    if kill == ("os", "replace", 1, "before"):
        (tmp,) = out.iterdir()  # a fully written folder, summary.json and all, that is not complete
        assert tmp.name.startswith(".tmp-") and (tmp / "summary.json").is_file() and not is_complete(tmp)
    code, stdout, err = call(*RUN_ARGS, "--out", str(out))
    assert code == 0, err
    assert ("already complete" in stdout) == bool(complete)
    complete, _ = check_nothing_looks_complete_but_is_not(out, 6)
    assert complete == {folder.name}
    for name in ("events.parquet", "episodes.parquet", "agents.parquet", "scenario.yaml"):
        assert (out / folder.name / name).read_bytes() == (folder / name).read_bytes()


STUDY_KILLS = [
    ("os", "replace", 2, "before"),  # study.yaml written, manifest.json not
    ("os", "replace", 3, "before"),  # the first run written under its temp name
    ("abm.runner", "write_parquet", 5, "before"),  # the second run half-written
    ("os", "replace", 4, "after"),  # two runs complete
    ("os", "replace", 7, "before"),  # every run complete, the aggregate not written
]


@pytest.fixture
def study_file(tmp_path):
    return write_study(tmp_path, tiny_doc())


def resume_and_check(study_file: Path, out: Path, reference: dict[str, str]) -> None:
    study = load_study(study_file)
    expected = {r.run_id for r in study.runs}
    complete, _ = check_nothing_looks_complete_but_is_not(out / "runs", 3)
    assert complete <= expected
    outcome = run_study(study, out, workers=0, quiet=True)
    assert (outcome.skipped, outcome.succeeded, outcome.failed) == (len(complete), 4 - len(complete), 0)
    assert {d.name for d in (out / "runs").iterdir()} == expected  # each run once, no temp leftovers
    table = pd.read_parquet(out / "study.parquet")
    assert len(table) == 4 * 3 and not table.duplicated(["run_id", "episode"]).any()
    assert digests(out) == reference


@pytest.mark.parametrize("kill", STUDY_KILLS)
def test_killed_study_resumes_to_the_uninterrupted_results(serial_study, study_file, tmp_path, kill):  # noqa: F811
    out = tmp_path / "out"
    code = run_child(["study", str(study_file), "--workers", "0", "--quiet", "--out", str(out)], kill=kill)
    assert code == -signal.SIGKILL
    CASES["study kill points survived"] += 1
    resume_and_check(study_file, out, digests(serial_study[1]))


def test_study_killed_repeatedly_at_random_moments_then_resumed(serial_study, study_file, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    rng = np.random.default_rng(7)
    args = ["study", str(study_file), "--workers", "0", "--quiet", "--out", str(out)]
    started = time.perf_counter()
    assert run_child(args + ["--out", str(tmp_path / "timed")]) == 0
    wall = time.perf_counter() - started
    landed, left = 0, 4
    for _ in range(3):  # each attempt resumes what the previous one left, then dies
        code = run_child(args, after_s=float(rng.uniform(0.15, 0.85)) * wall * left / 4)
        landed += code == -signal.SIGKILL
        CASES["study kill points survived"] += 1
        CASES["study random kills that landed mid-study"] += code == -signal.SIGKILL
        left = 4 - len(check_nothing_looks_complete_but_is_not(out / "runs", 3)[0])
    assert landed >= 1, "no kill landed before the study finished"
    resume_and_check(study_file, out, digests(serial_study[1]))


# ---------------------------------------------------------------------------------------------
# Full and read-only output folders


@contextlib.contextmanager
def tmpfs(where: Path, size: str, readonly: bool = False):
    """A small tmpfs at ``where`` (root only; the test is skipped, saying why, otherwise)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root (the OS-boundary tests below still run)")
    where.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if readonly else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


SMALL_RUN = ["run", str(SCENARIOS / "eutopia.yaml"), "--quiet", "--set", "population.n_male=200",
             "--set", "population.n_female=200", "--episodes", "3"]


def one_line(code: int, err: str, *needles: str) -> None:
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def test_disk_full_exits_2_and_leaves_nothing_half_written(tmp_path):
    with tmpfs(tmp_path / "small", "64k") as disk:
        code, _, err = call(*SMALL_RUN, "--out", str(disk / "runs"))
        one_line(code, err, "cannot write run folder (disk full)")
        code, _, err = call("population", str(SCENARIOS / "eutopia.yaml"), "--out", str(disk / "pop.parquet"))
        one_line(code, err, "pop.parquet", "No space left on device")
        assert list(disk.iterdir()) == []  # no temp folder, no temp file, no empty output root
        study = write_study(tmp_path, tiny_doc())
        code, _, err = call("study", str(study), "--workers", "0", "--quiet", "--out", str(disk / "study"))
        one_line(code, err, "disk full", "stopped after 0 new runs", "rerun to resume")
        assert list((disk / "study" / "failed").iterdir()) == []  # not the run's fault: not recorded
        subprocess.run(["mount", "-o", "remount,size=32m", str(disk)], check=True)
        code, out, err = call("study", str(study), "--workers", "0", "--quiet", "--out", str(disk / "study"))
        assert code == 0 and "4 succeeded, 0 skipped, 0 failed" in out, err


def test_read_only_output_folders_exit_2(tmp_path):
    existing = tmp_path / "src" / "study"
    (existing / "runs").mkdir(parents=True)
    (existing / "failed").mkdir()
    study = write_study(tmp_path, tiny_doc())
    with tmpfs(tmp_path / "ro", "64k", readonly=True) as ro:
        code, _, err = call(*SMALL_RUN, "--out", str(ro / "runs"))
        one_line(code, err, "cannot create output folder (Read-only file system)")
        code, _, err = call("population", str(SCENARIOS / "eutopia.yaml"), "--out", str(ro / "p.parquet"))
        one_line(code, err, "Read-only file system")
        code, _, err = call("study", str(study), "--workers", "0", "--quiet", "--out", str(ro / "s"))
        one_line(code, err, "cannot create the study folder (Read-only file system)")
    bound = tmp_path / "bound"
    bound.mkdir()
    subprocess.run(["mount", "--bind", str(tmp_path / "src"), str(bound)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(bound)], check=True)
        code, _, err = call("study", str(study), "--workers", "0", "--quiet", "--out", str(bound / "study"))
        one_line(code, err, "cannot write the study folder (Read-only file system)")  # was a traceback
    finally:
        subprocess.run(["umount", "-l", str(bound)], check=False)


def test_write_errors_at_the_os_boundary_exit_2(tmp_path, monkeypatch):
    """The same contract without root: the file system's errors raised where files are written."""
    import abm.runner

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(abm.runner, "write_parquet", full)
    code, _, err = call(*SMALL_RUN, "--out", str(tmp_path / "runs"))
    one_line(code, err, "cannot write run folder (disk full)")
    assert not (tmp_path / "runs").exists()
    monkeypatch.undo()

    def forbidden(self, *_a, **_k):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))

    monkeypatch.setattr(Path, "mkdir", forbidden)
    code, _, err = call(*SMALL_RUN, "--out", str(tmp_path / "runs"))
    one_line(code, err, "cannot create output folder (Permission denied)")
