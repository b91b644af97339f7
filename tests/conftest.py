"""Shared fixtures: small, fast scenarios and a CLI runner that reports exit codes like the
console script (user errors -> 2, no traceback)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"

# small runs of the seed-002 / FICO score families: (scenario file, --set overrides)
SMALL_SCORE_FAMILIES = {
    "credit_score": ("lending-credit.yaml", ["population.size=200", "episodes.count=2", "episodes.horizon=200"]),
    "fico": ("fico-delayed-impact.yaml", ["population.size=300", "episodes.count=2", "episodes.horizon=300"]),
    "admissions": ("admissions.yaml", ["population.size=200", "episodes.count=2", "episodes.horizon=60",
                                       "policy.burn_in=20"]),
}


@pytest.fixture
def eutopia_small():
    """A 2 x 300-applicant Eutopia scenario, 5 episodes; extra ``--set`` overrides as args."""
    from abm.config import load_scenario

    def make(*overrides: str, path: Path = SCENARIOS / "eutopia.yaml"):
        base = ["population.n_male=300", "population.n_female=300", "episodes.count=5",
                "arrivals.base_intercept=10.0"]
        return load_scenario(path, base + list(overrides))

    return make


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the real console entry point in a subprocess."""
    return subprocess.run([sys.executable, "-m", "abm.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout)


@pytest.fixture
def cli():
    """``abm ARGS`` as the console script reports it (a CompletedProcess), run in this process
    (the same ``abm.cli.main``, without a second interpreter's start-up); ``cwd=`` still runs a
    subprocess. Tests of what needs a fresh interpreter (signals, plugins' PYTHONPATH) use
    ``run_cli`` or ``abm_cli``."""
    def run(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
        if cwd is not None:
            return run_cli(*args, cwd=cwd, timeout=timeout)
        code, out, err = call_in_process(*args)
        return subprocess.CompletedProcess([sys.executable, "-m", "abm.cli", *args], code, out, err)

    return run


def call_in_process(*args: str) -> tuple[int, str, str]:
    """``abm ARGS`` in this process: (exit code, stdout, stderr) as the console script would
    report them. Any exception escaping ``main`` (a traceback for the user) fails the test."""
    from abm import cli as abm_cli

    out, err = io.StringIO(), io.StringIO()
    argv, sys.argv = sys.argv, ["abm", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()  # Python's own start-up filters, not pytest's: what a user's terminal shows
            for action, category in PYTHON_WARNING_FILTERS:
                warnings.simplefilter(action, category, append=True)
            try:
                abm_cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
    shown = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in caught)
    return code, out.getvalue(), err.getvalue() + shown


#: the warning filters a fresh interpreter starts with (``python -W`` not given)
PYTHON_WARNING_FILTERS = (("ignore", DeprecationWarning), ("ignore", PendingDeprecationWarning),
                          ("ignore", ImportWarning), ("ignore", ResourceWarning), ("default", Warning))


def one_line_error(args, *needles: str) -> str:
    """``abm ARGS`` in this process must be refused with exit 2 and one ``error: `` line holding
    every needle (no traceback); returns the line."""
    code, out, err = call_in_process(*args)
    assert code == 2 and "Traceback" not in err, (args, code, out[-300:], err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, err)
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# -- plugin tests: the console entry point in a fresh interpreter with the user's PYTHONPATH --
def abm_cli(*args: str, cwd: Path = ROOT, pythonpath: Path | None = None, timeout: float = 600):
    """``abm ARGS`` in a subprocess with PYTHONPATH set to ``pythonpath`` only (a user's plugin folder)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-c", "from abm.cli import main; main()", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout)


def run_folder(stdout: str) -> Path:
    """The run folder ``abm run`` printed."""
    return Path(next(line for line in stdout.splitlines() if line.startswith("run folder: ")).split(": ", 1)[1])


def one_error_line(res) -> str:
    """Exit 2, one ``error:`` line, no traceback; returns the line."""
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]
