"""Live view: one scenario simulated episode by episode in the page, with Mesa's SolaraViz.

SolaraViz drives a model through ``model.step()`` (its play, pause, step and reset buttons).
``Simulation.step`` advances the SimPy clock by exactly one episode (``run_episode``), so
SimPy stays the only clock and a live run is the same trajectory as ``abm run`` with the same
scenario and seed. The event log is off: the page shows episode metrics only.
"""

from __future__ import annotations

import json
import os

import pandas as pd
import solara

from abm import build
from abm.config import load_scenario
from abm.dashboard import data, figures
from abm.engine import Simulation

SCENARIO_ENV = "ABM_DASHBOARD_SCENARIO"
OPTIONS_ENV = "ABM_DASHBOARD_LIVE_OPTIONS"  # JSON: {"policy": name or null, "overrides": [...]}


class LiveSimulation(Simulation):
    """A Simulation of a scenario file that Mesa steps one episode at a time (``Simulation.step``)."""

    def __init__(self, scenario_file: str, seed: int | None = None, policy: str | None = None,
                 overrides: tuple[str, ...] = ()):
        scenario = load_scenario(scenario_file, list(overrides), policy=policy, seed=seed)
        super().__init__(scenario, build.world_factory(scenario), policy_factory=build.policy_factory(scenario),
                         log_events=False)

    def metrics(self) -> pd.DataFrame:
        return pd.DataFrame(self.episode_rows)


def episode_counter(model: LiveSimulation):
    sc = model.scenario
    left = sc.episodes.count - model.episode
    done = "finished" if not model.running else f"{left} to go" if model.episode else "ready: press ▶ or Step"
    text = (f"**Episode {model.episode} of {sc.episodes.count}** ({done}); simulated time "
            f"{model.env.now:g}; {sc.name}, policy **{sc.policy.name}**, seed {sc.seed}")
    return solara.Div(children=[solara.Markdown(text)], classes=["abm-live-episode"])


def _panel(title: str, pattern: str):
    """A SolaraViz component: one metric panel over the episodes run so far."""

    def component(model: LiveSimulation):
        frame = model.metrics()
        panels = dict(data.metric_panels(frame.columns)) if len(frame) else {}
        if title not in panels:
            return solara.Text(f"{title}: no data yet" if not len(frame) else f"{title}: not recorded by this family")
        return solara.FigureMatplotlib(figures.run_metric(frame, title, panels[title]), format="png")

    component.__name__ = f"panel_{pattern.replace('{g}', 'g')}"
    return component


COMPONENTS = [episode_counter] + [_panel(title, pattern) for title, pattern in data.PANELS
                                  if pattern in ("mean_wealth_{g}", "wealth_gap", "cumulative_profit",
                                                 "reach_{g}", "intensity_{g}")]


@solara.component
def Page():
    scenario_file = os.environ.get(SCENARIO_ENV)
    if not scenario_file:
        solara.Error("no scenario given: start the live view with `abm dashboard --live SCENARIO`")
    else:
        options = json.loads(os.environ.get(OPTIONS_ENV) or "{}")
        LiveView(scenario_file, options.get("seed"), options.get("policy"), tuple(options.get("overrides", ())))


@solara.component
def LiveView(scenario_file: str, seed: int | None, policy: str | None, overrides: tuple[str, ...]):
    from mesa.visualization import SolaraViz

    model = solara.use_memo(lambda: LiveSimulation(scenario_file, seed, policy, overrides), [])
    params = {
        "scenario_file": scenario_file,
        "policy": policy,
        "overrides": overrides,
        "seed": {"type": "SliderInt", "value": model.scenario.seed, "label": "seed (Reset applies it)", "min": 0,
                 "max": max(100, model.scenario.seed), "step": 1},
    }
    SolaraViz(model, components=COMPONENTS, model_params=params, play_interval=50,
              name=f"abm live: {model.scenario.name}")
