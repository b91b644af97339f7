"""benchmarks/study_in_order.py: a study's runs computed in a chosen order into the folder
``abm study`` uses; ``abm study`` afterwards reuses them, bit for bit the runs it would compute;
bad input is refused in one line."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "study_in_order.py"
SMOKE = ROOT / "scenarios" / "studies" / "smoke.yaml"
sys.path.insert(0, str(ROOT / "benchmarks"))

import study_in_order  # noqa: E402


def test_named_policies_come_first_replicate_by_replicate():
    from abm.study.spec import load_study

    runs = load_study(SMOKE).runs  # 2 slopes x (approve_all, random) x 2 seeds, approve_all first
    order = study_in_order.ordered(runs, ["random"])
    labels = [(r.columns["policy"].split("(")[0], r.replicate) for r in order]
    assert labels[:4] == [("random", 0), ("random", 0), ("random", 1), ("random", 1)]
    assert [p for p, _ in labels[4:]] == ["approve_all"] * 4
    assert [r.run_id for r in order[4:]] == [r.run_id for r in runs if r.columns["policy"].startswith("approve")]
    assert sorted(r.run_id for r in order) == sorted(r.run_id for r in runs)


@pytest.mark.parametrize("item, label, expected", [
    ("ppo", "ppo(backend=lean,n_envs=16)", True), ("ppo", "a_ppo(backend=lean)", False),
    ("max_util", "max_util", True), ("bisim_ppo:full", "bisim_ppo(variant=full)", True),
    ("bisim_ppo:full", "bisim_ppo(variant=reward_only)", False), ("bisim_ppo", "bisim_ppo(variant=full)", True)])
def test_an_item_names_a_policy_or_one_variant(item, label, expected):
    assert study_in_order.matches(item, label) is expected


def test_abm_study_reuses_the_runs_it_computed(tmp_path):
    from abm.study.execute import run_study
    from abm.study.spec import load_study

    out = tmp_path / "smoke"
    done = subprocess.run([sys.executable, str(SCRIPT), str(SMOKE), "--order", "random", "--workers", "2",
                           "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"8 of 8 runs to compute into {out}"
    times = (out / "run_times.csv").read_text().splitlines()
    assert len(times) == 9 and all(",ok," in line for line in times[1:])
    first = {p.name: (p / "episodes.parquet").read_bytes() for p in (out / "runs").iterdir()}
    outcome = run_study(load_study(SMOKE), out, workers=0, quiet=True)
    assert (outcome.skipped, outcome.succeeded) == (8, 0)
    # the same runs, computed by the study itself
    fresh = run_study(load_study(SMOKE), tmp_path / "again", workers=0, quiet=True)
    assert fresh.succeeded == 8
    again = {p.name: (p / "episodes.parquet").read_bytes() for p in (tmp_path / "again" / "runs").iterdir()}
    assert again == first


@pytest.mark.parametrize("args, message", [
    (["--workers", "0"], "--workers: must be a whole number from 1 to 64, got '0'"),
    (["--workers", "two"], "--workers: must be a whole number from 1 to 64, got 'two'"),
    (["--order", "ppo"], "--order: 'ppo' names no policy of"),
])
def test_bad_values_are_refused_in_one_line(args, message):
    done = subprocess.run([sys.executable, str(SCRIPT), str(SMOKE), *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(message)
    assert "Traceback" not in done.stderr


def test_a_missing_study_file_is_named(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "none.yaml")], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.strip().endswith("none.yaml: file not found")


def test_a_folder_another_study_holds_is_refused(tmp_path):
    import fcntl

    from abm.study.execute import LOCK

    out = tmp_path / "smoke"
    out.mkdir()
    with open(out / LOCK, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = subprocess.run([sys.executable, str(SCRIPT), str(SMOKE), "--out", str(out)], capture_output=True,
                              text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr == f"{out}: another study is running in this folder\n"
    assert not (out / "runs").exists() or not any((out / "runs").iterdir())
