"""Server-side data of the dashboard: folder checks, applicant pages, timelines, the Hawkes
trace (checked against the intensities the engine recorded and against a brute-force sum over
the whole event log), study bands, the live model and the CLI's refusals."""

from __future__ import annotations

import json
import shutil
import socket

import numpy as np
import pandas as pd
import pytest
import yaml

from abm.errors import UserError
from conftest import SCENARIOS

SMALL = ["population.n_male=300", "population.n_female=300", "episodes.count=5", "arrivals.base_intercept=10.0"]


def _run(tmp_path_factory, name: str, *overrides: str):
    from abm.config import load_scenario
    from abm.runner import run_to_folder

    scenario = load_scenario(SCENARIOS / "eutopia.yaml", SMALL + list(overrides))
    folder, _ = run_to_folder(scenario, tmp_path_factory.mktemp(name))
    return folder


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return _run(tmp_path_factory, "run")


@pytest.fixture(scope="module")
def run(run_dir):
    from abm.dashboard.data import open_folder

    return open_folder(run_dir)


# -- opening folders ----------------------------------------------------------------------
def test_bad_folders_are_user_errors(tmp_path, run_dir):
    from abm.dashboard.data import open_folder

    with pytest.raises(UserError, match="no such folder"):
        open_folder(tmp_path / "missing")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        open_folder(tmp_path / "file.txt")
    with pytest.raises(UserError, match="neither a run folder"):
        open_folder(tmp_path)
    broken = tmp_path / "broken"
    shutil.copytree(run_dir, broken)
    (broken / "agents.parquet").write_text("not parquet")
    with pytest.raises(UserError, match="unreadable run folder"):
        open_folder(broken)
    study = tmp_path / "study"
    study.mkdir()
    (study / "manifest.json").write_text(json.dumps({"name": "s", "runs": []}))
    with pytest.raises(UserError, match="no summary.parquet"):
        open_folder(study)


def test_metric_panels_name_the_recorded_group_metrics(run):
    from abm.dashboard.data import metric_panels

    panels = dict(metric_panels(run.episodes.columns))
    assert panels["mean wealth ($K)"] == ["mean_wealth_M", "mean_wealth_F"]
    assert panels["wealth gap ($K)"] == ["wealth_gap"]
    assert panels["Hawkes intensity at episode end"] == ["intensity_M", "intensity_F"]
    assert not any(title.startswith("recall") for title in panels)  # Eutopia records no recall
    study_cols = ["config", "episode", "mean_wealth_A_mean", "mean_wealth_A_std", "recall_A_mean", "recall_A_std"]
    assert dict(metric_panels(study_cols, suffix="_mean")) == {"mean wealth ($K)": ["mean_wealth_A"],
                                                                "recall (cumulative)": ["recall_A"]}


def test_score_family_metrics_and_columns():
    from abm.dashboard.data import applicant_page, metric_panels

    cols = ["episode", "mean_score_G1", "mean_score_G2", "credit_gap", "applications_G1", "applications_G2",
            "recall_G1", "recall_G2", "social_burden_G1", "social_burden_G2"]
    assert [title for title, _ in metric_panels(cols)] == [
        "mean credit score", "credit gap (1-Wasserstein)", "recall (cumulative)",
        "social burden (mean cost paid by the admitted)"]
    agents = pd.DataFrame({"agent_id": [0, 1, 2, 3], "group": ["G1", "G2", "G2", "G2"],
                           "initial_score": [4.0, 5.0, 6.0, 2.0], "final_score": [5.0, 5.0, 7.0, 2.0],
                           "applications": [1, 3, 2, 0], "loans": [1, 2, 2, 0], "defaults": [0, 1, 0, 0]})
    rows, total = applicant_page(agents, "g2", sort_by="loans", descending=True, state="score")
    assert total == 3 and rows["agent_id"].tolist() == [1, 2, 3]  # ties keep applicant order
    assert list(rows.columns) == ["agent_id", "group", "initial_score", "final_score", "applications", "loans",
                                  "defaults"]


# -- applicants ---------------------------------------------------------------------------
def test_applicant_page_searches_sorts_and_pages(run):
    from abm.dashboard.data import applicant_page

    agents = run.agents
    rows, total = applicant_page(agents, "17")
    assert total == 1 and rows["agent_id"].tolist() == [17]
    rows, total = applicant_page(agents, " f ", sort_by="final_wealth", descending=True, page=0, page_size=7)
    expected = agents[agents["group"].astype(str) == "F"].sort_values("final_wealth", ascending=False)
    assert total == 300
    assert rows["agent_id"].tolist() == expected["agent_id"].head(7).tolist()
    assert list(rows.columns) == ["agent_id", "group", "initial_wealth", "final_wealth", "applications",
                                  "approvals", "defaults"]
    last, total = applicant_page(agents, "", page=10_000, page_size=64)  # clipped to the last page
    assert total == 600 and last["agent_id"].tolist() == list(range(576, 600))
    assert applicant_page(agents, "nobody")[1] == 0
    with pytest.raises(UserError, match="no column 'score'"):
        applicant_page(agents, sort_by="score")


def test_timeline_is_the_applicants_events_and_wealth_path(run, run_dir):
    from abm.dashboard.data import applicant_timeline

    agent_id = int(run.agents["approvals"].idxmax())
    timeline = applicant_timeline(run, agent_id)
    every = pd.read_parquet(run_dir / "events.parquet")
    mine = every[every["agent_id"] == agent_id].reset_index(drop=True)
    assert len(timeline.events) == len(mine) >= 3
    np.testing.assert_array_equal(timeline.events["time"], mine["time"])
    assert timeline.events["kind"].tolist() == mine["kind"].astype(str).tolist()
    np.testing.assert_array_equal(timeline.events["wealth_after"], mine["wealth_after"])
    row = run.agents.iloc[agent_id]
    assert timeline.state == "wealth"
    assert timeline.path["wealth"].iloc[0] == row["initial_wealth"]
    assert timeline.path["wealth"].iloc[-2] == pytest.approx(row["final_wealth"], rel=1e-12)  # last event
    assert timeline.path["time"].iloc[-1] == run.episodes["time"].iloc[-1]
    with pytest.raises(UserError, match="no applicant 600"):
        applicant_timeline(run, 600)


# -- the Hawkes trace ---------------------------------------------------------------------
def _brute_force_intensity(run_dir, t: float, group: str, params: dict) -> float:
    """lambda_g(t) from the whole event log: every approval so far, every applicant's wealth."""
    events = pd.read_parquet(run_dir / "events.parquet")
    agents = pd.read_parquet(run_dir / "agents.parquet")
    in_g = events["group"].astype(str) == group
    approvals = events.loc[in_g & (events["kind"].astype(str) == "approve") & (events["time"] <= t), "time"]
    excitation = params["excitation"] * np.exp(-params["decay"] * (t - approvals.to_numpy())).sum()
    wealth = agents.set_index("agent_id")["initial_wealth"].copy()
    seen = events[events["time"] <= t].groupby("agent_id")["wealth_after"].last()
    wealth.loc[seen.index] = seen
    mu = wealth[agents.set_index("agent_id")["group"].astype(str) == group].mean()
    return max(0.0, params["base_intercept"] + params["base_slope"] * mu) + excitation


def test_trace_passes_through_recorded_intensities_and_matches_brute_force(run, run_dir):
    from abm.dashboard.data import hawkes_parameters, intensity_trace

    params = hawkes_parameters(run)
    assert params["excite_on"] == "approvals" and params["decay"] == 2.0
    for first, last in ((0, 4), (2, 3)):
        trace = intensity_trace(run, first, last)
        ends = run.episodes.iloc[first:last + 1]
        for g in ("M", "F"):
            at_ends = trace[trace["group"] == g].set_index("time")["intensity"].reindex(ends["time"]).to_numpy()
            np.testing.assert_allclose(at_ends, ends[f"intensity_{g}"], rtol=1e-9)
    trace = intensity_trace(run, 2, 3)
    assert trace["time"].min() == pytest.approx(20.0) and trace["time"].max() == pytest.approx(40.0)
    for g in ("M", "F"):
        rows = trace[trace["group"] == g].reset_index(drop=True)
        for k in (len(rows) // 7, len(rows) // 2, 6 * len(rows) // 7):  # points inside episodes
            at = float(rows["time"].iloc[k])
            assert rows["intensity"].iloc[k] == pytest.approx(_brute_force_intensity(run_dir, at, g, params),
                                                              rel=1e-9)


def test_trace_refuses_bad_windows_and_other_families(run, run_dir, tmp_path):
    from abm.dashboard.data import MAX_TRACE_EPISODES, hawkes_parameters, intensity_trace, open_folder

    with pytest.raises(UserError, match="out of range 0..4"):
        intensity_trace(run, 3, 5)
    with pytest.raises(UserError, match=f"at most {MAX_TRACE_EPISODES}"):
        intensity_trace(run.__class__(run.folder, run.summary, pd.concat([run.episodes] * 5, ignore_index=True),
                                      run.agents), 0, MAX_TRACE_EPISODES)
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    scenario = yaml.safe_load((other / "scenario.yaml").read_text())
    scenario["family"] = "credit_score"
    (other / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    assert hawkes_parameters(open_folder(other)) is None
    with pytest.raises(UserError, match="not a Hawkes-arrival"):
        intensity_trace(open_folder(other), 0, 1)


def test_trace_with_excitation_on_applications(tmp_path_factory):
    from abm.dashboard.data import intensity_trace, open_folder

    run = open_folder(_run(tmp_path_factory, "apps", "arrivals.excite_on=applications", "episodes.count=3"))
    trace = intensity_trace(run, 1, 2)
    for g in ("M", "F"):
        got = trace[trace["group"] == g].set_index("time")["intensity"].reindex(run.episodes["time"].iloc[1:])
        np.testing.assert_allclose(got.to_numpy(), run.episodes[f"intensity_{g}"].iloc[1:], rtol=1e-9)


# -- studies ------------------------------------------------------------------------------
def _summary() -> pd.DataFrame:
    return pd.DataFrame({
        "config_id": ["a", "a", "b", "b"], "config": ["approve_all", "approve_all", "random", "random"],
        "episode": [0, 1, 0, 1], "count": [3, 3, 1, 1],
        "wealth_gap_mean": [10.0, 12.0, 5.0, 6.0], "wealth_gap_std": [1.0, 2.0, np.nan, np.nan]})


def test_study_bands_are_mean_plus_minus_std_and_the_table_a_95_ci():
    from abm.dashboard.data import study_bands, study_final_table

    bands = study_bands(_summary(), "wealth_gap")
    a = bands[bands["config"] == "approve_all"]
    assert a["lower"].tolist() == [9.0, 10.0] and a["upper"].tolist() == [11.0, 14.0]
    b = bands[bands["config"] == "random"]
    assert (b["lower"] == b["mean"]).all() and (b["upper"] == b["mean"]).all()  # one run: no spread
    final = study_final_table(_summary(), ["wealth_gap"])
    assert final.to_dict("list") == {"configuration": ["approve_all", "random"], "runs": [3, 1],
                                     "wealth_gap": ["12.00 ± 5.0", "6.000"]}  # t(0.975, 2) * 2 / sqrt(3) = 4.97
    with pytest.raises(UserError, match="no metric 'profit'"):
        study_bands(_summary(), "profit")


def test_a_label_in_two_study_groups_is_two_rows_each_with_its_own_runs():
    """PPO in lending and PPO in admissions are two configurations: the table says which group each
    row is, and each row's links are its own runs."""
    from abm.dashboard.data import Study, runs_by_config, study_final_table

    summary = _summary().assign(config=["PPO"] * 4, study_groups=["lending"] * 2 + ["admissions"] * 2)
    final = study_final_table(summary, ["wealth_gap"])
    assert list(final.index) == ["a", "b"] and final["configuration"].tolist() == ["PPO", "PPO"]
    assert final["group"].tolist() == ["lending", "admissions"] and list(final.columns)[:3] == ["configuration", "group", "runs"]
    frame = pd.DataFrame({"run_id": ["PPO-a-r0", "PPO-a-r0", "PPO-b-r0", "PPO-b-r1"], "config_id": ["a", "a", "b", "b"],
                          "config": ["PPO"] * 4, "episode": [0, 1, 0, 0]})
    study = Study(SCENARIOS, {}, summary, ["PPO-a-r0", "PPO-b-r0", "PPO-b-r1"])
    assert runs_by_config(study, frame) == {"a": ["PPO-a-r0"], "b": ["PPO-b-r0", "PPO-b-r1"]}
    assert "group" not in study_final_table(_summary().assign(study_groups="one"), ["wealth_gap"]).columns


def test_study_folder_lists_finished_runs(tmp_path, run_dir):
    from abm.dashboard.data import Study, open_folder
    from abm.runner import write_parquet

    (tmp_path / "runs").mkdir()
    shutil.copytree(run_dir, tmp_path / "runs" / "approve_all-a-r0")
    (tmp_path / "runs" / "random-b-r0").mkdir()  # unfinished: no summary.json
    manifest = {"name": "tiny", "runs": [{"run_id": "approve_all-a-r0"}, {"run_id": "random-b-r0"}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    write_parquet(_summary(), tmp_path / "summary.parquet")
    study = open_folder(tmp_path)
    assert isinstance(study, Study) and study.name == "tiny"
    assert study.run_ids == ["approve_all-a-r0"]
    assert len(study.run("approve_all-a-r0").agents) == 600
    with pytest.raises(UserError, match="no finished run 'random-b-r0'"):
        study.run("random-b-r0")


# -- the page's helpers, the live model and the command line ------------------------------
def test_timeline_rows_and_tables_escape_text(run):
    from abm.dashboard.app import _html_table, timeline_rows
    from abm.dashboard.data import applicant_timeline

    events = applicant_timeline(run, int(run.agents["approvals"].idxmax())).events
    rows = timeline_rows(events)
    first = events.iloc[0]
    assert rows[0] == [f"{first['time']:.4f}", str(first["episode"]), "apply", f"{first['amount']:.4f}",
                       f"{first['wealth_after']:.4f}", ""]
    assert "&lt;b&gt;" in _html_table(["h"], [["<b>"]], "t") and "<b>" not in _html_table(["h"], [["<b>"]], "t")


def test_open_target_rereads_a_rewritten_folder(tmp_path, run_dir):
    import os

    from abm.dashboard.app import open_target

    folder = tmp_path / "copy"
    shutil.copytree(run_dir, folder)
    first = open_target(folder)
    assert open_target(folder) is first  # cached
    later = (folder / "summary.json").stat().st_mtime_ns + 10**9
    os.utime(folder / "summary.json", ns=(later, later))
    assert open_target(folder) is not first


def test_live_simulation_steps_one_episode_of_the_same_trajectory():
    from abm.config import load_scenario
    from abm.dashboard.live import LiveSimulation
    from abm.build import simulation

    overrides = ("population.n_male=200", "population.n_female=200", "episodes.count=2")
    live = LiveSimulation(str(SCENARIOS / "eutopia.yaml"), seed=3, overrides=overrides)
    assert live.running and live.episode == 0
    live.step()
    assert live.episode == 1 and live.steps == 1 and live.env.now == pytest.approx(10.0) and live.running
    live.step()
    assert not live.running
    live.step()  # a finished model stays finished
    batch = simulation(load_scenario(SCENARIOS / "eutopia.yaml", list(overrides), seed=3))
    batch.run()
    pd.testing.assert_frame_equal(live.metrics(), pd.DataFrame(batch.episode_rows))


def test_cli_refuses_bad_folders_and_busy_ports(tmp_path, monkeypatch, capsys):
    from abm.cli import main
    from abm.dashboard import check_port

    for args, message in (([str(tmp_path)], f"{tmp_path}: neither a run folder (no summary.json) nor a study "
                                            "folder (no manifest.json)"),
                          ([], "dashboard: give a run or study folder, or --live SCENARIO (one of them)"),
                          ([str(tmp_path), "--seed", "3"], "dashboard: --policy, --seed and --set apply to --live "
                                                           "SCENARIO only"),
                          (["--live", str(tmp_path / "nope.yaml")], f"{tmp_path / 'nope.yaml'}: no such file")):
        monkeypatch.setattr("sys.argv", ["abm", "dashboard", *args])
        with pytest.raises(SystemExit) as exit_info:
            main()
        assert exit_info.value.code == 2
        assert capsys.readouterr().err.strip() == f"error: {message}"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UserError, match=f"--port {port}: cannot listen"):
            check_port("127.0.0.1", port)


def test_page_shows_an_error_page_for_a_bad_folder(monkeypatch, tmp_path, run_dir):
    import ipyvuetify as v
    import solara

    from abm.dashboard.app import TARGET_ENV, Page

    monkeypatch.setenv(TARGET_ENV, str(tmp_path / "gone"))
    _, rc = solara.render(Page(), handle_error=False)
    assert [a.children for a in rc.find(v.Alert).widgets] == [[f"{tmp_path / 'gone'}: no such folder"]]
    monkeypatch.setenv(TARGET_ENV, str(run_dir))
    _, rc = solara.render(Page(), handle_error=False)
    assert not rc.find(v.Alert).widgets
    assert [t.children for t in rc.find(v.Tab).widgets] == [["Group metrics"], ["Applicants"],
                                                             ["Rates and distributions"], ["Hawkes intensity"]]
