"""Each family's run files name the applicants' state for what it is (``Scenario.state``): events'
``<state>_after``, agents' ``initial_<state>``/``final_<state>``. A folder written before the
families named it (every family wrote ``wealth``) reads the same through every reader: inspect,
the Python API, the dashboard's data and the report's distribution."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from abm.errors import UserError
from conftest import SCENARIOS, call_in_process

STATES = {"eutopia": "wealth", "credit_score": "score", "fico": "score", "admissions": "budget",
          "beta_belief": "belief"}
SMALL = {
    "eutopia": ("eutopia.yaml", ["population.n_male=100", "population.n_female=100", "episodes.count=2"]),
    "credit_score": ("lending-credit.yaml", ["population.size=100", "episodes.count=2", "episodes.horizon=100"]),
    "fico": ("fico-delayed-impact.yaml", ["population.size=100", "episodes.count=2", "episodes.horizon=100"]),
    "admissions": ("admissions.yaml", ["population.size=100", "episodes.count=2", "episodes.horizon=40",
                                       "policy.burn_in=10"]),
    "beta_belief": ("beta-belief-loans.yaml", ["population.size=60", "episodes.count=2", "episodes.horizon=10",
                                               "outputs.events=true"]),
}


def _folder(tmp_path_factory, family: str):
    from abm.config import load_scenario
    from abm.runner import run_to_folder

    file, overrides = SMALL[family]
    folder, _ = run_to_folder(load_scenario(SCENARIOS / file, overrides), tmp_path_factory.mktemp(family))
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {}, tmp_path_factory


def folder_of(folders, family: str):
    made, factory = folders
    if family not in made:
        made[family] = _folder(factory, family)
    return made[family]


def _as_legacy(folder, target, state: str):
    """A copy of ``folder`` as the code before ``Scenario.state`` wrote it: ``wealth_after``; the
    score and budget families had ``initial_wealth``/``final_wealth`` beside their own columns, the
    belief family only those."""
    from abm.runner import write_parquet

    shutil.copytree(folder, target)
    events = pd.read_parquet(folder / "events.parquet").rename(columns={f"{state}_after": "wealth_after"})
    write_parquet(events, target / "events.parquet")
    agents = pd.read_parquet(folder / "agents.parquet")
    if state == "belief":
        agents = agents.rename(columns={"initial_belief": "initial_wealth", "final_belief": "final_wealth"})
    else:
        agents = agents.assign(initial_wealth=agents[f"initial_{state}"], final_wealth=agents[f"final_{state}"])
    write_parquet(agents, target / "agents.parquet")
    return target


@pytest.mark.parametrize("family", list(STATES))
def test_each_family_names_its_state_in_its_run_files(folders, family):
    from abm import registry

    state = STATES[family]
    assert registry.family_module(family).Scenario.state == state
    folder = folder_of(folders, family)
    events = pd.read_parquet(folder / "events.parquet")
    agents = pd.read_parquet(folder / "agents.parquet")
    assert [c for c in events.columns if c.endswith("_after")] == [f"{state}_after"]
    assert {f"initial_{state}", f"final_{state}"} <= set(agents.columns)
    if state != "wealth":  # the old names are gone, not kept beside the new ones
        assert not {"initial_wealth", "final_wealth"} & set(agents.columns)
    if family != "beta_belief":  # the state after an applicant's last event is its final state (beta_belief's
        last = events.groupby("agent_id")[f"{state}_after"].last()  # agents are its last cohort only)
        np.testing.assert_allclose(agents.set_index("agent_id").loc[last.index, f"final_{state}"], last)


@pytest.mark.parametrize("family", ["credit_score", "beta_belief"])
def test_a_folder_written_before_the_state_was_named_reads_as_today(folders, family, tmp_path):
    from abm import api
    from abm.dashboard.data import applicant_page, applicant_timeline
    from abm.inspect import load_run
    from abm.reports.figures import state_paths
    from abm.runner import run_folder_problem

    state = STATES[family]
    new = folder_of(folders, family)
    old = _as_legacy(new, tmp_path / new.name, state)
    assert "wealth_after" in pd.read_parquet(old / "events.parquet").columns
    assert run_folder_problem(old) is None

    now, then = load_run(new), load_run(old)
    assert then.state == now.state == state
    pd.testing.assert_frame_equal(then.agents, now.agents)
    pd.testing.assert_frame_equal(then.events(), now.events())
    agent = int(now.agents["repayments"].idxmax())
    pd.testing.assert_frame_equal(then.events(agent_id=agent), now.events(agent_id=agent))

    a, b = api.load_run(new), api.load_run(old)
    assert a.state == b.state == state
    pd.testing.assert_frame_equal(b.agent_vars, a.agent_vars)
    assert state in a.agent_vars.columns and "wealth" not in a.agent_vars.columns
    pd.testing.assert_frame_equal(b.history(agent), a.history(agent))

    t_new, t_old = applicant_timeline(now, agent), applicant_timeline(then, agent)
    pd.testing.assert_frame_equal(t_old.path, t_new.path)
    assert list(t_new.path.columns) == ["time", state] and f"{state}_after" in t_new.events.columns
    page, _ = applicant_page(then.agents, state=then.state)
    assert {f"initial_{state}", f"final_{state}"} <= set(page.columns)

    (g_new, v_new), (g_old, v_old) = state_paths(new, family), state_paths(old, family)
    assert (g_new == g_old).all()
    np.testing.assert_array_equal(v_new, v_old)
    assert np.isfinite(v_new[:, 0]).all()

    code, out, err = call_in_process("inspect", str(old), "--agent", str(agent), "--limit", "3")
    assert code == 0, err
    assert f"{state} after" in out and f"initial {state}" in out


def test_in_memory_runs_name_the_state():
    import abm

    file, overrides = SMALL["credit_score"]
    run = abm.run(SCENARIOS / file, overrides=overrides)
    assert run.state == "score"
    assert "score_after" in run.events.columns and "wealth_after" not in run.events.columns
    assert "score" in run.agent_vars.columns


def test_a_state_name_must_be_a_lower_case_identifier():
    from abm.families import credit_score

    for bad in ("Score", "credit score", "", 3):
        with pytest.raises(UserError, match=r"\.state: .* is not a lower-case identifier \(it names the run files"):
            type("Scenario", (credit_score.Scenario,), {"__module__": "plugin_mod", "state": bad})


def test_an_event_log_without_a_state_column_is_a_damaged_folder(folders, tmp_path):
    from abm.dashboard.data import applicant_timeline
    from abm.inspect import load_run
    from abm.runner import run_folder_problem, write_parquet

    folder = shutil.copytree(folder_of(folders, "credit_score"), tmp_path / "run")
    write_parquet(pd.read_parquet(folder / "events.parquet").drop(columns=["score_after"]), folder / "events.parquet")
    assert run_folder_problem(folder) == "events.parquet lacks column(s) <state>_after"
    with pytest.raises(UserError, match=r"events.parquet: no column score_after \(each event's score\)"):
        applicant_timeline(load_run(folder), 0)


def test_the_state_of_a_family_not_known_here_comes_from_its_event_log(folders, tmp_path):
    from abm.runner import family_state

    assert family_state("credit_score") == "score" and family_state("eutopia") == "wealth"
    assert family_state("some.plugin_family", folder_of(folders, "beta_belief")) == "belief"
    assert family_state("some.plugin_family", tmp_path) == "wealth"  # no event log: the default
    assert family_state(None) == "wealth"
