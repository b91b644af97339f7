"""Live view: one scenario simulated episode by episode in the page, with Mesa's SolaraViz.

SolaraViz drives a model through ``model.step()`` (its play, pause, step and reset buttons).
``Simulation.step`` advances the SimPy clock by exactly one episode (``run_episode``), so
SimPy stays the only clock and a live run is the same trajectory as ``abm run`` with the same
scenario and seed. The event log is off: the page shows episode metrics only.

Model parameters (SolaraViz's sidebar; Reset applies them): the seed, the policy (those that fit
the family, deep-RL trainers left out: they train for minutes before the first episode) and the
family's main parameters (its ``Scenario.live_parameters``: dotted scenario paths, applied as
``--set`` overrides after the command line's). A combination the scenario refuses keeps the previous
scenario and says why above the plots. The plots are the report's figure specs drawn as
interactive charts, with a metric picker each (starting on the family's ``Scenario.live_plots``);
they draw from the first episode on.
"""

from __future__ import annotations

import json
import os
import warnings

import pandas as pd
import solara

from abm import build
from abm.config import load_scenario
from abm.dashboard import figures
from abm.engine import Simulation
from abm.errors import UserError
from abm.reports import figures as specs

SCENARIO_ENV = "ABM_DASHBOARD_SCENARIO"
OPTIONS_ENV = "ABM_DASHBOARD_LIVE_OPTIONS"  # JSON: {"policy": name or null, "overrides": [...]}

# Mesa's own ComponentsView calls a hook after an early return (mesa/visualization/solara_viz.py);
# Solara's hook checker warns about it on every page. It is Mesa's code, harmless here: not ours to fix.
warnings.filterwarnings("ignore", message=r".*ComponentsView: `use_state` found despite early return",
                        category=UserWarning)
# see abm.dashboard.app: served over http on 127.0.0.1, Solara falls back to SameSite=Lax and says so
warnings.filterwarnings("ignore", message="Cookies with samesite=none require https", category=UserWarning)

SLOW_POLICIES = "policies.deep."  # trainers of the deep-RL policies (minutes before the first episode)


def param_name(path: str) -> str:
    """A dotted scenario path as a keyword name (Mesa passes model parameters as keywords)."""
    return path.replace(".", "__")


def _get(scenario, path: str):
    value = scenario
    for part in path.split("."):
        value = getattr(value, part, None)
    return value


class LiveSimulation(Simulation):
    """A Simulation of a scenario file that Mesa steps one episode at a time (``Simulation.step``).

    ``kwargs``: main parameters by ``param_name`` (applied after ``overrides``). When the scenario
    refuses them, the simulation runs without them and ``problem`` says why."""

    def __init__(self, scenario_file: str, seed: int | None = None, policy: str | None = None,
                 overrides: tuple[str, ...] = (), **kwargs):
        extra = [f"{name.replace('__', '.')}={value}" for name, value in kwargs.items() if value is not None]
        self.problem = ""
        try:
            scenario = load_scenario(scenario_file, [*overrides, *extra], policy=policy, seed=seed)
        except (UserError, ValueError) as exc:  # keep the page: run the scenario as started, say why
            self.problem = f"not applied ({', '.join([*extra, f'policy={policy}'])}): {exc}"
            scenario = load_scenario(scenario_file, list(overrides), seed=seed)
        super().__init__(scenario, build.world_factory(scenario), policy_factory=build.policy_factory(scenario),
                         log_events=False)

    def metrics(self) -> pd.DataFrame:
        return pd.DataFrame(self.episode_rows)

    def main_parameters(self) -> list[tuple[str, str, object]]:
        """(path, label, value) of the family's main parameters in the scenario being simulated."""
        return [(path, label, _get(self.scenario, path))
                for path, label, *_ in self.scenario.live_parameters]


def live_policies(family: str, current: str) -> list[str]:
    """Policies that fit the family (from the declarations, no policy imported), fast ones only."""
    from abm import registry

    names = [r["name"] for r in registry.listing() if r["families"] and family in r["families"]
             and not r["target"].startswith(SLOW_POLICIES)]
    return sorted(set(names) | {current})


def model_params(model: LiveSimulation, scenario_file: str, policy: str | None, overrides: tuple[str, ...]) -> dict:
    """SolaraViz's model parameters: fixed (the scenario file, the command line's overrides) and the
    user's (seed, policy, the family's main parameters)."""
    sc = model.scenario
    params: dict = {
        "scenario_file": scenario_file,
        "overrides": overrides,
        "seed": {"type": "SliderInt", "value": sc.seed, "label": "seed", "min": 0, "max": max(100, sc.seed),
                 "step": 1},
        "policy": {"type": "Select", "value": sc.policy.name, "label": "policy",
                   "values": live_policies(sc.family, sc.policy.name)},
    }
    del policy  # the Select starts on the scenario's policy, which already includes --policy
    for path, label, lo, hi, step in sc.live_parameters:
        value = _get(sc, path)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        whole = isinstance(value, int) and isinstance(step, int)
        params[param_name(path)] = {"type": "SliderInt" if whole else "SliderFloat", "value": value,
                                    "label": path, "min": min(lo, value), "max": max(hi, value),
                                    "step": step}
    return params


def episode_counter(model: LiveSimulation):
    sc = model.scenario
    left = sc.episodes.count - model.episode
    done = "finished" if not model.running else f"{left} to go" if model.episode else "ready: press ▶ or Step"
    text = (f"**Episode {model.episode} of {sc.episodes.count}** ({done}); simulated time "
            f"{model.env.now:g}; {sc.name}, policy **{sc.policy.name}**, seed {sc.seed}")
    values = "; ".join(f"{path} = {value:g}" if isinstance(value, (int, float)) else f"{path} = {value}"
                       for path, _, value in model.main_parameters())
    children = [solara.Markdown(text)]
    if values:
        children.append(solara.Markdown(f"parameters: {values} (the sidebar's values apply at Reset)",
                                        style={"font-size": "13px"}))
    if model.problem:
        children.append(solara.Warning(model.problem, classes=["abm-live-problem"]))
    return solara.Div(children=children, classes=["abm-live-episode"])


@solara.component
def LivePlot(model: LiveSimulation, start: str, episode: int, slot: int):
    """One interactive chart of the episodes run so far, with a picker over the recorded metrics."""
    del episode  # part of the props only: a new episode re-renders the plot
    frame = model.metrics()
    family = model.scenario.family
    choice = solara.use_reactive(start)
    hovered = solara.use_reactive("")
    if frame.empty:
        solara.Info(f"{specs.METRIC_BY_STEM[start].title if start in specs.METRIC_BY_STEM else start}: "
                    "drawn from the first episode on (press ▶ or Step)", classes=[f"abm-live-empty-{slot}"])
        return
    available = {m.stem: m for m in specs.metrics_in(frame.columns)}
    stem = choice.value if choice.value in available else next(iter(available), None)
    if stem is None:
        solara.Info("this family records no metric over episodes")
        return
    titles = {s: m.title for s, m in available.items()}
    by_title = {t: s for s, t in titles.items()}
    solara.Select("metric", values=list(titles.values()), value=titles[stem], dense=True,
                  on_value=lambda t: choice.set(by_title.get(t, stem)), classes=[f"abm-live-picker-{slot}"])
    spec = specs.run_metric(frame, available[stem], family)
    figures.VegaChart(figures.vega_spec(spec, width=380, height=200),
                      on_hover=lambda d: hovered.set(figures.describe_point(d)),
                      classes=["abm-live-plot", f"abm-live-plot-{slot}"])
    solara.Text(hovered.value or " ", style={"font-size": "12px"})


def _plot(start: str, slot: int):
    """A SolaraViz component (a function of the model): the plot re-renders after every step."""

    def component(model: LiveSimulation):
        return LivePlot(model, start, model.episode, slot)

    component.__name__ = f"plot_{slot}"
    return component


def components(scenario) -> list:
    return [episode_counter] + [_plot(stem, k) for k, stem in enumerate(scenario.live_plots)]


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
    params = solara.use_memo(lambda: model_params(model, scenario_file, policy, overrides), [])
    parts = solara.use_memo(lambda: components(model.scenario), [])
    SolaraViz(model, components=parts, model_params=params, play_interval=50,
              name=f"abm live: {model.scenario.name}")
