"""``abm inspect --json/--csv`` (a run's overview, a group, an applicant's history, a study's runs),
the run folder's ``episodes_tidy.csv`` (the same function as ``Run.tidy()``) and ``abm report
--frontier-x/--frontier-y``; every bad input is one line on stderr and exit 2.

The CLI is called in this process (``abm.cli.main``, the console script's code) except for one
subprocess check of the error contract."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import SCENARIOS, SMALL_SCORE_FAMILIES, call_in_process, one_line_error

SMALL = ["population.n_male=100", "population.n_female=100", "episodes.count=2"]
TIES = ["network.generator=sbm", "network.homophily=0.8", "network.mean_degree=6", "network.excitation=0.07"]


call = call_in_process


def ok(*args: str) -> str:
    code, out, err = call(*args)
    assert code == 0, (args, err)
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from abm.config import load_scenario
    from abm.runner import run_to_folder

    folder, _ = run_to_folder(load_scenario(SCENARIOS / "eutopia.yaml", [*SMALL, "policy.name=random"]),
                              tmp_path_factory.mktemp("export"))
    return folder


@pytest.fixture(scope="module")
def agent(run_dir) -> int:
    """An applicant with events."""
    return int(pd.read_parquet(run_dir / "events.parquet")["agent_id"].iloc[0])


# -- episodes_tidy.csv ------------------------------------------------------------------------
def _tidy_csv(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "episodes_tidy.csv", dtype={"group": str})


def _as_plain(tidy: pd.DataFrame) -> pd.DataFrame:
    return tidy.assign(group=tidy["group"].astype(str)).reset_index(drop=True)


def test_a_run_folder_has_the_tidy_table_and_it_is_run_tidy(run_dir):
    import abm

    written = _tidy_csv(run_dir)
    assert list(written.columns) == ["episode", "group", "metric", "value"]
    run = abm.load_run(run_dir)
    pd.testing.assert_frame_equal(written, _as_plain(run.tidy()), check_exact=True)
    episodes = pd.read_parquet(run_dir / "episodes.parquet")
    assert len(written) == len(episodes) * 2 * written["metric"].nunique()
    for r in written.sample(20, random_state=0).itertuples(index=False):  # the wide cell it came from
        wide = episodes.loc[episodes["episode"] == r.episode, f"{r.metric}_{r.group}"].iloc[0]
        assert r.value == float(wide) or (np.isnan(r.value) and pd.isna(wide))
    # in memory (abm.run without a folder): the same frame
    memory = abm.run(SCENARIOS / "eutopia.yaml", policy="random", overrides=SMALL)
    pd.testing.assert_frame_equal(_as_plain(memory.tidy()), written, check_exact=True)


@pytest.mark.parametrize("family", ["credit_score"])
def test_the_tidy_table_of_a_family_with_other_groups(tmp_path, family):
    import abm
    from abm.config import load_scenario
    from abm.runner import run_to_folder

    file, overrides = SMALL_SCORE_FAMILIES[family]
    sc = load_scenario(SCENARIOS / file, overrides)
    first, _ = run_to_folder(sc, tmp_path / "a")
    second, _ = run_to_folder(sc, tmp_path / "b")
    written = _tidy_csv(first)
    run = abm.load_run(first)
    assert set(written["group"]) == set(run.group_names) and len(written)
    pd.testing.assert_frame_equal(written, _as_plain(run.tidy()), check_exact=True)
    assert (first / "episodes_tidy.csv").read_bytes() == (second / "episodes_tidy.csv").read_bytes()


def test_tidy_episodes_takes_the_longest_group_name_and_keeps_the_group_order():
    from abm.runner import tidy_episodes

    # x_B_A is metric x of group B_A, not metric x_B of group A
    wide = pd.DataFrame({"episode": [0, 1], "x_A": [1, 2], "x_B_A": [3.0, np.nan], "gap": [0.5, 0.6],
                         "y_B_A": [5, 6]})
    tidy = tidy_episodes(wide, ["B_A", "A"])
    assert list(tidy.columns) == ["episode", "group", "metric", "value"]
    assert list(tidy["group"].cat.categories) == ["B_A", "A"]
    assert tidy[["episode", "metric"]].values.tolist() == [[0, "x"], [0, "x"], [0, "y"], [1, "x"], [1, "x"],
                                                           [1, "y"]]
    assert tidy["group"].astype(str).tolist() == ["B_A", "A", "B_A", "B_A", "A", "B_A"]
    assert tidy["value"].dtype == float and np.isnan(tidy["value"].iloc[3])
    assert tidy["value"].drop(index=3).tolist() == [3.0, 1.0, 5.0, 2.0, 6.0]
    empty = tidy_episodes(wide[["episode", "gap"]], ["A"])
    assert list(empty.columns) == ["episode", "group", "metric", "value"] and empty.empty


# -- inspect exports --------------------------------------------------------------------------
def test_the_run_overview_prints_and_exports_the_per_group_table(run_dir, tmp_path):
    shown = ok("inspect", str(run_dir))
    assert "share_ever_approved" in shown and "final_mean_wealth" in shown and "wealth_gap" in shown
    data = json.loads(ok("inspect", str(run_dir), "--json", "-"))
    assert list(data) == ["kind", "folder", "summary", "final", "groups"] and data["kind"] == "run"
    assert data["summary"] == json.loads((run_dir / "summary.json").read_text())
    episodes = pd.read_parquet(run_dir / "episodes.parquet")
    assert data["final"]["wealth_gap"] == pytest.approx(float(episodes["wealth_gap"].iloc[-1]))
    assert "mean_wealth_M" not in data["final"]  # per-group numbers are in groups
    assert [g["group"] for g in data["groups"]] == ["M", "F"]
    agents = pd.read_parquet(run_dir / "agents.parquet")
    for g in data["groups"]:
        part = agents[agents["group"].astype(str) == g["group"]]
        assert g["applicants"] == len(part)
        assert g["mean_final_wealth"] == pytest.approx(part["final_wealth"].mean())
        assert g["share_ever_approved"] == pytest.approx((part["approvals"] > 0).mean())
        assert g["final_mean_wealth"] == pytest.approx(float(episodes[f"mean_wealth_{g['group']}"].iloc[-1]))
    table = pd.read_csv(io.StringIO(ok("inspect", str(run_dir), "--csv", "-")))
    assert table["group"].tolist() == ["M", "F"] and list(table.columns) == list(data["groups"][0])
    from_json = pd.DataFrame(data["groups"]).drop(columns="group").to_numpy(float)
    np.testing.assert_array_equal(table.drop(columns="group").to_numpy(float), from_json)
    path = tmp_path / "deep" / "overview.json"  # missing folders are made
    line = ok("inspect", str(run_dir), "--json", str(path))
    assert line.strip() == f"inspect: the run's overview (2 groups) -> {path}"
    assert json.loads(path.read_text()) == data
    assert [p.name for p in path.parent.iterdir()] == ["overview.json"]  # no temporary file left


def test_a_group_export_is_its_row_of_the_per_group_table(run_dir):
    overview = json.loads(ok("inspect", str(run_dir), "--json", "-"))
    data = json.loads(ok("inspect", str(run_dir), "--group", "F", "--json", "-"))
    assert list(data) == ["kind", "folder", "group", "measures"] and data["kind"] == "group"
    row = next(g for g in overview["groups"] if g["group"] == "F")
    assert data["measures"] == {k: v for k, v in row.items() if k != "group"}
    table = pd.read_csv(io.StringIO(ok("inspect", str(run_dir), "--group", "F", "--csv", "-")))
    assert len(table) == 1 and table["group"].iloc[0] == "F" and list(table.columns) == list(row)


def test_an_applicants_history_exports_every_event(run_dir, agent, tmp_path):
    events = pd.read_parquet(run_dir / "events.parquet")
    own = events[events["agent_id"] == agent].reset_index(drop=True)
    data = json.loads(ok("inspect", str(run_dir), "--agent", str(agent), "--json", "-"))
    assert list(data) == ["kind", "folder", "agent_id", "applicant", "events"] and data["agent_id"] == agent
    assert data["applicant"]["agent_id"] == agent and data["applicant"]["group"] == str(own["group"].iloc[0])
    assert len(data["events"]) == len(own) and {e["whose"] for e in data["events"]} == {"own"}
    assert [e["kind"] for e in data["events"]] == own["kind"].astype(str).tolist()
    assert [e["time"] for e in data["events"]] == own["time"].tolist()
    assert all(e["decision_prob"] is None for e in data["events"] if e["kind"] == "apply")  # NaN -> null
    path = tmp_path / "history.csv"
    ok("inspect", str(run_dir), "--agent", str(agent), "--csv", str(path))
    table = pd.read_csv(path)
    assert list(table.columns) == [*events.columns, "whose"] and len(table) == len(own)
    np.testing.assert_array_equal(table["time"].to_numpy(), own["time"].to_numpy())
    limited = pd.read_csv(io.StringIO(ok("inspect", str(run_dir), "--agent", str(agent), "--csv", "-",
                                         "--limit", "1")))
    assert len(limited) == 1


def test_a_network_run_marks_the_neighbours_approvals(tmp_path):
    from abm.config import load_scenario
    from abm.runner import run_to_folder

    folder, _ = run_to_folder(load_scenario(SCENARIOS / "eutopia.yaml", [*SMALL, *TIES]), tmp_path)
    agents = pd.read_parquet(folder / "agents.parquet")
    events = pd.read_parquet(folder / "events.parquet")
    approved = set(events.loc[events["kind"].astype(str) == "approve", "agent_id"])
    busy = next(i for i in agents.sort_values("degree", ascending=False)["agent_id"]
                if approved & {int(j) for j in agents["neighbors"].iloc[i]})
    data = json.loads(ok("inspect", str(folder), "--agent", str(busy), "--json", "-"))
    theirs = [e for e in data["events"] if e["whose"] == "neighbour"]
    assert theirs and all(e["kind"] == "approve" and e["agent_id"] != busy for e in theirs)
    assert data["applicant"]["neighbors"] == [int(j) for j in agents["neighbors"].iloc[busy]]
    times = [e["time"] for e in data["events"]]
    assert times == sorted(times)
    alone = json.loads(ok("inspect", str(folder), "--agent", str(busy), "--json", "-", "--no-neighbours"))
    assert {e["whose"] for e in alone["events"]} <= {"own"}
    assert len(alone["events"]) == len(data["events"]) - len(theirs)


def test_a_study_folder_exports_its_runs(run_dir, tmp_path):
    import shutil

    study = tmp_path / "study"
    (study / "runs").mkdir(parents=True)
    shutil.copytree(run_dir, study / "runs" / "random-a-r0")
    (study / "runs" / "random-b-r0").mkdir()  # not finished
    broken = study / "runs" / "random-c-r0"
    broken.mkdir()
    (broken / "summary.json").write_text("{broken")  # finished, unreadable: its numbers are null
    data = json.loads(ok("inspect", str(study), "--json", "-"))
    assert list(data) == ["kind", "folder", "runs"] and data["kind"] == "study"
    rows = {r["run_id"]: r for r in data["runs"]}
    assert list(rows) == ["random-a-r0", "random-b-r0", "random-c-r0"]
    keys = ["run_id", "finished", "family", "policy", "objective", "seed", "episodes", "wealth_gap",
            "inequality_ratio", "cumulative_profit"]
    assert all(list(r) == keys for r in data["runs"])  # the same keys for every run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert rows["random-a-r0"]["finished"] and rows["random-a-r0"]["policy"] == "random"
    assert rows["random-a-r0"]["wealth_gap"] == summary["final"]["wealth_gap"]
    assert not rows["random-b-r0"]["finished"] and rows["random-b-r0"]["wealth_gap"] is None
    assert rows["random-c-r0"]["finished"] and rows["random-c-r0"]["policy"] is None
    table = pd.read_csv(io.StringIO(ok("inspect", str(study), "--csv", "-")))
    assert list(table.columns) == keys and table["finished"].tolist() == [True, False, True]
    # without an export the listing and its one-line error stay as they were
    code, out, err = call("inspect", str(study))
    assert code == 2 and len(out.splitlines()) == 3 and "a study folder" in err


def test_the_seed_column_of_a_study_export_is_exact(run_dir, tmp_path):
    import shutil

    study = tmp_path / "study"
    target = study / "runs" / "r0"
    shutil.copytree(run_dir, target)
    summary = json.loads((target / "summary.json").read_text())
    summary["seed"] = 2**63 - 25
    (target / "summary.json").write_text(json.dumps(summary))
    assert pd.read_csv(io.StringIO(ok("inspect", str(study), "--csv", "-")), dtype=str)["seed"].iloc[0] == \
        str(2**63 - 25)


def test_bad_export_inputs_are_one_line_and_exit_2(run_dir, agent, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    cases = [
        (("--json", "-", "--csv", "-"), "give --json PATH or --csv PATH, not both"),
        (("--agent", "99999", "--json", "-"), "--agent: no applicant 99999"),
        (("--agent", "-1", "--csv", "-"), "--agent: no applicant -1"),
        (("--group", "Z", "--json", "-"), "--group: no group 'Z' (groups: F, M)"),
        (("--json", str(blocker / "x.json")), f"--json {blocker / 'x.json'}: cannot write"),
        (("--csv", str(tmp_path)), f"--csv {tmp_path}: is a folder"),
        (("--json", ""), "is a folder"),
        (("--agent", str(agent), "--limit", "-1", "--csv", "-"), "--limit: must be 0 or more"),
    ]
    for args, needle in cases:
        one_line_error(("inspect", str(run_dir), *args), needle)
    one_line_error(("inspect", str(tmp_path / "no-such-run"), "--json", "-"), "no such run folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # nothing half-written


def test_the_console_script_keeps_the_error_contract(cli, run_dir, tmp_path):
    res = cli("inspect", str(run_dir), "--json", str(tmp_path), "--agent", "1")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [f"error: --json {tmp_path}: is a folder; give a file path "
                                               "(or - for stdout)"]


def test_a_read_only_folder_is_refused_in_one_line(run_dir, tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        one_line_error(("inspect", str(run_dir), "--csv", str(locked / "t.csv")), "cannot write")
    finally:
        locked.chmod(0o700)


# -- abm report --frontier-x / --frontier-y ---------------------------------------------------
def test_frontier_metrics_are_the_numeric_metric_columns():
    from abm.reports import figures
    from test_figures import study_frame

    names = figures.frontier_metrics(study_frame())
    assert {"wealth_gap", "cumulative_profit", "approvals_M"} <= set(names)
    assert not {"replicate", "seed", "episode", "time", "run_id", "config", "policy"} & set(names)
    frame = study_frame().assign(**{"arrivals.base_slope": 0.01})  # a grid key (after objective) is not one
    frame = frame[[*frame.columns[:7], "arrivals.base_slope", *frame.columns[7:-1]]]
    assert "arrivals.base_slope" not in figures.frontier_metrics(frame)


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    from abm.study import run_study, study_from_dict

    doc = {"study": {"name": "tiny", "seed": 11, "episodes": 2, "seeds": 2},
           "base": str(SCENARIOS / "eutopia.yaml"),
           "overrides": {"population.n_male": 100, "population.n_female": 100},
           "policies": [{"name": "approve_all"}, {"name": "random", "p": 0.5}]}
    folder = tmp_path_factory.mktemp("frontier") / "tiny"
    run_study(study_from_dict(doc, "tiny"), folder, workers=0, quiet=True)
    return folder


def test_report_draws_the_frontier_on_the_chosen_axes(tiny_study):
    from abm.reports import figures
    from abm.reports.study import frontier_axes

    out = ok("report", str(tiny_study), "--frontier-x", "reach_F", "--frontier-y", "social_welfare_F")
    report = tiny_study / "report"
    assert out.splitlines() == [f"report: {report}", f"frontier: {report / 'frontier_reach_F_social_welfare_F.png'}"]
    assert (report / "frontier.png").stat().st_size > 10_000  # the default one is still drawn
    assert (report / "frontier_reach_F_social_welfare_F.png").stat().st_size > 10_000
    assert not [p for p in report.iterdir() if p.name.startswith(".tmp-")]
    assert frontier_axes(tiny_study, None, "profit") == ("wealth_gap", "profit")  # x keeps its default
    assert frontier_axes(tiny_study, "inequality_ratio", None) == ("inequality_ratio", "cumulative_profit")
    spec = figures.frontier(pd.read_parquet(tiny_study / "study.parquet"), "reach_F", "social_welfare_F")
    assert spec.name == "frontier_reach_F_social_welfare_F" and "|reach_F|" in spec.caption
    default = figures.frontier(pd.read_parquet(tiny_study / "study.parquet"))
    assert default.name == "frontier" and "smaller |gap|" in default.caption  # the default figure unchanged


def test_unknown_frontier_metrics_are_refused_with_the_valid_names(tiny_study, run_dir, tmp_path):
    before = sorted(p.name for p in tiny_study.iterdir())
    for flag in ("--frontier-x", "--frontier-y"):
        line = one_line_error(("report", str(tiny_study), flag, "nope"),
                              f"{flag}: unknown metric 'nope'; valid names: ")
        assert "wealth_gap" in line and "cumulative_profit" in line and "episode," not in line
    one_line_error(("report", str(tiny_study), "--frontier-x", "wealth_gap", "--frontier-y", "seed"),
                   "--frontier-y: unknown metric 'seed'")
    one_line_error(("report", str(run_dir), "--frontier-x", "wealth_gap"), "--frontier-x: applies to a study folder")
    empty = tmp_path / "empty-study"
    (empty / "runs").mkdir(parents=True)
    one_line_error(("report", str(empty), "--frontier-y", "profit"), "--frontier-y: ", "study.parquet is missing")
    assert sorted(p.name for p in tiny_study.iterdir()) == before  # refused before anything was drawn
