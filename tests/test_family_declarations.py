"""What abm knows about a family is declared on its own ``Scenario`` (``abm.config.ScenarioBase``):
a family defined only in a module of the user's (here: written by the test) shows up in
``abm policies`` (where each policy applies), in the report's axis units and in the live view's
sidebar and plots, with nothing in ``abm/`` edited; a family that declares nothing gets the
defaults."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from abm import registry
from abm.config import ScenarioBase
from abm.reports import figures
from conftest import SCENARIOS, call_in_process

NAME = "fam_decl.stars"
FAMILY = f'''\
from typing import Literal

from abm.families import credit_score


class Scenario(credit_score.Scenario):
    """Credit-score lending told in stars."""

    family: Literal["{NAME}"] = "{NAME}"
    capabilities = frozenset({{"score_curve"}})  # no gym adapter: the deep lenders do not apply
    units = {{"wealth": "reputation (stars)", "wealth_unit": "stars", "money": "favours",
             "score": "reputation (stars)"}}
    live_parameters = (("dynamics.score_change_repay", "stars gained on repayment", 0, 5, 1),)
    live_plots = ("mean_score", "cumulative_profit")


World = credit_score.World
'''
PLAIN = '''\
from typing import Literal

from abm.config import ScenarioBase


class Scenario(ScenarioBase):  # declares nothing but its name
    family: Literal["fam_decl.plain"] = "fam_decl.plain"


class World:  # not run here
    pass
'''
SMALL = ("population.size=100", "episodes.horizon=50", "episodes.count=1")


@pytest.fixture
def plugin_families(tmp_path, monkeypatch):
    """The two families, beside the built-ins only (plugin families other tests loaded are set aside)."""
    package = tmp_path / "fam_decl"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "stars.py").write_text(FAMILY)
    (package / "plain.py").write_text(PLAIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "FAMILIES", {name: registry.FAMILIES[name] for name in registry.FAMILY_NAMES})
    monkeypatch.setattr(registry, "_PLUGIN_FAMILIES", {})
    registry.scenario_union.cache_clear()
    yield {name: registry.family_module(name) for name in (NAME, "fam_decl.plain")}
    registry.scenario_union.cache_clear()


def test_abm_policies_lists_where_each_policy_applies_to_it(plugin_families):
    rows = {row["name"]: row["families"] for row in registry.listing()}
    assert NAME in rows["max_util"] and NAME in rows["approve_all"]
    assert NAME not in rows["ppo"] and NAME not in rows["oracle"]  # needs decision_env / latent_default
    assert "fam_decl.plain" not in rows["max_util"] and "fam_decl.plain" in rows["random"]
    code, out, err = call_in_process("policies")
    assert code == 0, err
    shown, name = {}, None  # policy -> its families cell (a long cell wraps onto the next lines)
    for line in out.splitlines():
        if line.startswith("│"):
            cells = [cell.strip() for cell in line.split("│")[1:-1]]
            name = cells[0] or name
            shown[name] = f"{shown.get(name, '')} {cells[1]}"
    assert NAME in shown["max_util"] and "fam_decl.plain" not in shown["max_util"] and NAME not in shown["ppo"]


def test_the_reports_axes_carry_its_units(plugin_families):
    frame = pd.DataFrame({"episode": [0, 1], "mean_score_G1": [4.0, 4.5], "mean_score_G2": [3.0, 3.1],
                          "cumulative_profit": [10.0, 19.0]})
    assert figures.run_metric(frame, "mean_score", NAME).ylabel == "mean reputation (stars)"
    assert figures.run_metric(frame, "cumulative_profit", NAME).ylabel == "cumulative profit (favours)"
    assert figures.run_metric(frame, "cumulative_profit", "credit_score").ylabel == "cumulative profit (reward units)"
    assert figures.units("fam_decl.plain") == figures.units(None) == ScenarioBase.units
    assert figures.units("fam_decl.missing") == ScenarioBase.units  # a run read where its family cannot load


def test_the_live_views_sidebar_and_plots_are_its_own(plugin_families):
    pytest.importorskip("solara")
    from abm.dashboard import live

    model = _live(NAME)
    assert [(path, label) for path, label, _ in model.main_parameters()] == \
        [("dynamics.score_change_repay", "stars gained on repayment")]
    params = live.model_params(model, str(SCENARIOS / "lending-credit.yaml"), None, SMALL)
    slider = params[live.param_name("dynamics.score_change_repay")]
    assert slider["type"] == "SliderInt" and (slider["min"], slider["max"], slider["step"]) == (0, 5, 1)
    assert "max_util" in params["policy"]["values"] and "oracle" not in params["policy"]["values"]
    assert len(live.components(model.scenario)) == 1 + 2
    plain = SimpleNamespace(scenario=plugin_families["fam_decl.plain"].Scenario())  # the defaults
    assert set(live.model_params(plain, "s.yaml", None, ())) == {"scenario_file", "overrides", "seed", "policy"}
    assert len(live.components(plain.scenario)) == 1 + len(ScenarioBase.live_plots)


def _live(family: str):
    from abm.dashboard.live import LiveSimulation

    model = LiveSimulation(str(SCENARIOS / "lending-credit.yaml"), overrides=(*SMALL, f"family={family}"),
                           policy="max_util")
    assert not model.problem, model.problem
    model.step()
    return model
