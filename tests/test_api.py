"""The Python API (abm.api, re-exported by ``import abm``): the same data as the CLI for the same
configuration, its frames (tidy, history, Mesa's DataCollector shapes), its inputs, studies,
and that ``import abm`` and heuristic runs stay light (no torch)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

import abm
from abm.errors import UserError
from conftest import ROOT, SCENARIOS

EUTOPIA_SMALL = ["population.n_male=200", "population.n_female=200"]
SET_SMALL = [a for o in EUTOPIA_SMALL for a in ("--set", o)]
CREDIT_SMALL = ["population.size=200", "episodes.horizon=200"]


def _run_folder(stdout: str):
    from pathlib import Path

    return Path(next(line for line in stdout.splitlines() if line.startswith("run folder: ")).split(": ", 1)[1])


def _frames_equal(run, folder):
    pd.testing.assert_frame_equal(run.episodes, pd.read_parquet(folder / "episodes.parquet"))
    pd.testing.assert_frame_equal(run.events, pd.read_parquet(folder / "events.parquet"))
    pd.testing.assert_frame_equal(run.agents, pd.read_parquet(folder / "agents.parquet"))


def test_api_returns_the_cli_frames_for_the_same_configuration(cli, tmp_path):
    res = cli("run", "scenarios/eutopia.yaml", "--policy", "random", "--episodes", "3", "--seed", "5", *SET_SMALL,
              "--set", "policy.p=0.4", "--out", str(tmp_path / "cli"), "--quiet")
    assert res.returncode == 0, res.stderr
    folder = _run_folder(res.stdout)
    run = abm.run(SCENARIOS / "eutopia.yaml", policy="random", episodes=3, seed=5,
                  overrides=[*EUTOPIA_SMALL, "policy.p=0.4"])
    assert run.folder is None and run.model is not None and len(run.episodes) == 3
    _frames_equal(run, folder)
    summary = json.loads((folder / "summary.json").read_text())
    for key in ("family", "policy", "seed", "config_hash", "episodes", "events", "final", "world"):
        assert run.summary[key] == summary[key], key
    from abm.provenance import code_fingerprint

    assert run.summary["code_fingerprint"] == code_fingerprint(run.scenario)  # (the tree may change meanwhile)
    assert run.config == {k: v for k, v in yaml.safe_load((folder / "scenario.yaml").read_text()).items()
                          if k != "abm_version"}

    loaded = abm.load_run(folder)  # the folder through the API: the same frames, the same scenario
    _frames_equal(loaded, folder)
    assert loaded.scenario == run.scenario and loaded.summary == summary

    written = abm.run(SCENARIOS / "eutopia.yaml", policy="random", episodes=3, seed=5,
                      overrides=[*EUTOPIA_SMALL, "policy.p=0.4"], out=tmp_path / "cli")
    assert written.folder == folder and not written.computed  # the CLI's folder, reused
    fresh = abm.run(run.scenario, out=tmp_path / "api")
    assert fresh.computed and fresh.folder.name == folder.name
    _frames_equal(fresh, folder)


def test_a_mapping_and_a_scenario_object_are_scenarios_too(cli, tmp_path):
    res = cli("run", "scenarios/lending-credit.yaml", "--episodes", "2", "--policy", "eo_threshold",
              *[a for o in CREDIT_SMALL for a in ("--set", o)], "--out", str(tmp_path), "--quiet")
    assert res.returncode == 0, res.stderr
    folder = _run_folder(res.stdout)
    data = yaml.safe_load((SCENARIOS / "lending-credit.yaml").read_text())
    run = abm.run(data, policy="eo_threshold", episodes=2, overrides=CREDIT_SMALL)
    _frames_equal(run, folder)
    again = abm.run(run.scenario)  # a scenario object as it is
    pd.testing.assert_frame_equal(again.episodes, run.episodes)
    other = abm.run(run.scenario, seed=1)  # ... or with the CLI's shortcuts applied to it
    assert other.scenario.seed == 1 and other.scenario.population.size == 200
    assert not other.episodes.equals(run.episodes)


def test_tidy_history_and_the_datacollector_views():
    run = abm.run(SCENARIOS / "eutopia.yaml", policy="random", episodes=3, overrides=EUTOPIA_SMALL)
    tidy = run.tidy()
    assert list(tidy.columns) == ["episode", "group", "metric", "value"]
    assert set(tidy["group"].astype(str)) == {"M", "F"} and list(tidy["group"].cat.categories) == run.group_names
    for (episode, group, metric), value in tidy.set_index(["episode", "group", "metric"])["value"].items():
        assert value == pytest.approx(float(run.episodes.loc[episode, f"{metric}_{group}"]), nan_ok=True)
    assert {"mean_wealth", "reach", "applications"} <= set(tidy["metric"])
    assert "wealth_gap" not in set(tidy["metric"])  # not a per-group column
    assert len(tidy) == 3 * 2 * tidy["metric"].nunique()

    agent = int(run.events["agent_id"].iloc[0])
    history = run.history(agent)
    expected = run.events[run.events["agent_id"] == agent].reset_index(drop=True)
    pd.testing.assert_frame_equal(history, expected)
    assert history["time"].is_monotonic_increasing
    with pytest.raises(UserError, match="no applicant"):
        run.history(len(run.agents))

    model = run.model_vars  # Mesa: one row per step, one column per model reporter
    assert list(model.index) == [0, 1, 2] and "episode" not in model.columns
    assert model["wealth_gap"].tolist() == run.episodes["wealth_gap"].tolist()
    assert run.get_model_vars_dataframe().equals(model)
    agents = run.agent_vars  # Mesa: indexed by (Step, AgentID)
    assert agents.index.names == ["Step", "AgentID"]
    last = agents.xs(2, level="Step")
    applied = run.agents[run.agents["applications"] > 0]
    assert sorted(last.index) == applied["agent_id"].tolist()  # every applicant who ever applied
    for col in ("applications", "approvals", "repayments", "defaults"):
        assert last[col].to_numpy().tolist() == applied.set_index("agent_id").loc[last.index, col].tolist(), col
    assert np.allclose(last["wealth"], applied.set_index("agent_id").loc[last.index, "final_wealth"])
    first_step = agents.reset_index().groupby("AgentID")["Step"].min()
    assert (first_step == run.events.groupby("agent_id")["episode"].min()).all()
    assert run.get_agent_vars_dataframe() is agents


class HalfLender(abm.Policy):
    """Approve every other application (a Policy subclass handed to the API)."""

    seen = 0

    def _decide(self, obs, info):
        probs = ((self.seen + np.arange(len(obs))) % 2 == 0).astype(float)
        self.seen += len(obs)
        return probs


def test_policy_inputs_and_errors():
    run = abm.run(SCENARIOS / "lending-credit.yaml", policy=HalfLender, episodes=1, overrides=CREDIT_SMALL)
    assert run.summary["policy"] == f"{__name__}:HalfLender"
    kinds = run.events["kind"].astype(str)
    assert (kinds == "approve").sum() > 0 and (kinds == "reject").sum() > 0
    with pytest.raises(UserError, match="give a registered name"):
        abm.run(SCENARIOS / "lending-credit.yaml", policy=3)
    with pytest.raises(UserError, match="not a policies.base.Policy subclass"):
        abm.run(SCENARIOS / "lending-credit.yaml", policy=dict)
    with pytest.raises(UserError, match="unknown policy 'nope'"):
        abm.run(SCENARIOS / "lending-credit.yaml", policy="nope")
    with pytest.raises(UserError, match="a file path, a mapping or a scenario object"):
        abm.run(42)
    with pytest.raises(UserError, match="episodes.count"):
        abm.run({"family": "credit_score", "episodes": {"count": 0}})


def test_study_through_the_api(tmp_path):
    spec = {"study": {"name": "api-smoke", "seed": 3, "episodes": 2, "seeds": 1},
            "base": str(SCENARIOS / "lending-credit.yaml"),
            "overrides": {"population.size": 150, "episodes.horizon": 100},
            "policies": [{"name": "max_util"}, {"name": HalfLender.__module__ + ":HalfLender"}]}
    result = abm.study(spec, workers=0, out=tmp_path / "st")
    assert result.outcome.succeeded == 2 and result.outcome.failed == 0
    assert result.status["status"].tolist() == ["ok", "ok"]
    assert len(result.frame) == 4 and set(result.summary["count"]) == {1}
    run = result.run(result.run_ids[0])
    assert len(run.episodes) == 2 and run.folder.parent == tmp_path / "st" / "runs"
    again = abm.study(spec, workers=0, out=tmp_path / "st")  # resumable: nothing recomputed
    assert again.outcome.skipped == 2 and again.outcome.succeeded == 0


def test_import_abm_is_cheap_and_the_api_is_lazy():
    code = ("import sys, abm; heavy = [m for m in ('numpy', 'pandas', 'pydantic', 'mesa', 'torch') if m in sys.modules]; "
            "print(heavy, abm.__version__, callable(abm.run), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split("]")[0] == "[" and out.strip().endswith("True False"), out
    assert {"run", "load_run", "study", "Run", "Policy"} <= set(dir(abm))
    with pytest.raises(AttributeError):
        abm.no_such_thing  # noqa: B018


def test_a_heuristic_run_never_imports_torch(tmp_path):
    importtime = subprocess.run([sys.executable, "-X", "importtime", "-c", "import abm.cli"], capture_output=True,
                                text=True, cwd=ROOT, check=True).stderr
    assert "torch" not in importtime.lower()
    code = ("import runpy, sys; sys.argv = ['abm', 'run', 'scenarios/eutopia.yaml', '--episodes', '2', "
            f"'--set', 'population.n_male=200', '--set', 'population.n_female=200', '--out', {str(tmp_path)!r}, "
            "'--quiet']\n"
            "try:\n    runpy.run_module('abm.cli', run_name='__main__')\nexcept SystemExit as exc:\n"
            "    assert not exc.code, exc.code\n"
            "print('torch imported:', 'torch' in sys.modules, 'stable_baselines3' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "torch imported: False False" in res.stdout
