"""The one place a simulation is assembled from a scenario: its family's world and its policy.

Used by the runner, the gym adapter, the benchmarks, the live dashboard and the policies that
simulate the scenario themselves (pretraining, rollouts). The engine (``abm.engine``) builds
nothing; the registry (``abm.registry``) maps the scenario's family and policy names to code.
"""

from __future__ import annotations

from typing import Any

from abm import registry
from abm.engine import Simulation


def world_factory(scenario):
    """The family's ``World`` class (called with the simulation to build the world on it)."""
    return registry.family_module(scenario.family).World


def policy_factory(scenario):
    """(context, rng) -> the scenario's configured policy, built from the registry."""
    def factory(context, rng):
        return registry.build(scenario.policy, context, rng)
    return factory


def simulation(scenario, policy: Any = None, *, external: bool = False, log_events: bool | None = None,
               track_applicants: bool = True) -> Simulation:
    """A ``Simulation`` of ``scenario``: the configured policy unless ``policy`` (an object) is
    given; none in ``external`` mode (the gym adapter answers the decisions)."""
    factory = policy_factory(scenario) if policy is None and not external else None
    return Simulation(scenario, world_factory(scenario), policy, policy_factory=factory, external=external,
                      log_events=log_events, track_applicants=track_applicants)
