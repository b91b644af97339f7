"""A study across environments (groups with their own base scenario, another family each): the
benchmark report's per-environment table of each family's reward and fairness gap, and its
frontier figure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from abm.reports import benchmark, render
from abm.study import run_study, study_from_dict

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


@pytest.fixture(scope="module")
def cross_study(tmp_path_factory):
    doc = {
        "study": {"name": "bench", "seed": 5, "seeds": 2},
        "base": str(SCENARIOS / "lending-credit.yaml"),
        "groups": {
            "lending": {"overrides": {"population.size": 100, "episodes.count": 2, "episodes.horizon": 100},
                        "policies": [{"name": "max_util"}, {"name": "approve_all"},
                                     {"name": "ppo", "backend": "lean", "total_timesteps": 256, "n_steps": 128,
                                      "batch_size": 64, "n_epochs": 1, "eval_episodes": 3, "label": "PPO"}]},
            "attention": {"base": str(SCENARIOS / "attention-allocation.yaml"),
                          "overrides": {"episodes.count": 2, "episodes.horizon": 20},
                          "policies": [{"name": "greedy_allocation"}, {"name": "uniform_allocation"}]},
        },
    }
    folder = tmp_path_factory.mktemp("bench") / "out"
    run_study(study_from_dict(doc, "bench"), folder, workers=0, quiet=True)
    return folder


def test_the_report_tables_each_environments_own_reward_and_gap(cross_study):
    assert benchmark.applies(cross_study)
    assert benchmark.environments(cross_study) == {"lending": "credit_score", "attention": "attention_allocation"}
    frame = benchmark.table(cross_study)
    assert set(zip(frame["environment"], frame["gap_metric"])) == {("lending", "recall_gap"),
                                                                   ("attention", "run_discovery_gap")}
    assert (frame["seeds"] == 2).all() and len(frame) == 5
    study = pd.read_parquet(cross_study / "study.parquet")
    runs = study[(study["study_group"] == "attention") & (study["config"] == "greedy_allocation")]
    values = runs.groupby("run_id")["return"].sum()  # attention's reward: the whole run's (pocar's episode)
    row = frame[(frame["environment"] == "attention") & (frame["method"] == "greedy_allocation")].iloc[0]
    assert row["reward_metric"] == "cumulative_profit" and row["reward"] == pytest.approx(values.mean())
    half = 12.706 * values.std(ddof=1) / np.sqrt(2)  # Student t, 1 d.f.
    assert row["reward_ci"] == pytest.approx(half, rel=1e-3)
    out = render(cross_study)
    text = (out / "benchmark.md").read_text()
    assert "## lending (credit_score)" in text and "## attention (attention_allocation)" in text
    assert "| method | cumulative_profit | run_discovery_gap | seeds |" in text
    assert (out / "benchmark_frontier.png").stat().st_size > 5000


def test_a_study_of_one_family_gets_no_benchmark_report(tmp_path):
    doc = {"study": {"name": "one", "seed": 1, "seeds": 1}, "base": str(SCENARIOS / "lending-credit.yaml"),
           "overrides": {"population.size": 100, "episodes.count": 1, "episodes.horizon": 50},
           "policies": [{"name": "approve_all"}]}
    run_study(study_from_dict(doc, "one"), tmp_path / "one", workers=0, quiet=True)
    assert not benchmark.applies(tmp_path / "one")
    assert not (render(tmp_path / "one") / "benchmark.md").exists()


def test_the_frontier_legend_names_each_method_once(cross_study):
    """Across panels a method's n and Pareto star differ; the one legend names each method once."""
    from abm.reports import figures

    (spec,) = benchmark.figures(cross_study)
    legend = figures.draw(spec).legends[0]
    texts = [t.get_text() for t in legend.get_texts()]
    assert [t for t in texts if t != "Pareto front"] == ["max_util", "approve_all", "PPO", "greedy_allocation",
                                                          "uniform_allocation"]


def test_the_frontier_shows_the_tables_values(cross_study):
    """Each panel's point is its method's table row: for PPO, each run's mean over its final and 2
    further evaluation episodes, not its final episode alone."""
    (spec,) = benchmark.figures(cross_study)
    frame = benchmark.table(cross_study).set_index(["environment", "method"])
    shown = {(panel.title.split(":")[0], s.config): (s.x[0], s.y[0]) for panel in spec.panels for s in panel.series}
    assert shown.keys() == set(frame.index)
    for key, (x, y) in shown.items():
        assert (x, y) == pytest.approx((frame.at[key, "gap"], frame.at[key, "reward"])), key


def test_the_study_figures_of_a_study_across_families_are_drawn_per_environment(cross_study):
    """One axis cannot hold two families' metrics: each figure once per study group, its methods only."""
    from abm.reports.study import study_figures

    specs = study_figures(cross_study)
    methods = {"lending": {"max_util", "approve_all", "PPO"}, "attention": {"greedy_allocation", "uniform_allocation"}}
    assert specs and all(spec.name.rsplit("_", 1)[1] in methods for spec in specs)
    for spec in specs:
        env = spec.name.rsplit("_", 1)[1]
        assert spec.title.startswith(f"{env}: ")
        for panel in getattr(spec, "panels", [spec]):
            assert {s.config for s in panel.series if s.config} <= methods[env], (spec.name, env)
    names = {spec.name for spec in specs}
    assert {"recall_gap_lending", "cumulative_profit_attention"} <= names and "recall_gap_attention" not in names
    files = {p.name for p in render(cross_study).iterdir()}
    assert {"recall_gap_lending.png", "distribution_attention.png"} <= files and "recall_gap.png" not in files


def test_seed_002s_forms_take_each_environment_in_its_own_form(cross_study):
    """Lending gets Table 1's form and Figure 1's (not Table 5's, which the pooled columns of other
    families' groups chose); attention allocation, with no recall gap, gets no seed-002 table."""
    from abm.reports import seed002

    text = seed002.seed_tables(seed002.study_frame(cross_study), cross_study)
    assert "## lending" in text and "## attention" not in text
    header = next(line for line in text.splitlines() if line.startswith("| Method"))
    assert header == "| Method | Runs | Eval. | Avg. Return | Credit Gap | Recall (G1) | Recall (G2) | Recall Gap |"
    (spec,) = seed002.figures(cross_study)
    assert spec.name == "seed002_figure1" and all("[attention]" not in p.title for p in spec.panels)
