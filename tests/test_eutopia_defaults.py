"""Seed 000's defaults follow its most faithful reading (docs/MODEL.md, Eutopia and RL/PERL):

* ``dynamics.refit: prior``, the refit continuous in the decisions, so approving everyone and
  approving 99% draw nearly the same applications (``keep_single_class``, the old default,
  keeps the initial model after an all-approve episode and draws a quarter fewer);
* ``policy.credit: discounted`` for RL and PERL (long-term utility);
* a run cached under the old defaults is never reused for the new ones: a run id leaves out
  ``refit: keep_single_class`` and ``credit: episode`` (what an omitted field meant before) and
  writes the new defaults out.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from abm.config import RUN_ID, config_hash, scenario_to_dict
from abm.runner import execute, run_to_folder
from abm.study.spec import configuration_id

SMALL = ("population.n_male=300", "population.n_female=300", "arrivals.base_intercept=1.0", "episodes.count=10",
         "outputs.events=false")


def _applications(eutopia_small, *extra: str) -> float:
    """Mean applications per episode (both groups) of a small run."""
    episodes = execute(eutopia_small(*SMALL, *extra))[1]
    return float((episodes["applications_M"] + episodes["applications_F"]).mean())


def test_default_refit_treats_approve_all_like_approving_99_percent(eutopia_small):
    """Applications per episode under approve_all and random(p = 0.99) differ by under 10% at the
    default refit (2 x 300 applicants, 10 episodes)."""
    all_ = _applications(eutopia_small)
    most = _applications(eutopia_small, "policy.name=random", "policy.p=0.99")
    assert abs(all_ - most) / most < 0.10, (all_, most)


@pytest.mark.slow
def test_keep_single_class_draws_fewer_applications_under_approve_all(eutopia_small):
    """The old refit's jump, which the default removes: over 20 episodes approve_all draws 20% or
    more fewer applications than random(p = 0.99) (measured: 55.8 vs 74.5 per episode)."""
    old = ("dynamics.refit=keep_single_class", "episodes.count=20")
    all_ = _applications(eutopia_small, *old)
    most = _applications(eutopia_small, *old, "policy.name=random", "policy.p=0.99")
    assert all_ < 0.8 * most, (all_, most)


def _run_id_data(scenario) -> dict:
    return json.loads(scenario.model_dump_json(context=RUN_ID))


def _hash(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]


@pytest.mark.parametrize("policy", [(), ("policy.name=rl",), ("policy.name=perl",)])
def test_a_run_id_from_before_the_flip_names_the_old_readings_only(eutopia_small, policy):
    """Before the flip a run's config had no ``refit`` (nor ``credit``) key and meant
    keep_single_class (and episode). That id is the one the old readings get now, never the
    default's."""
    default = eutopia_small(*policy)
    data = _run_id_data(default)
    assert data["dynamics"]["refit"] == "prior"
    before = {**data, "dynamics": {k: v for k, v in data["dynamics"].items() if k != "refit"},
              "policy": {k: v for k, v in data["policy"].items() if k != "credit"}}
    old = eutopia_small(*policy, "dynamics.refit=keep_single_class",
                        *(["policy.credit=episode"] if policy else []))
    assert _hash(before) == config_hash(old) != config_hash(default)
    if policy:
        assert data["policy"]["credit"] == "discounted"
        assert config_hash(eutopia_small(*policy, "policy.credit=discounted")) == config_hash(default)
        # the run folder's scenario.yaml writes the reading out, so it reloads as what it ran
        assert scenario_to_dict(old)["policy"]["credit"] == "episode"
    assert scenario_to_dict(old)["dynamics"]["refit"] == "keep_single_class"
    # a study's run ids hash the scenario's dump, which the flip changed: no old study run is reused
    dump = scenario_to_dict(default)
    old_dump = {**dump, "dynamics": {k: v for k, v in dump["dynamics"].items() if k != "refit"},
                "policy": {k: v for k, v in dump["policy"].items() if k != "credit"}}
    assert configuration_id(old_dump) != configuration_id(dump)


def test_a_run_folder_from_before_the_flip_is_not_reused(eutopia_small, tmp_path):
    """A folder computed under the old default refit (same id as keep_single_class now) is reused
    for keep_single_class and not for the default."""
    tiny = ("population.n_male=50", "population.n_female=50", "episodes.count=2", "outputs.events=false")
    old_folder, fresh = run_to_folder(eutopia_small(*tiny, "dynamics.refit=keep_single_class"), tmp_path)
    assert fresh
    again, fresh = run_to_folder(eutopia_small(*tiny, "dynamics.refit=keep_single_class"), tmp_path)
    assert again == old_folder and not fresh
    new_folder, fresh = run_to_folder(eutopia_small(*tiny), tmp_path)
    assert fresh and new_folder != old_folder


def test_a_run_folder_from_before_the_flip_reloads_as_it_ran(eutopia_small, tmp_path):
    """A run folder's scenario.yaml written before the faithful defaults omits refit and credit: it
    reloads (``abm run FOLDER``, ``abm.load_run``) as keep_single_class and episode credit; today's
    folders write both out and reload as written."""
    import yaml

    from abm.config import validate_scenario_dict

    folder, _ = run_to_folder(eutopia_small("episodes.count=1", "policy.name=rl"), tmp_path)
    today = yaml.safe_load((folder / "scenario.yaml").read_text())
    assert today["dynamics"]["refit"] == "prior" and today["policy"]["credit"] == "discounted"
    assert validate_scenario_dict(today).dynamics.refit == "prior"
    old = json.loads(json.dumps(today))
    del old["dynamics"]["refit"], old["policy"]["credit"]
    scenario = validate_scenario_dict(old, "old/scenario.yaml")
    assert scenario.dynamics.refit == "keep_single_class" and scenario.policy.params["credit"] == "episode"
    written = {k: v for k, v in old.items() if k != "abm_version"}  # a scenario file (not a record): today's defaults
    assert validate_scenario_dict(written).dynamics.refit == "prior"
