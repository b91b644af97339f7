"""The console script end to end (subprocess), and its error contract."""

import json

import pandas as pd


SMALL = ["--set", "population.n_male=200", "--set", "population.n_female=200", "--episodes", "3", "--quiet"]


def test_population_command(cli, tmp_path):
    out = tmp_path / "pop.parquet"
    res = cli("population", "scenarios/eutopia.yaml", "--out", str(out))
    assert res.returncode == 0, res.stderr
    frame = pd.read_parquet(out)
    for col in ("agent_id", "group", "wealth", "score", "label", "loan_amount", "default", "gain", "approval_score"):
        assert col in frame.columns
    assert len(frame) == 6000 and "mean wealth" in res.stdout


def test_run_inspect_report(cli, tmp_path):
    res = cli("run", "scenarios/eutopia.yaml", "--policy", "random", "--out", str(tmp_path), *SMALL)
    assert res.returncode == 0, res.stderr
    folder = next(p for p in tmp_path.iterdir() if p.is_dir())
    assert f"run folder: {folder}" in res.stdout
    ev = pd.read_parquet(folder / "events.parquet")
    agent = int(ev["agent_id"].iloc[0])
    res = cli("inspect", str(folder), "--agent", str(agent))
    assert res.returncode == 0 and f"applicant {agent}" in res.stdout
    assert res.stdout.count("apply") == (ev["agent_id"] == agent).sum() - (ev[ev["agent_id"] == agent]["kind"] != "apply").sum()
    res = cli("inspect", str(folder), "--group", "F")
    assert res.returncode == 0 and "group F" in res.stdout
    res = cli("report", str(folder))
    assert res.returncode == 0
    for name in ("mean_wealth.png", "wealth_gap.png", "cumulative_profit.png", "reach.png", "summary.md", "summary.csv"):
        assert (folder / "report" / name).stat().st_size > 0
    res = cli("policies")
    assert res.returncode == 0 and "oracle" in res.stdout
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["policy"] == "random"
    res = cli("run", "scenarios/eutopia.yaml", "--policy", "random", "--out", str(tmp_path), *SMALL)
    assert res.returncode == 0 and "reused, nothing recomputed" in res.stdout
    res = cli("run", "scenarios/eutopia.yaml", "--policy", "random", "--out", str(tmp_path), "--recompute", *SMALL)
    assert res.returncode == 0 and "recomputing on request" in res.stderr and "reused" not in res.stdout
    assert [p.name for p in tmp_path.iterdir() if ".stale-" in p.name] == [f"{folder.name}.stale-{summary['code_fingerprint']}"]


def test_a_run_folder_runs_again_from_its_own_scenario_yaml(cli, tmp_path):
    res = cli("run", "scenarios/eutopia.yaml", "--policy", "random", "--out", str(tmp_path / "a"), *SMALL)
    assert res.returncode == 0, res.stderr
    (folder,) = [p for p in (tmp_path / "a").iterdir() if p.is_dir()]
    for source in (folder, folder / "scenario.yaml"):  # the folder, or its fully resolved scenario (abm_version kept)
        out = tmp_path / f"again-{source.name}"
        res = cli("run", str(source), "--out", str(out), "--quiet")
        assert res.returncode == 0, res.stderr
        (again,) = [p for p in out.iterdir() if p.is_dir()]
        assert again.name == folder.name  # the same configuration: the same identity
        for name in ("episodes.parquet", "events.parquet", "agents.parquet", "scenario.yaml"):
            assert (again / name).read_bytes() == (folder / name).read_bytes(), name
    (tmp_path / "empty").mkdir()
    res = cli("run", str(tmp_path / "empty"))
    assert res.returncode == 2 and "without scenario.yaml" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_bad_inputs_exit_2_one_line(cli, tmp_path):
    cases = [
        ("run", "scenarios/eutopia.yaml", "--policy", "nonexistent"),
        ("run", "scenarios/eutopia.yaml", "--set", "arrivals.decay=oops"),
        ("run", "scenarios/missing.yaml"),
        ("inspect", str(tmp_path / "no-such-run"), "--agent", "1"),
        ("run", "scenarios/eutopia.yaml", "--objective", "sideways:utilitarian"),
        ("run", "scenarios/eutopia.yaml", "--episodes", "many"),
    ]
    for args in cases:
        res = cli(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert "Traceback" not in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, (args, res.stderr)
