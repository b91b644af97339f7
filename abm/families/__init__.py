"""Scenario families: each supplies a scenario model (its config sections) and a world.

A *world* owns the population's numpy columns and implements the engine's seams:
``start()`` (arrival processes), ``observe(idx)``, ``privileged(idx, names)``,
``apply_decisions(idx, approved, probs, obs)``, ``episode_metrics(e)``, ``episode_stats()``,
``end_episode(e)``, ``check_invariants()``, ``agents_table()``, ``amount(idx)``,
``wealth_of(idx)``, ``policy_context()``, plus ``group_names`` and ``group_slices``.
To add a family: write its module with ``Scenario`` (a ``ScenarioBase`` subclass with
``family: Literal[...]``) and ``World``, and list it in ``FAMILIES`` below.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Annotated, Union

from pydantic import Field

# family name -> module path (imported lazily so a family's heavy imports cost only its users)
FAMILIES: dict[str, str] = {
    "eutopia": "abm.families.eutopia",
    "credit_score": "abm.families.credit_score",
    "fico": "abm.families.fico",
    "admissions": "abm.families.admissions",
    "beta_belief": "abm.families.beta_belief",
}
FAMILY_NAMES = tuple(FAMILIES)


def module(family: str):
    return importlib.import_module(FAMILIES[family])


@lru_cache(maxsize=1)
def scenario_union():
    classes = tuple(module(name).Scenario for name in FAMILIES)
    if len(classes) == 1:
        return classes[0]
    return Annotated[Union[classes], Field(discriminator="family")]


def make_world(model):
    return module(model.scenario.family).World(model)
