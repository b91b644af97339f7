"""Population studies: study files, run identity and seeds, Dask execution (local cluster and a
real scheduler on loopback), kill-and-resume, failures, aggregation and the report."""

from __future__ import annotations

import hashlib
import json
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
import yaml

from abm.errors import UserError
from abm.study import config_label, derive_seed, load_study, run_study, study_from_dict
ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
SMOKE = SCENARIOS / "studies" / "smoke.yaml"


def tiny_doc(**changes) -> dict:
    """4 runs of a 2 x 200-applicant Eutopia market, 3 episodes each (about 0.3 s per run)."""
    doc = {
        "study": {"name": "tiny", "seed": 11, "episodes": 3, "seeds": 1},
        "base": str(SCENARIOS / "eutopia.yaml"),
        "overrides": {"population.n_male": 200, "population.n_female": 200},
        "grid": {"arrivals.base_slope": [0.01, 0.03]},
        "policies": [{"name": "approve_all"}, {"name": "random", "p": 0.5}],
    }
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            doc[section] = {**doc[section], field: value}
        else:
            doc[section] = value
    return doc


def write_study(folder: Path, doc: dict, name: str = "study.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def event_digest(run_dir: Path) -> str:
    events = pd.read_parquet(run_dir / "events.parquet")
    return hashlib.sha256(pd.util.hash_pandas_object(events, index=False).to_numpy().tobytes()).hexdigest()


def digests(study_dir: Path) -> dict[str, str]:
    return {d.name: event_digest(d) for d in sorted((study_dir / "runs").iterdir())}


@pytest.fixture(scope="module")
def serial_study(tmp_path_factory):
    """The tiny study run in a plain loop once per module: the reference the Dask paths match."""
    folder = tmp_path_factory.mktemp("serial")
    study = study_from_dict(tiny_doc(), "tiny")
    outcome = run_study(study, folder / "out", workers=0, quiet=True)
    return study, folder / "out", outcome


# --------------------------------------------------------------------------------------------
# Study files, ids and seeds


def test_common_seeds_pair_replicates_across_configurations():
    keyed = study_from_dict(tiny_doc(study__seeds=2), "keyed")
    common = study_from_dict(tiny_doc(study__seeds=2, study__common_seeds=True), "common")
    assert len({r.seed for r in keyed.runs}) == 8  # default: every run its own seed
    by_rep = {}
    for spec in common.runs:
        assert spec.run_id.endswith(f"-cr{spec.replicate}") and spec.seed == derive_seed(11, None, spec.replicate)
        by_rep.setdefault(spec.replicate, set()).add(spec.seed)
    assert {k: len(v) for k, v in by_rep.items()} == {0: 1, 1: 1} and by_rep[0] != by_rep[1]
    assert not {r.run_id for r in common.runs} & {r.run_id for r in keyed.runs}  # never share a folder
    from abm.config import validate_scenario_dict
    from abm.population import generate_population

    a, b = (s for s in common.runs if s.replicate == 0 and s.columns["policy"] == "approve_all")
    pop_a, pop_b = (generate_population(validate_scenario_dict(s.scenario, "t")) for s in (a, b))
    pd.testing.assert_frame_equal(pop_a, pop_b)  # the same applicants for both configurations


def test_smoke_study_is_small_and_every_run_is_a_valid_scenario():
    study = load_study(SMOKE)
    assert study.name == "smoke" and len(study.runs) == 8 and study.configurations == 4
    assert len({r.run_id for r in study.runs}) == 8 and len({r.seed for r in study.runs}) == 8
    for spec in study.runs:
        assert spec.scenario["episodes"]["count"] == 8
        assert spec.scenario["population"]["n_male"] == 400
        assert spec.scenario["seed"] == spec.seed == derive_seed(2024, spec.config_id, spec.replicate)
    assert {r.columns["policy"] for r in study.runs} == {"approve_all", "random(p=0.5)"}


def test_run_ids_and_seeds_do_not_depend_on_order_and_extend_stably():
    a = study_from_dict(tiny_doc(study__seeds=2), "a")
    b = study_from_dict(tiny_doc(study__seeds=[1, 0], grid={"arrivals.base_slope": [0.03, 0.01]},
                                 policies=[{"name": "random", "p": 0.5}, {"name": "approve_all"}]), "b")
    pairs = {(r.run_id, r.seed) for r in a.runs}
    assert pairs == {(r.run_id, r.seed) for r in b.runs} and len(pairs) == 8
    more = study_from_dict(tiny_doc(study__seeds=3), "c")
    assert pairs < {(r.run_id, r.seed) for r in more.runs}
    other_seed = study_from_dict(tiny_doc(study__seeds=2, study__seed=12), "d")
    assert {r.run_id for r in other_seed.runs} == {r.run_id for r in a.runs}
    assert not {r.seed for r in other_seed.runs} & {r.seed for r in a.runs}
    spec = a.runs[0]  # the seed is SeedSequence(study seed) keyed by the configuration id words
    words = tuple(int(spec.config_id[i:i + 8], 16) for i in range(0, 16, 8))
    expected = np.random.SeedSequence(11, spawn_key=(*words, spec.replicate)).generate_state(1, np.uint64)[0]
    assert spec.seed == int(expected) & (2**63 - 1)


def test_groups_merge_over_the_study_and_share_identical_runs():
    doc = tiny_doc(groups={
        "baseline": {"policies": [{"name": "approve_all"}]},
        "random": {"policies": [{"name": "approve_all"}, {"name": "random", "p": 0.2}],
                   "grid": {"arrivals.excitation": [0.1, 0.3]}},
    })
    study = study_from_dict(doc, "g")
    by_group = {g: [r for r in study.runs if g in r.groups] for g in ("baseline", "random")}
    assert len(by_group["baseline"]) == 2 and len(by_group["random"]) == 8
    # approve_all with excitation 0.3 (the base value) is the baseline run: one run, two groups
    shared = [r for r in study.runs if r.groups == ("baseline", "random")]
    assert len(shared) == 2 and len(study.runs) == 8
    assert all(r.scenario["arrivals"]["excitation"] == 0.3 for r in shared)


def test_a_group_may_bring_its_own_base_scenario_another_family():
    doc = tiny_doc(overrides={}, grid={}, groups={
        "eutopia": {"overrides": {"population.n_male": 200, "population.n_female": 200}},
        "credit": {"base": str(SCENARIOS / "lending-credit.yaml"), "overrides": {"population.size": 100},
                   "policies": [{"name": "approve_all"}, {"name": "max_util"}]},
    })
    study = study_from_dict(doc, "g")
    family = {r.columns["policy"] + "/" + r.groups[0]: r.scenario["family"] for r in study.runs}
    assert family == {"approve_all/eutopia": "eutopia", "random(p=0.5)/eutopia": "eutopia",
                      "approve_all/credit": "credit_score", "max_util/credit": "credit_score"}
    assert study.document["groups"]["credit"]["base"]["family"] == "credit_score"  # inlined in the manifest
    assert "base" not in study.document["groups"]["eutopia"]
    with pytest.raises(UserError, match=r"^g: groups\.credit\.base: .*missing\.yaml"):
        study_from_dict(tiny_doc(overrides={}, grid={}, groups={"credit": {"base": "missing.yaml"}}), "g")


@pytest.mark.parametrize("change, field", [
    ({"study__seeds": 0}, "study.seeds"),
    ({"study__colour": "red"}, "study.colour"),
    ({"grid": {"arrivals.base_slop": [1, 2]}}, "arrivals.base_slop"),
    ({"grid": {"arrivals.base_slope": [-1.0]}}, "arrivals.base_slope"),
    ({"grid": {"arrivals.base_slope": 0.1}}, "grid"),
    ({"grid": {"policy.p": [0.1]}}, "grid"),
    ({"policies": [{"name": "random", "p": 3}]}, "policies"),
    ({"policies": [{"name": "no_such_policy"}]}, "policies"),
    ({"objectives": ["outcome:bogus"]}, "objectives"),
    ({"base": "missing.yaml"}, "base"),
    ({"overrides": {"episodes.horizon": -1}}, "episodes.horizon"),
])
def test_bad_study_files_name_the_field(tmp_path, change, field):
    path = write_study(tmp_path, tiny_doc(**change))
    with pytest.raises(UserError) as info:
        load_study(path)
    message = str(info.value)
    assert message.startswith(str(path)) and f"{field}" in message and "\n" not in message


def test_cli_exit_2_for_bad_study_1_for_a_failed_run(cli, tmp_path):
    bad = write_study(tmp_path, tiny_doc(grid={"arrivals.decay": [0.0]}), "bad.yaml")
    for args in (("validate", str(SMOKE), str(bad)), ("study", str(bad), "--out", str(tmp_path / "x"))):
        done = cli(*args)
        assert done.returncode == 2, done.stderr
        assert (f"{SMOKE}: ok" in done.stdout) == (args[0] == "validate")
        assert done.stderr.strip().count("\n") == 0 and "arrivals.decay" in done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "x").exists()
    # a run that fails at run time: reported on stderr, the others finish, exit code 1
    failing = write_study(tmp_path, tiny_doc(grid={"population.n_male": [200, 40000]},
                                             policies=[{"name": "approve_all"}]), "failing.yaml")
    done = cli("study", str(failing), "--workers", "0", "--out", str(tmp_path / "f"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.count("failed: approve_all-") == 1 and "sample_with_replacement" in done.stderr
    assert "2 runs: 1 succeeded, 0 skipped, 1 failed" in done.stdout
    progress = [line for line in done.stderr.splitlines() if "runs done" in line]  # off a terminal: plain lines
    assert progress[-1].startswith("study tiny: 2/2 runs done, 1 failed") and len(progress) == 2


# --------------------------------------------------------------------------------------------
# Execution


def test_two_local_workers_give_the_serial_results_run_for_run(serial_study, tmp_path):
    from abm.study import local_client

    study, serial_dir, outcome = serial_study
    assert (outcome.succeeded, outcome.skipped, outcome.failed) == (4, 0, 0)
    with local_client(2, tmp_path / "scratch") as client:
        assert sorted(client.nthreads().values()) == [1, 1]  # two single-threaded worker processes
        dask_out = run_study(study, tmp_path / "dask", client=client, quiet=True)
    assert (dask_out.succeeded, dask_out.failed) == (4, 0)
    assert not (tmp_path / "scratch").exists()
    from abm.study.aggregate import read_run_times

    times = read_run_times(tmp_path / "dask")  # measured on the workers, kept by the study
    assert len(times) == 4 and (times["cpu_s"] > 0).all() and (times["backend"] == "dask client").all()
    reference = digests(serial_dir)
    assert reference == digests(tmp_path / "dask") and len(reference) == 4
    pd.testing.assert_frame_equal(pd.read_parquet(serial_dir / "summary.parquet"),
                                  pd.read_parquet(tmp_path / "dask" / "summary.parquet"))


def test_rerun_skips_finished_runs_and_the_folder_is_locked(serial_study, tmp_path):
    from abm.study.execute import _locked

    study, serial_dir, _ = serial_study
    before = {d.name: (d / "summary.json").stat().st_mtime_ns for d in (serial_dir / "runs").iterdir()}
    again = run_study(study, serial_dir, workers=0, quiet=True)
    assert (again.succeeded, again.skipped, again.failed, again.backend) == (0, 4, 0, "nothing to run")
    assert before == {d.name: (d / "summary.json").stat().st_mtime_ns for d in (serial_dir / "runs").iterdir()}
    with _locked(serial_dir):
        with pytest.raises(UserError, match="another study"):
            run_study(study, serial_dir, workers=0, quiet=True)


def test_stale_runs_are_kept_and_counted_until_recompute_stale(serial_study, tmp_path):
    study, serial_dir, _ = serial_study
    folder = tmp_path / "copy"
    shutil.copytree(serial_dir, folder)
    old = folder / "runs" / study.runs[0].run_id
    summary = json.loads((old / "summary.json").read_text())
    (old / "summary.json").write_text(json.dumps({**summary, "code_fingerprint": "0123456789ab"}))
    kept = run_study(study, folder, workers=0, quiet=True)
    assert (kept.succeeded, kept.skipped, kept.stale) == (0, 4, 1) and "--recompute-stale" in kept.summary_line("t")
    status = pd.read_csv(folder / "runs.csv").set_index("run_id")
    assert status.loc[old.name, ["status", "code_fingerprint"]].tolist() == ["stale", "0123456789ab"]
    assert (status.drop(index=old.name)["status"] == "ok").all()
    redone = run_study(study, folder, workers=0, quiet=True, recompute_stale=True)
    assert (redone.succeeded, redone.skipped, redone.stale, redone.recomputed_stale) == (1, 3, 0, 1)
    assert (folder / "runs" / f"{old.name}.stale-0123456789ab" / "summary.json").is_file()  # nothing lost
    assert event_digest(old) == event_digest(serial_dir / "runs" / old.name)  # the same code, the same run
    assert len(pd.read_parquet(folder / "study.parquet")["run_id"].unique()) == 4  # the set-aside one is not counted


def test_failing_run_is_recorded_and_the_others_finish(tmp_path):
    # 40,000 men without replacement exceeds UCI Adult: valid config, fails when the run starts
    doc = tiny_doc(grid={"population.n_male": [200, 40000]}, policies=[{"name": "approve_all"}])
    study = study_from_dict(doc, "fail")
    leftover = tmp_path / "out" / "runs" / ".tmp-leftover-of-a-killed-study"
    (leftover).mkdir(parents=True)
    (leftover / "summary.json").write_text("{}")
    outcome = run_study(study, tmp_path / "out", workers=0, quiet=True)
    assert (outcome.succeeded, outcome.failed) == (1, 1) and not leftover.exists()
    bad = next(r for r in study.runs if r.scenario["population"]["n_male"] == 40000)
    record = json.loads((tmp_path / "out" / "failed" / f"{bad.run_id}.json").read_text())
    assert "UserError" in record["error"] and "sample_with_replacement" in record["error"]
    assert "Traceback" in record["traceback"]
    assert not (tmp_path / "out" / "runs" / bad.run_id).exists()
    status = pd.read_csv(tmp_path / "out" / "runs.csv").set_index("run_id")["status"].to_dict()
    assert status == {bad.run_id: "failed", next(r.run_id for r in study.runs if r is not bad): "ok"}
    resumed = run_study(study, tmp_path / "out", workers=0, quiet=True)
    assert (resumed.succeeded, resumed.skipped, resumed.failed, resumed.failed_before) == (0, 1, 1, 1)
    retried = run_study(study, tmp_path / "out", workers=0, quiet=True, retry_failed=True)
    assert (retried.succeeded, retried.skipped, retried.failed, retried.failed_before) == (0, 1, 1, 0)
    assert "1 failed" in retried.summary_line("fail") and "1 skipped" in retried.summary_line("fail")


def test_each_computed_run_keeps_its_wall_and_cpu_time(serial_study, tmp_path):
    from abm.study.aggregate import read_run_times

    study, serial_dir, _ = serial_study
    times = read_run_times(serial_dir)
    ids = [r.run_id for r in study.runs]
    assert sorted(times["run_id"]) == sorted(ids) and (times["status"] == "ok").all()
    assert (times["wall_s"] > 0).all() and (times["cpu_s"] > 0).all() and (times["load_1m"] >= 0).all()
    assert (times["backend"] == "in process, no dask").all()
    status = pd.read_csv(serial_dir / "runs.csv").set_index("run_id")
    np.testing.assert_allclose(status.loc[times["run_id"], "wall_s"], times["wall_s"].to_numpy())
    # a resumed study computes nothing and adds no line; a recomputed run adds one, the latest counts
    folder = tmp_path / "copy"
    shutil.copytree(serial_dir, folder)
    before = (folder / "run_times.csv").read_text()
    run_study(study, folder, workers=0, quiet=True)
    assert (folder / "run_times.csv").read_text() == before
    shutil.rmtree(folder / "runs" / ids[0])
    run_study(study, folder, workers=0, quiet=True)
    again = read_run_times(folder)
    assert len(again) == 5 and list(again["run_id"]).count(ids[0]) == 2
    status = pd.read_csv(folder / "runs.csv").set_index("run_id")
    assert status.at[ids[0], "wall_s"] == pytest.approx(again[again["run_id"] == ids[0]]["wall_s"].iloc[-1], abs=1e-3)
    from abm.reports import render

    comparison = (render(folder) / "comparison.md").read_text()
    assert "## Time" in comparison and "4 runs," in comparison
    assert "| approve_all, arrivals.base_slope=0.01 | 1 |" in comparison


def test_run_times_name_the_machine_and_an_older_file_keeps_its_columns(serial_study, tmp_path):
    from abm.study.aggregate import OLD_TIME_COLUMNS, TIME_COLUMNS, read_run_times
    from abm.study.execute import machine

    study, serial_dir, _ = serial_study
    times = read_run_times(serial_dir)
    assert list(times.columns) == list(TIME_COLUMNS) and (times["machine"] == machine()).all()
    assert machine() and "\n" not in machine()
    import torch  # noqa: F401  (a deep run has loaded it): the kernels torch picked are named

    assert "; torch " in machine()
    # a study folder begun before the column: read with machine empty, resumed in its own columns
    folder = tmp_path / "old"
    shutil.copytree(serial_dir, folder)
    path = folder / "run_times.csv"
    import csv
    import io

    rows = list(csv.reader(io.StringIO(path.read_text())))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([list(OLD_TIME_COLUMNS)] + [row[:-1] for row in rows[1:]])
    path.write_text(buf.getvalue())
    old = read_run_times(folder)
    assert len(old) == 4 and (old["machine"] == "").all()
    shutil.rmtree(folder / "runs" / study.runs[0].run_id)
    run_study(study, folder, workers=0, quiet=True)
    lines = path.read_text().splitlines()
    assert len(lines) == 6 and lines[0] == ",".join(OLD_TIME_COLUMNS)
    assert len(next(csv.reader([lines[-1]]))) == len(OLD_TIME_COLUMNS)
    again = read_run_times(folder)
    assert len(again) == 5 and again["run_id"].iloc[-1] == study.runs[0].run_id


@pytest.mark.parametrize("damage", ["torn", "garbage", "binary", "other_header", "empty"])
def test_damaged_run_times_drop_bad_lines_and_never_block_the_report(serial_study, tmp_path, damage):
    from abm.reports import render
    from abm.reports.study import time_section
    from abm.study.aggregate import read_manifest, read_run_times

    study, serial_dir, _ = serial_study
    folder = tmp_path / "copy"
    shutil.copytree(serial_dir, folder)
    path = folder / "run_times.csv"
    good = path.read_text()
    if damage == "torn":  # a study killed mid-write: the last line cut short
        path.write_text(good + study.runs[0].run_id + ",ok,2026-")
    elif damage == "garbage":
        path.write_text(good + "not,a,number,x,y,z,w,v\n" + "too,few\n")
    elif damage == "binary":
        path.write_bytes(b"\x00\xff\xfe" * 100)
    elif damage == "other_header":
        path.write_text("a,b\n1,2\n")
    else:
        path.write_text("")
    times = read_run_times(folder)
    assert len(times) == (4 if damage in ("torn", "garbage") else 0)
    section = time_section(folder, read_manifest(folder), ["arrivals.base_slope"])
    assert (section[:1] == ["## Time"]) == (damage in ("torn", "garbage"))
    if damage == "binary":  # the whole report renders beside a file that is not even text
        assert "## Time" not in (render(folder) / "comparison.md").read_text()
    run_study(study, folder, workers=0, quiet=True)  # the study itself is not disturbed
    assert set(pd.read_csv(folder / "runs.csv")["status"]) == {"ok"}


def test_a_failed_run_is_timed_but_not_counted_in_the_report(tmp_path):
    from abm.reports import render
    from abm.study.aggregate import read_run_times

    doc = tiny_doc(grid={"population.n_male": [200, 40000]}, policies=[{"name": "approve_all"}])
    study = study_from_dict(doc, "fail")
    run_study(study, tmp_path / "out", workers=0, quiet=True)
    times = read_run_times(tmp_path / "out")
    assert sorted(times["status"]) == ["failed", "ok"]
    status = pd.read_csv(tmp_path / "out" / "runs.csv").set_index("run_id")
    assert status[status["status"] == "failed"]["wall_s"].isna().all()
    assert "1 run, " in (render(tmp_path / "out") / "comparison.md").read_text()


def test_study_table_summary_and_report(serial_study):
    study, folder, _ = serial_study
    table = pd.read_parquet(folder / "study.parquet")
    assert len(table) == 4 * 3 and not table.duplicated(["run_id", "episode"]).any()
    for col in ("run_id", "config_id", "config", "study_group", "study_groups", "policy", "objective",
                "arrivals.base_slope", "seed", "wealth_gap"):
        assert col in table.columns
    run = table[table["run_id"] == study.runs[0].run_id].sort_values("episode")
    own = pd.read_parquet(folder / "runs" / study.runs[0].run_id / "episodes.parquet")
    np.testing.assert_allclose(run["wealth_gap"].to_numpy(), own["wealth_gap"].to_numpy(), rtol=0, atol=0)
    # two replicates of one configuration: mean and std by hand
    doc = tiny_doc(study__seeds=2, grid={"arrivals.base_slope": [0.02]}, policies=[{"name": "random", "p": 0.5}])
    two = run_study(study_from_dict(doc, "two"), folder.parent / "two", workers=0, quiet=True)
    summary = pd.read_parquet(folder.parent / "two" / "summary.parquet")
    runs = pd.read_parquet(folder.parent / "two" / "study.parquet")
    assert two.succeeded == 2 and list(summary["count"]) == [2, 2, 2]
    by_hand = runs.groupby("episode")["cumulative_profit"].agg(["mean", "std"])
    np.testing.assert_allclose(summary["cumulative_profit_mean"], by_hand["mean"], rtol=1e-12)
    np.testing.assert_allclose(summary["cumulative_profit_std"], by_hand["std"], rtol=1e-12)
    from abm.reports import render

    out = render(folder)
    comparison = (out / "comparison.md").read_text()
    for label in ("approve_all, arrivals.base_slope=0.01", "random(p=0.5), arrivals.base_slope=0.03"):
        assert label in comparison
    csv = pd.read_csv(out / "comparison.csv")
    assert len(csv) == 4 and (csv["episode"] == 2).all() and (csv["runs"] == 1).all()
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert {"wealth_gap.png", "mean_wealth_F.png", "cumulative_profit.png"} <= set(pngs)
    assert all((out / p).stat().st_size > 5000 for p in pngs)
    assert not {"seed_tables.md", "seed001_tables.md"} & {p.name for p in out.iterdir()}  # no paper applies


def test_paper_reports_share_one_interface_and_each_applies_to_its_own_studies(tmp_path):
    from abm.reports import PAPERS, benchmark, seed000, seed001, seed002

    assert PAPERS == (seed000, seed001, seed002, benchmark)
    rows = []
    for label in ("race_blind", "fair_lp(constraint=dp)", "fair_lp(constraint=eo)"):
        for episode in (0, 1):
            rows.append({"run_id": label, "policy": label, "episode": episode, "bank.gamma": 0.8,
                         "exact_reward": 0.08, "exact_discounted_return": 0.4, "exact_dp_gap": 0.1,
                         "exact_eo_gap": -0.1, "sim_reward": 0.08, "sim_reward_se": 0.001, "sim_dp_gap": 0.1,
                         "sim_dp_gap_se": 0.01, "sim_eo_gap": -0.1, "sim_eo_gap_se": 0.01})
    fig1, eutopia, empty = tmp_path / "fig1", tmp_path / "eutopia", tmp_path / "empty"
    for folder in (fig1, eutopia, empty):
        folder.mkdir()
    pd.DataFrame(rows).to_parquet(fig1 / "study.parquet")
    pd.DataFrame({"run_id": ["a", "a"], "policy": ["oracle"] * 2, "episode": [0, 1],
                  "wealth_gap": [1.0, 2.0]}).to_parquet(eutopia / "study.parquet")
    assert [p.applies(fig1) for p in PAPERS] == [False, True, False, False]
    assert [p.applies(eutopia) for p in PAPERS] == [True, False, False, False]
    assert [p.applies(empty) for p in PAPERS] == [False, False, False, False]
    assert all(p.write(empty, empty) == [] for p in PAPERS)
    (written,) = seed001.write(fig1, fig1)
    assert written.name == "seed001_tables.md" and "| race-blind | 0.080000 |" in written.read_text()


def test_real_scheduler_and_worker_on_loopback(cli, serial_study, tmp_path):
    _, serial_dir, _ = serial_study
    dask = [str(Path(sys.executable).parent / "dask")]
    if not Path(dask[0]).exists():
        dask = [sys.executable, "-m", "dask"]
    info = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(info)], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:")
        procs.append(subprocess.Popen([*dask, "worker", address, "--nworkers", "1", "--nthreads", "1",
                                       "--no-dashboard", "--local-directory", str(tmp_path / "w")],
                                      cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        path = write_study(tmp_path, tiny_doc())
        done = cli("study", str(path), "--scheduler", address, "--out", str(tmp_path / "out"), timeout=300)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.strip().splitlines()  # not a terminal: one quiet summary line
        assert len(lines) == 1 and "4 succeeded, 0 skipped, 0 failed" in lines[0]
        assert f"dask scheduler {address}" in lines[0]
        assert digests(tmp_path / "out") == digests(serial_dir)
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_killed_study_resumes_with_exactly_the_expected_runs(tmp_path):
    doc = tiny_doc(study__seeds=2, study__episodes=5)  # 8 runs of about 0.4 s each
    path = write_study(tmp_path, doc)
    out = tmp_path / "out"
    runs = out / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "abm.cli", "study", str(path), "--workers", "2", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    complete: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            complete = [d.name for d in runs.glob("[!.]*") if (d / "summary.json").exists()] if runs.exists() else []
            if len(complete) >= 2:
                break
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the study and its Dask workers, mid-study
        proc.wait()
    assert 2 <= len(complete) < 8, f"kill did not land mid-study ({len(complete)} runs done)"
    time.sleep(0.5)
    study = load_study(path)
    expected = {r.run_id for r in study.runs}
    finished = set()
    for d in runs.iterdir():  # whatever survived the kill: complete, or an obvious temp folder
        if d.name.startswith(".tmp-"):
            continue
        summary = json.loads((d / "summary.json").read_text())
        assert summary["invariants"] == "passed" and len(pd.read_parquet(d / "episodes.parquet")) == 5
        finished.add(d.name)
    assert finished <= expected and len(finished) >= len(complete)
    resumed = run_study(study, out, workers=0, quiet=True)
    assert (resumed.skipped, resumed.succeeded, resumed.failed) == (len(finished), 8 - len(finished), 0)
    assert {d.name for d in runs.iterdir()} == expected  # no temp leftovers, nothing extra
    assert not (out / ".dask-scratch").exists()
    table = pd.read_parquet(out / "study.parquet")
    assert len(table) == 8 * 5 and not table.duplicated(["run_id", "episode"]).any()
    assert set(table["run_id"]) == expected
    assert set(pd.read_csv(out / "runs.csv")["status"]) == {"ok"}


@pytest.mark.slow
def test_smoke_study_end_to_end_with_the_default_backend(cli, tmp_path):
    """The smoke study is far below a local cluster's break-even: the default runs it in process
    and says so (tests/test_study_backend.py: the rule; the kill test: an explicit --workers 2)."""
    out = tmp_path / "smoke"
    first = cli("study", str(SMOKE), "--out", str(out), "--report", timeout=600)
    assert first.returncode == 0, first.stderr
    assert "8 runs: 8 succeeded, 0 skipped, 0 failed" in first.stdout and "[in process, no dask]" in first.stdout
    assert first.stdout.startswith("backend: in process, 8 runs in ")
    assert (out / "report" / "comparison.md").is_file() and (out / "report" / "wealth_gap.png").is_file()
    assert not (out / ".dask-scratch").exists()
    summary = pd.read_parquet(out / "summary.parquet")
    assert len(summary) == 4 * 8 and (summary["count"] == 2).all()
    again = cli("study", str(SMOKE), "--out", str(out), timeout=600)
    assert again.returncode == 0 and "0 succeeded, 8 skipped, 0 failed" in again.stdout


@pytest.mark.parametrize("study_file", sorted((Path(__file__).resolve().parents[1] / "scenarios" / "studies").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_study_entries_naming_the_base_policy_keep_its_parameters(study_file):
    """A study's policy entry replaces the base scenario's policy whole (its parameters are not
    merged in), so an entry that names the base's policy with fewer parameters silently runs that
    policy at its defaults. table2.yaml's ``{name: classifier}`` did: the default burn-in of 1,000
    decisions is the whole run, so its "accuracy classifier" admitted everyone. Every shipped
    study file that names its base's policy must repeat the base's parameters."""
    raw = yaml.safe_load(study_file.read_text())
    base = yaml.safe_load((study_file.parent / raw["base"]).read_text())
    base_policy = base.get("policy") or {}
    entries = list(raw.get("policies") or [])
    for group in (raw.get("groups") or {}).values() if isinstance(raw.get("groups"), dict) else (raw.get("groups") or []):
        entries += list((group or {}).get("policies") or [])
    from abm import registry

    for entry in entries:
        if entry.get("name") == base_policy.get("name"):
            defaults = registry.get(entry["name"]).Params.model_fields
            dropped = {k: v for k, v in base_policy.items()
                       if k != "name" and k not in entry and defaults[k].default != v}
            assert not dropped, f"{study_file.name}: {entry} drops the base policy's {dropped}"


def test_a_policy_label_names_the_configuration_and_changes_no_run_id():
    plain = study_from_dict(tiny_doc(), "plain")
    labelled = study_from_dict(tiny_doc(policies=[{"name": "approve_all", "label": "Everyone"},
                                                  {"name": "random", "p": 0.5, "label": "Coin flip"}]), "labelled")
    assert [(r.run_id, r.config_id, r.seed, r.scenario) for r in labelled.runs] == \
        [(r.run_id, r.config_id, r.seed, r.scenario) for r in plain.runs]  # the label is not in the scenario
    assert "label" not in plain.runs[0].columns  # an unlabelled study's manifest is as before
    names = [config_label(r.columns, labelled.grid_keys) for r in labelled.runs]
    assert names == ["Everyone, arrivals.base_slope=0.01", "Coin flip, arrivals.base_slope=0.01",
                     "Everyone, arrivals.base_slope=0.03", "Coin flip, arrivals.base_slope=0.03"]


@pytest.mark.parametrize("policies, groups, message", [
    ([{"name": "random", "label": ""}], None, "policies: entry [0] (random): label is empty"),
    ([{"name": "random", "label": 3}], None, "policies: entry [0] (random): label must be text, got 3"),
    ([{"name": "random", "label": "x" * 61}], None, "label is 61 characters long; at most 60"),
    ([{"name": "random", "label": "a\nb"}], None, "label 'a\\nb' holds a line break or control character"),
    ([{"name": "random", "label": "A"}, {"name": "approve_all", "label": "A"}], None,
     "label 'A' names two entries; give each entry its own label"),
    ([{"name": "random", "label": "approve_all"}, {"name": "approve_all"}], None,
     "policies: label 'approve_all' names two policies, random and approve_all; give each its own label"),
    (None, {"a": {"policies": [{"name": "random", "label": "A"}]},
            "b": {"policies": [{"name": "random", "label": "B"}]}},
     "policies: random has two labels, 'A' and 'B'; give it one"),
])
def test_a_bad_label_is_refused_in_one_line_with_exit_2(tmp_path, policies, groups, message):
    from conftest import call_in_process

    doc = tiny_doc(**({"policies": policies} if policies else {}), **({"groups": groups} if groups else {}))
    with pytest.raises(UserError) as err:
        study_from_dict(doc, "s.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, stderr = call_in_process("validate", str(path))
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and message in lines[0], stderr


def test_study_parquet_names_study_groups_apart_from_population_groups(tmp_path):
    """``group`` is never the study's name: the study's named groups are ``study_group(s)``, the
    population groups are in the metric columns (and in ``StudyResult.tidy()``'s ``group``)."""
    import abm

    doc = tiny_doc(study__episodes=2, grid={"arrivals.base_slope": [0.02]}, overrides={
        "population.n_male": 60, "population.n_female": 60}, policies=[{"name": "random", "p": 0.5, "label": "Coin"}])
    result = abm.study(doc, out=tmp_path / "s")
    frame = result.frame
    assert "group" not in frame.columns and "groups" not in frame.columns
    assert set(frame["study_group"]) == {"tiny"} and frame["config"].iloc[0] == "Coin, arrivals.base_slope=0.02"
    tidy = result.tidy()
    assert list(tidy.columns) == ["run", "configuration", "episode", "group", "metric", "value"]
    assert set(tidy["group"].dropna()) == {"M", "F"} and tidy["group"].isna().any()
    own = result.run(result.run_ids[0]).episodes
    row = tidy[(tidy["episode"] == 1) & (tidy["group"] == "F") & (tidy["metric"] == "mean_wealth")]
    assert row["value"].item() == own.loc[own["episode"] == 1, "mean_wealth_F"].item()
    gap = tidy[(tidy["metric"] == "wealth_gap") & (tidy["episode"] == 0)]
    assert gap["group"].isna().all() and gap["value"].item() == own.loc[own["episode"] == 0, "wealth_gap"].item()
    assert set(tidy["configuration"]) == {"Coin, arrivals.base_slope=0.02"}
    assert len(tidy.groupby("group")) == 2  # groupby("group") groups by population group
