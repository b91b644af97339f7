"""Objective plugins (abm.objectives.CustomObjective, loaded by abm.plugins like a policy plugin):
a user's objective from a module outside the package drives a learning lender through ``abm run``,
an edit of it recomputes (its source is part of the fingerprint), a broken one exits 2 with one
line; the built-in forms keep their meaning and messages; entry points of the group
``abm.objectives``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from abm import objectives, registry
from abm.errors import UserError
from conftest import ROOT, SCENARIOS, abm_cli, one_error_line, run_folder

SMALL = ["--set", "population.n_male=150", "--set", "population.n_female=150", "--episodes", "2", "--quiet"]

PLUGIN = '''
import numpy as np

from abm.objectives import CustomObjective


class Constant(CustomObjective):
    """Every episode is worth the same (a plugin objective)."""

    def reward(self, stats):
        return {value}


class MinProfit(CustomObjective):
    """The worst-off group's profit per member (dm:rawlsian, written by hand)."""

    def reward(self, stats):
        return float(np.min(np.asarray(stats["profit"]) / np.asarray(stats["sizes"])))


class NotAnObjective:
    def value(self, stats):
        return 0.0


class Abstract(CustomObjective):
    pass


class NeedsArgs(CustomObjective):
    def __init__(self, weight):
        self.weight = weight

    def reward(self, stats):
        return self.weight


class NaNReward(CustomObjective):
    def reward(self, stats):
        return float("nan")


class Text(CustomObjective):
    def reward(self, stats):
        return "high"


not_a_class = 42
'''


def write_plugin(folder: Path, name: str, value: float = 7.0) -> Path:
    path = folder / f"{name}.py"
    path.write_text(PLUGIN.format(value=value))
    return path



def stats(sizes=(100, 100), end=(60.0, 40.0), change=(2.0, 1.0), profit=(30.0, 10.0)):
    return {"sizes": np.array(sizes, float), "mean_wealth": np.array(end, float),
            "mean_wealth_change": np.array(change, float), "profit": np.array(profit, float)}


def test_a_plugin_objective_drives_a_learning_lender_and_an_edit_recomputes(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    path = write_plugin(plugins, "objplug_cli", value=7.0)
    args = ("run", str(SCENARIOS / "eutopia.yaml"), "--policy", "rl", "--objective", "objplug_cli:Constant",
            "--out", str(tmp_path / "out"), *SMALL)
    res = abm_cli(*args, pythonpath=plugins)
    assert res.returncode == 0, res.stderr
    folder = run_folder(res.stdout)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["objective"] == "objplug_cli:Constant"
    state = summary["policy_state"]
    assert state["objective"] == "objplug_cli:Constant"  # the lender parsed the plugin, not its default
    assert state["reward_first10_mean"] == pytest.approx(7.0)  # and learned from its rewards
    assert "+objplug_cli=" in summary["code_fingerprint"]  # the plugin's source is part of the run's code
    res = abm_cli(*args, pythonpath=plugins)
    assert res.returncode == 0 and "reused, nothing recomputed" in res.stdout, (res.stdout, res.stderr)

    path.write_text(PLUGIN.format(value=3.0))  # the user edits the objective: the old results are not reused
    res = abm_cli(*args, pythonpath=plugins)
    assert res.returncode == 0, res.stderr
    assert "computed by other code" in res.stderr and "reused" not in res.stdout
    fresh = json.loads((folder / "summary.json").read_text())
    assert fresh["code_fingerprint"] != summary["code_fingerprint"]
    assert fresh["policy_state"]["reward_first10_mean"] == pytest.approx(3.0)


@pytest.mark.parametrize("name, message", [
    ("objplug_bad:NotAnObjective", "unknown objective 'objplug_bad:NotAnObjective': objplug_bad:NotAnObjective is "
                                   "not an abm.objectives.CustomObjective subclass (got class NotAnObjective)"),
    ("objplug_bad:not_a_class", "is not an abm.objectives.CustomObjective subclass (got int)"),
    ("objplug_bad:Abstract", "is abstract (it must implement reward)"),
    ("objplug_bad:NeedsArgs", "NeedsArgs() failed (TypeError"),
    ("objplug_bad:Missing", "module 'objplug_bad' has no 'Missing'"),
    ("objbroken_mod:Objective", "cannot import module 'objbroken_mod' (ModuleNotFoundError: No module named "
                                "'no_such_dep_xyz')"),
    ("objsyntax_mod:Objective", "cannot import module 'objsyntax_mod' (SyntaxError"),
    ("no_such_objective_module:X", "cannot import module 'no_such_objective_module'"),
    ("objplug_bad:", "expected module:Class"),
    ("not a module:X", "is not a module path"),
])
def test_a_broken_objective_plugin_exits_2_with_one_line(tmp_path, name, message):
    write_plugin(tmp_path, "objplug_bad")
    (tmp_path / "objbroken_mod.py").write_text("import no_such_dep_xyz\n")
    (tmp_path / "objsyntax_mod.py").write_text("def broken(:\n")
    res = abm_cli("run", str(SCENARIOS / "eutopia.yaml"), "--policy", "random", "--objective", name,
                  "--out", str(tmp_path / "out"), *SMALL, pythonpath=tmp_path)
    line = one_error_line(res)
    assert message in line and "objective" in line, line
    assert not (tmp_path / "out").exists()


def test_plugin_objectives_in_process(tmp_path, monkeypatch):
    write_plugin(tmp_path, "objplug_unit", value=2.5)
    monkeypatch.syspath_prepend(str(tmp_path))
    constant = objectives.parse(" objplug_unit:Constant ")
    assert isinstance(constant, objectives.CustomObjective) and str(constant) == "objplug_unit:Constant"
    assert constant.value(stats()) == 2.5
    by_hand = objectives.parse("objplug_unit:MinProfit")
    for s in (stats(), stats(sizes=(300, 100), profit=(90.0, -20.0))):
        assert by_hand.value(s) == pytest.approx(objectives.parse("dm:rawlsian").value(s))
    with pytest.raises(UserError, match=r"objective objplug_unit:NaNReward: reward\(\) returned nan"):
        objectives.parse("objplug_unit:NaNReward").value(stats())
    with pytest.raises(UserError, match="not a number"):
        objectives.parse("objplug_unit:Text").value(stats())
    # the plugin's module is what the fingerprint hashes; built-in objectives add nothing
    assert registry.plugin_modules("rl", "eutopia", "objplug_unit:Constant") == ["objplug_unit"]
    assert registry.plugin_modules("rl", "eutopia", "outcome:rawlsian") == []
    assert registry.plugin_modules("rl", "eutopia", None) == []
    # a scenario names it like any objective
    from abm.config import load_scenario

    sc = load_scenario(SCENARIOS / "eutopia.yaml", objective="objplug_unit:MinProfit")
    assert sc.objective == "objplug_unit:MinProfit"


def test_a_class_registered_as_an_object(tmp_path, monkeypatch):
    write_plugin(tmp_path, "objplug_obj", value=1.5)
    monkeypatch.syspath_prepend(str(tmp_path))
    import objplug_obj

    name = objectives.register(objplug_obj.Constant)
    assert name == "objplug_obj:Constant" and objectives.parse(name).value(stats()) == 1.5
    with pytest.raises(UserError, match="not an abm.objectives.CustomObjective subclass"):
        objectives.register(objplug_obj.NotAnObjective)

    def local():
        class Inner(objectives.CustomObjective):
            def reward(self, stats):
                return 0.0
        return Inner

    with pytest.raises(UserError, match="defined inside a function"):
        objectives.register(local())


def test_the_python_api_takes_an_objective_class(tmp_path, monkeypatch):
    import abm

    write_plugin(tmp_path, "objplug_api", value=2.5)
    monkeypatch.syspath_prepend(str(tmp_path))
    import objplug_api

    run = abm.run(SCENARIOS / "eutopia.yaml", policy="rl", objective=objplug_api.Constant, episodes=2,
                  overrides=["population.n_male=150", "population.n_female=150"], out=tmp_path / "runs")
    assert run.scenario.objective == "objplug_api:Constant"
    assert "+objplug_api=" in run.summary["code_fingerprint"]  # the plugin's code is in the run's identity


@pytest.mark.parametrize("text, fragment", [
    ("dm:Foo", "unknown family 'Foo'"),  # a built-in perspective: never a module named dm
    ("welfare:social_welfare", "unknown perspective 'welfare'"),  # a built-in reward family
    ("two_sided(0.3):maxmin", "unknown family 'maxmin'"),
    ("outcome", "cannot parse"),
])
def test_built_in_forms_keep_their_messages(text, fragment):
    with pytest.raises(UserError) as err:
        objectives.parse(text)
    assert fragment in str(err.value) and objectives.FORMS in str(err.value)
    assert not objectives.is_plugin(text)


def test_entry_point_objectives_of_installed_packages(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    write_plugin(site, "objplug_ep", value=4.0)
    dist = site / "objplug_ep-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: objplug-ep\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[abm.objectives]\nflat_four = objplug_ep:Constant\n"
                                           "broken_ep = objplug_ep:NotAnObjective\n")
    res = abm_cli("validate", str(SCENARIOS / "eutopia.yaml"), "--set", "objective=flat_four", pythonpath=site)
    assert res.returncode == 0, res.stderr
    code = ("from abm import objectives; o = objectives.parse('flat_four'); print(type(o).__name__, o, "
            "o.value({}))")
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    assert out.stdout.split() == ["Constant", "flat_four", "4.0"]
    res = abm_cli("validate", str(SCENARIOS / "eutopia.yaml"), "--set", "objective=broken_ep", pythonpath=site)
    assert "unknown objective 'broken_ep': objplug_ep:NotAnObjective is not an abm.objectives.CustomObjective" \
        in one_error_line(res)


def test_the_seed_000_tables_show_a_plugin_objective_as_its_own_row(tmp_path, monkeypatch):
    import pandas as pd

    from abm.reports.seed000 import learner_cells

    write_plugin(tmp_path, "objplug_table")
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = [{"agent": "rl", "objective": objective, "seed": seed, "run_id": f"{objective}-{seed}",
             "wealth_gap": 1.0 + seed, "inequality_ratio": 1.1, "cumulative_profit": 10.0, "social_welfare": 0.1}
            for objective in ("outcome:lagrangian:0.5", "objplug_table:Constant") for seed in (0, 1)]
    cells = learner_cells(pd.DataFrame(rows))
    assert list(cells["perspective"]) == ["outcome", "plugin"]
    assert list(cells["reward"]) == ["FL(0.5)", "objplug_table:Constant"] and list(cells["runs"]) == [2, 2]
