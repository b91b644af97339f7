"""The console script end to end (subprocess), and its error contract."""

import json

import pandas as pd

from conftest import ROOT, call_in_process

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


def test_bad_inputs_exit_2_one_line(tmp_path):
    """In this process (``abm.cli.main``, the script's code; a process start per case cost ~1 s)."""
    eutopia = str(ROOT / "scenarios" / "eutopia.yaml")
    cases = [
        ("run", eutopia, "--policy", "nonexistent"),
        ("run", eutopia, "--set", "arrivals.decay=oops"),
        ("run", str(ROOT / "scenarios" / "missing.yaml")),
        ("inspect", str(tmp_path / "no-such-run"), "--agent", "1"),
        ("run", eutopia, "--objective", "sideways:utilitarian"),
        ("run", eutopia, "--episodes", "many"),
    ]
    for args in cases:
        code, _, err = call_in_process(*args)
        assert code == 2, (args, err)
        assert "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, (args, err)
