"""The Bisimulator's One-Plus-One search with speculative helper processes
(``policies/deep/search.py``, ``ABM_PHASE_WORKERS``): the failure predictions are nevergrad's own
next candidates, the search with helpers is the search without them (the same candidates, scores
and result, bit for bit, also when a helper fails or dies), and a bad setting is refused in one
line."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, SCENARIOS

nevergrad = pytest.importorskip("nevergrad")
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="helpers are forked processes")

LOW, HIGH = np.array([0.0, 0.0, -2.0, -2.0]), np.array([2.0, 2.0, 0.0, 0.0])
TARGET = np.array([0.3, 1.2, -0.5, -1.7])


def optimizer(seed: int, budget: int = 120):
    """The dynamics phase's search (``Bisimulator.dynamics_phase`` builds it the same way)."""
    from policies.deep.search import one_plus_one_optimizer

    return one_plus_one_optimizer(np.array([1.0, 1.0, -1.0, -1.0]), LOW, HIGH, budget, seed)


def objective(omega: np.ndarray) -> float:
    return float(np.sum((omega - TARGET) ** 2))


def plain(seed: int, budget: int = 120) -> list[tuple[np.ndarray, float]]:
    """The loop the Bisimulator ran before helpers: ask, evaluate, tell."""
    opt, out = optimizer(seed, budget), []
    for _ in range(budget):
        cand = opt.ask()
        omega = np.asarray(cand.value, dtype=float)
        loss = objective(omega)
        opt.tell(cand, loss)
        out.append((omega, loss))
    return out


def same(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) and l == m for (x, l), (y, m) in zip(a, b))


@pytest.mark.parametrize("seed", range(4))
def test_every_failure_is_predicted_exactly_and_predicting_changes_nothing(seed):
    from policies.deep.search import predict_failures

    opt, out = optimizer(seed), []
    predicted = failures = hits = 0
    for i in range(120):
        cand = opt.ask()
        omega = np.asarray(cand.value, dtype=float)
        if i and out:  # the prediction made while the previous candidate was scored
            failures += failed
            hits += np.array_equal(omega, guess)
            predicted += 1
        guess = predict_failures(opt, 1)[0] if opt.num_tell else None
        before = opt._previous_best_loss
        loss = objective(omega)
        failed = loss > before
        opt.tell(cand, loss)
        out.append((omega, loss))
    assert same(out, plain(seed))  # asking for predictions left the search as it was
    assert failures >= 0.6 * predicted  # most candidates fail, so most predictions are used
    assert hits == failures  # ... and each failure's successor was predicted bit for bit


def test_a_chain_of_failures_is_predicted_in_order():
    """k predictions are the candidates of k failures in a row: telling failures reproduces them."""
    from policies.deep.search import predict_failures

    opt = optimizer(5)
    opt.tell(opt.ask(), 0.0)  # the start point, the best: every later (positive) score fails
    scored = opt.ask()
    chain = predict_failures(opt, 4)  # while ``scored`` is scored: the next 4 if it and 3 more fail
    opt.tell(scored, 1.0)
    for guess in chain:
        cand = opt.ask()
        assert np.array_equal(np.asarray(cand.value, dtype=float), guess)
        opt.tell(cand, 1.0 + objective(np.asarray(cand.value, dtype=float)))


@needs_fork
@pytest.mark.parametrize("n_helpers", [1, 2])
def test_the_search_with_helpers_is_the_search_without(n_helpers):
    from policies.deep.search import Helpers, one_plus_one

    for seed in range(3):
        with Helpers(n_helpers, objective) as helpers:
            told, from_helpers = one_plus_one(optimizer(seed), 120, objective, helpers)
        assert same(told, plain(seed))
        assert from_helpers > 30  # the helpers' scores were used, not just computed


@needs_fork
@pytest.mark.parametrize("how", ["raises", "dies"])
def test_a_helper_that_fails_changes_nothing(how):
    """A helper whose scoring raises answers 'failed'; one that dies closes its pipe: either way
    this process scores the candidate itself and the search is the plain one."""
    from policies.deep.search import Helpers, one_plus_one

    parent = os.getpid()
    calls = {"n": 0}

    def flaky(omega):
        if os.getpid() != parent:  # in the helper
            calls["n"] += 1
            if calls["n"] > 5:
                if how == "dies":
                    os._exit(3)
                raise RuntimeError("boom")
        return objective(omega)

    with Helpers(1, flaky) as helpers:
        told, from_helpers = one_plus_one(optimizer(1), 120, flaky, helpers)
        assert helpers.alive == [False]
    assert same(told, plain(1))
    assert 0 < from_helpers <= 5


def test_no_helpers_and_a_short_budget():
    from policies.deep.search import one_plus_one

    for budget in (1, 2, 7):
        told, from_helpers = one_plus_one(optimizer(0, budget), budget, objective, None)
        assert same(told, plain(0, budget)) and from_helpers == 0


@pytest.mark.parametrize("value, expected", [("", 1), ("1", 1), ("2", 2), (" 4 ", 4), ("64", 64)])
def test_phase_workers_reads_the_environment(monkeypatch, value, expected):
    from policies.deep.search import phase_workers

    monkeypatch.setenv("ABM_PHASE_WORKERS", value)
    assert phase_workers() == expected


@pytest.mark.parametrize("value", ["0", "65", "-1", "2.0", "two", "1e3", "99999999999"])
def test_a_bad_phase_workers_is_refused_in_one_line(monkeypatch, value):
    from abm.errors import UserError
    from policies.deep.search import phase_workers

    monkeypatch.setenv("ABM_PHASE_WORKERS", value)
    with pytest.raises(UserError) as err:
        phase_workers()
    assert str(err.value) == (f"ABM_PHASE_WORKERS={value!r}: must be a whole number from 1 to 64 "
                              "(processes per Bisimulator dynamics phase)")


def test_a_bad_phase_workers_exits_2_from_abm_run(tmp_path):
    """Checked when the lender is built, before any training: one line, exit 2, no run folder."""
    env = {**os.environ, "ABM_PHASE_WORKERS": "zero"}
    res = subprocess.run([sys.executable, "-m", "abm.cli", "run", str(SCENARIOS / "lending-credit.yaml"),
                          "--policy", "bisim_ppo", "--set", "policy.total_timesteps=300", "--set", "population.size=200",
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=300)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "ABM_PHASE_WORKERS='zero': must be a whole number from 1 to 64" in lines[0], res.stderr
    assert not any((tmp_path / "out").glob("*/summary.json"))


@needs_fork
def test_a_dynamics_phase_with_helpers_is_the_phase_without(monkeypatch):
    """The whole phase on a small market (200 applicants, N = 40): the same omega and J_dyn with
    one helper as without, and the helper scored some of the candidates. Each trainer has already
    run one phase with the same W while training (SB3's first rollout of 512 decisions reaches
    outer_steps), so training with helpers is checked too."""
    from abm.build import simulation
    from abm.config import validate_scenario_dict

    small = {"family": "credit_score", "name": "tiny", "population": {"size": 200}, "seed": 3,
             "episodes": {"count": 1, "horizon": 256}, "outputs": {"events": False},
             "policy": {"name": "bisim_ppo", "total_timesteps": 256, "dynamics_iterations": 40}}
    results = []
    for workers in ("1", "2"):
        monkeypatch.setenv("ABM_PHASE_WORKERS", workers)
        tr = simulation(validate_scenario_dict(small)).policy.bisimulator
        assert tr.phase_workers == int(workers)
        best = tr.bisim.dynamics_phase(tr.phase_collect, tr.spec, n_probes=tr.p.probe_envs, workers=tr.phase_workers)
        results.append((best, tr.bisim.last_j_dyn, tr.bisim.last_from_helpers))
    (a, ja, na), (b, jb, nb) = results
    assert np.array_equal(a, b) and ja == jb
    assert na == 0 and nb > 0


@needs_fork
def test_a_runs_cpu_time_counts_its_helper_processes():
    """run_times.csv's cpu_s and the bench's CPU ratios: a helper's CPU (a child that ended and
    was waited for) counts to the run that forked it."""
    import time

    from abm.study.execute import cpu_seconds

    before = cpu_seconds()
    pid = os.fork()
    if pid == 0:
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        os._exit(0)
    os.waitpid(pid, 0)
    assert cpu_seconds() - before >= 0.25


def test_the_bench_sets_a_figures_environment_only_while_it_trains(monkeypatch):
    """``lender_training(env=...)``: the variable is restored afterwards, also when the lender is
    refused (a bad ABM_PHASE_WORKERS fails when the lender is built)."""
    from abm.bench import lender_training
    from abm.errors import UserError

    monkeypatch.setenv("ABM_PHASE_WORKERS", "1")
    with pytest.raises(UserError, match="ABM_PHASE_WORKERS='0'"):
        lender_training("bisim_ppo", 64, ("population.size=200",), env={"ABM_PHASE_WORKERS": "0"})
    assert os.environ["ABM_PHASE_WORKERS"] == "1"
    monkeypatch.delenv("ABM_PHASE_WORKERS")
    with pytest.raises(UserError):
        lender_training("bisim_ppo", 64, ("population.size=200",), env={"ABM_PHASE_WORKERS": "x"})
    assert "ABM_PHASE_WORKERS" not in os.environ


@pytest.mark.parametrize("args, message", [
    (["--workers", "0,2"], "error: argument --workers: comma-separated whole numbers from 1 to 64, got '0,2'"),
    (["--workers", "two"], "error: argument --workers: comma-separated whole numbers from 1 to 64, got 'two'"),
    (["--steps", "0"], "error: argument --steps: must be at least 1, got 0"),
])
def test_phase_helpers_script_refuses_bad_input_in_one_line(args, message):
    script = ROOT / "benchmarks" / "phase_helpers.py"
    res = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip() == message, res.stderr


@needs_fork
def test_a_helper_that_cannot_be_started_leaves_fewer_helpers(monkeypatch):
    """os.fork failing (no process to be had): a warning, the helpers started so far, the same search."""
    import policies.deep.search as search

    real, calls = os.fork, {"n": 0}

    def fork():
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError(11, "Resource temporarily unavailable")
        return real()

    monkeypatch.setattr(search.os, "fork", fork)
    with pytest.warns(UserWarning, match="could not start a helper process .* the phase runs with 1 helper"):
        helpers = search.Helpers(3, objective)
    with helpers:
        assert len(helpers) == 1
        told, from_helpers = search.one_plus_one(optimizer(2), 120, objective, helpers)
    assert same(told, plain(2)) and from_helpers > 30


@needs_fork
def test_helpers_in_a_dask_workers_study_change_no_file(tmp_path, monkeypatch):
    """A study's runs on a local Dask worker (a daemonic, multithreaded process) fork their helpers
    too: every run file is the same as the in-process study's without helpers."""
    import hashlib

    import abm

    study = {"study": {"name": "helpers", "seed": 7, "episodes": 2, "seeds": 2},
             "base": str(SCENARIOS / "lending-credit.yaml"), "overrides": {"population.size": 200},
             "policies": [{"name": "bisim_ppo", "backend": "lean", "total_timesteps": 1024, "outer_steps": 256,
                           "dynamics_every": 2, "dynamics_iterations": 30, "dynamics_rollout": 64, "probe_envs": 3}]}
    monkeypatch.delenv("ABM_PHASE_WORKERS", raising=False)
    abm.study(study, workers=0, out=tmp_path / "plain")
    monkeypatch.setenv("ABM_PHASE_WORKERS", "2")  # the Dask workers inherit the environment
    abm.study(study, workers=1, out=tmp_path / "helpers")

    def digests(folder):
        return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted((folder / "runs").rglob("*")) if p.is_file() and p.name != "summary.json"}

    plain, helped = digests(tmp_path / "plain"), digests(tmp_path / "helpers")
    assert plain == helped and any(name.endswith("episodes.parquet") for name in plain)
    assert any(name.endswith("policy/bisimulator.csv") for name in plain)  # the runs did have phases
