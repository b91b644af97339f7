"""``abm study --order / --skip`` (``run_study``'s ``order`` and ``skip``): a study's runs started
in a chosen order (named policies first, each at every seed before the next) and the runs a
ledger of earlier sittings holds left out; the order changes no run, bit for bit; bad values are
refused in one line before anything is written."""

import fcntl
from pathlib import Path

import pandas as pd
import pytest

from abm.errors import UserError
from conftest import call_in_process
from abm.study import load_study, run_study
from abm.study.spec import names_policy, order_runs

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "scenarios" / "studies" / "smoke.yaml"


def test_named_policies_come_first_replicate_by_replicate():
    study = load_study(SMOKE)  # 2 slopes x (approve_all, random) x 2 seeds, approve_all first
    order = order_runs(study, ["random"])
    labels = [(r.columns["policy"].split("(")[0], r.replicate) for r in order]
    assert labels[:4] == [("random", 0), ("random", 0), ("random", 1), ("random", 1)]
    assert [p for p, _ in labels[4:]] == ["approve_all"] * 4
    assert [r.run_id for r in order[4:]] == [r.run_id for r in study.runs if r.columns["policy"].startswith("approve")]
    assert sorted(r.run_id for r in order) == sorted(r.run_id for r in study.runs)
    assert order_runs(study, []) == study.runs


@pytest.mark.parametrize("item, label, expected", [
    ("ppo", "ppo(backend=lean,n_envs=16)", True), ("ppo", "a_ppo(backend=lean)", False),
    ("max_util", "max_util", True), ("bisim_ppo:full", "bisim_ppo(variant=full)", True),
    ("bisim_ppo:full", "bisim_ppo(variant=reward_only)", False), ("bisim_ppo", "bisim_ppo(variant=full)", True)])
def test_an_item_names_a_policy_or_one_variant(item, label, expected):
    assert names_policy(item, label) is expected


def test_the_order_changes_no_run_and_the_local_cluster_starts_runs_in_it(tmp_path):
    from abm.study.aggregate import read_run_times

    study = load_study(SMOKE)
    # one worker, so the start order is observable: run_times.csv keeps the finishing order
    ordered = run_study(study, tmp_path / "ordered", workers=1, quiet=True, order=["random"])
    assert (ordered.succeeded, ordered.failed) == (8, 0)
    times = read_run_times(tmp_path / "ordered")
    assert list(times["run_id"]) == [r.run_id for r in order_runs(study, ["random"])]
    assert list(times["run_id"])[:4] != [r.run_id for r in study.runs][:4]
    plain = run_study(study, tmp_path / "plain", workers=0, quiet=True)
    assert plain.succeeded == 8

    def folder_bytes(folder):
        return {p.name: (p / "episodes.parquet").read_bytes() for p in (folder / "runs").iterdir()}

    assert folder_bytes(tmp_path / "ordered") == folder_bytes(tmp_path / "plain")
    again = run_study(study, tmp_path / "ordered", workers=0, quiet=True)  # abm study reuses every one
    assert (again.skipped, again.succeeded) == (8, 0)


def test_runs_a_ledger_holds_are_left_out_and_counted(cli, tmp_path):
    study = load_study(SMOKE)
    ledger = tmp_path / "ledger.csv"
    held = [r.run_id for r in study.runs[:3]]
    pd.DataFrame({"run_id": held, "recall_gap": [0.1, 0.2, 0.3]}).to_csv(ledger, index=False)
    out = tmp_path / "next"
    done = cli("study", str(SMOKE), "--workers", "0", "--out", str(out), "--skip", str(ledger),
               "--order", "random,approve_all")
    assert done.returncode == 0, done.stderr
    assert "8 runs: 5 succeeded, 0 skipped, 3 held by --skip, 0 failed" in done.stdout
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(r.run_id for r in study.runs[3:])
    # a held run whose folder is here after all is reused, not held
    again = run_study(study, out, workers=0, quiet=True, skip={study.runs[3].run_id, *held})
    assert (again.skipped, again.held, again.succeeded) == (5, 3, 0)


@pytest.mark.parametrize("args, message", [
    (["--order", "ppo"], "--order: 'ppo' names no policy of study smoke (approve_all, random)"),
    (["--order", "random:full"], "--order: 'random:full' names no policy of study smoke"),
    (["--skip", "{tmp}/none.csv"], "{tmp}/none.csv: no such ledger (--skip)"),
    (["--skip", "{tmp}/cols.csv"], "{tmp}/cols.csv: not a ledger (--skip: no column 'run_id')"),
    (["--skip", "{tmp}/bin.csv"], "{tmp}/bin.csv: not a ledger CSV (--skip: "),
    (["--skip", "{tmp}"], "--skip {tmp}: is a folder, not a file"),
])
def test_bad_values_are_refused_in_one_line_before_anything_is_written(tmp_path, args, message):
    (tmp_path / "cols.csv").write_text("a,b\n1,2\n")
    (tmp_path / "bin.csv").write_bytes(b"\x00\xff\xfe\n\x01")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    out = tmp_path / "out"
    code, stdout, stderr = call_in_process("study", str(SMOKE), "--workers", "0", "--out", str(out), *args)
    assert code == 2, stdout
    assert stderr.startswith("error: " + message.replace("{tmp}", str(tmp_path))), stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr
    assert not out.exists()


def test_the_python_api_takes_an_order_and_a_ledger(tmp_path):
    import abm

    study = load_study(SMOKE)
    ledger = tmp_path / "ledger.csv"
    pd.DataFrame({"run_id": [study.runs[0].run_id]}).to_csv(ledger, index=False)
    result = abm.study(SMOKE, out=tmp_path / "a", order=["random"], skip=ledger)
    assert (result.outcome.succeeded, result.outcome.held) == (7, 1)
    ids = abm.study(SMOKE, out=tmp_path / "b", order="random", skip=[r.run_id for r in study.runs[:2]])
    assert (ids.outcome.succeeded, ids.outcome.held) == (6, 2)
    with pytest.raises(UserError, match="no such ledger"):
        abm.study(SMOKE, out=tmp_path / "c", skip=tmp_path / "none.csv")


def test_order_is_checked_by_run_study_itself(tmp_path):
    with pytest.raises(UserError, match="--order: 'nobody' names no policy"):
        run_study(load_study(SMOKE), tmp_path / "x", workers=0, quiet=True, order=["nobody"])
    assert not (tmp_path / "x").exists()


def test_a_folder_another_study_holds_is_refused(cli, tmp_path):
    from abm.study.execute import LOCK

    out = tmp_path / "smoke"
    out.mkdir()
    with open(out / LOCK, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = cli("study", str(SMOKE), "--order", "random", "--workers", "0", "--out", str(out))
    assert done.returncode == 2
    assert done.stderr == f"error: {out}: another study is running in this folder\n"
    assert not (out / "runs").exists() or not any((out / "runs").iterdir())


@pytest.mark.parametrize("order, items", [("random", ["random"]), ("random, approve_all", ["random", "approve_all"]),
                                          ("bisim_ppo:full,,", ["bisim_ppo:full"]), ("", []),
                                          (["random", " approve_all "], ["random", "approve_all"]), ((), [])])
def test_order_items_read_the_cli_string_and_a_sequence_alike(order, items):
    from abm.study.spec import order_items

    assert order_items(order) == items


def test_the_python_api_reads_a_comma_separated_order_as_the_cli_does(tmp_path):
    """``abm.study(order="a,b")`` is ``--order a,b``: two items (it was one, refused as naming no
    policy)."""
    import abm

    result = abm.study(SMOKE, out=tmp_path / "a", order="random, approve_all")
    assert result.outcome.succeeded == 8
    with pytest.raises(UserError, match="'nobody' names no policy"):
        abm.study(SMOKE, out=tmp_path / "b", order="random,nobody")
