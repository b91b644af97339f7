"""The figure layer (``abm.reports.figures``): specs from hand-made run and study frames, checked as
objects (series, bands, n, labels) and as the matplotlib figures drawn from them (axes labels, one
line per group, a confidence band, n in the legend), never as pixels; the same specs as Vega-Lite
charts; and the figures ``abm report`` writes for the smoke study."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from scipy import stats

from abm.reports import figures
from conftest import SCENARIOS


def summary_frame() -> pd.DataFrame:
    """Two configurations (one policy at two grid values, n = 3 and n = 1) x 3 episodes, groups M and F."""
    rows = []
    for config, slope, count in (("approve_all, arrivals.base_slope=0.01", 0.01, 3),
                                 ("approve_all, arrivals.base_slope=0.03", 0.03, 1)):
        for e in range(3):
            rows.append({"config_id": config[-4:], "config": config, "study_groups": "s", "policy": "approve_all",
                         "objective": "none", "arrivals.base_slope": slope, "episode": e, "time_mean": 10.0 * (e + 1),
                         "mean_wealth_M_mean": 60.0 + e, "mean_wealth_M_std": 2.0 if count > 1 else np.nan,
                         "mean_wealth_F_mean": 50.0 + e, "mean_wealth_F_std": 1.0 if count > 1 else np.nan,
                         "wealth_gap_mean": 10.0, "wealth_gap_std": 3.0 if count > 1 else np.nan, "count": count})
    return pd.DataFrame(rows)


def study_frame() -> pd.DataFrame:
    """study.parquet rows: 3 configurations x 2 runs x 2 episodes with counts per group."""
    rows = []
    finals = {"a": [(2.0, 100.0), (4.0, 120.0)], "b": [(1.0, 90.0), (1.0, 80.0)], "c": [(5.0, 50.0), (6.0, 60.0)]}
    for policy, runs in finals.items():
        for r, (gap, profit) in enumerate(runs):
            for e in (0, 1):
                rows.append({"run_id": f"{policy}-r{r}", "config_id": policy, "config": policy, "study_group": "s",
                             "study_groups": "s", "policy": policy, "objective": "none", "replicate": r, "seed": r,
                             "episode": e, "time": 10.0 * (e + 1), "wealth_gap": gap if e else 0.0,
                             "cumulative_profit": profit if e else 0.0, "mean_wealth_M": 1.0, "mean_wealth_F": 1.0,
                             "applications_M": 10, "approvals_M": 5 + e, "defaults_M": 1, "repayments_M": 4,
                             "applications_F": 10, "approvals_F": 2, "defaults_F": 0, "repayments_F": 2})
    return pd.DataFrame(rows)


def _legend_texts(fig) -> list[str]:
    texts = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    return texts + [t.get_text() for leg in fig.legends for t in leg.get_texts()]


def test_a_study_metric_has_every_group_on_one_axis_with_t_intervals_and_n():
    spec = figures.study_metric(summary_frame(), "mean_wealth", family="eutopia")
    assert spec.name == "mean_wealth" and spec.xlabel == "episode" and spec.ylabel == "mean wealth ($K)"
    assert [(s.config[-4:], s.group, s.n) for s in spec.series] == [
        ("0.01", "M", 3), ("0.01", "F", 3), ("0.03", "M", 1), ("0.03", "F", 1)]
    first = spec.series[0]
    half = stats.t.ppf(0.975, 2) * 2.0 / np.sqrt(3)  # Student t, n - 1 = 2 degrees of freedom
    np.testing.assert_allclose(first.high - first.y, half)
    np.testing.assert_allclose(first.x, [0, 1, 2])  # episodes as the data number them
    assert first.has_band() and not spec.series[2].has_band()  # n = 1: no band
    assert len({s.color for s in spec.series}) == 1  # one policy, one colour
    assert spec.series[0].dash != spec.series[2].dash  # two grid values, two line styles
    assert spec.series[0].marker != spec.series[1].marker  # groups told apart by marker
    assert "(n=3)" in first.label and "Student t" in spec.caption

    fig = figures.draw(spec)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "episode" and ax.get_ylabel() == "mean wealth ($K)"
    assert len(ax.get_lines()) == 4  # one line per configuration and group
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2  # the n = 3 configuration's two groups; n = 1 draws none
    legend = ax.get_legend()
    assert legend is not None and legend.get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1  # outside
    assert any("(n=3)" in t for t in _legend_texts(fig)) and any("(n=1)" in t for t in _legend_texts(fig))


def test_a_run_metric_draws_one_line_per_group_without_bands():
    episodes = pd.DataFrame({"episode": [0, 1, 2], "mean_wealth_M": [1.0, 2.0, 3.0], "mean_wealth_F": [1.0, 1.5, 2.0],
                             "wealth_gap": [0.0, 0.5, 1.0]})
    spec = figures.run_metric(episodes, "mean_wealth", family="credit_score")
    assert [s.group for s in spec.series] == ["M", "F"] and spec.ylabel == "mean credit score (points)"
    assert len({s.color for s in spec.series}) == 2 and not any(s.has_band() for s in spec.series)
    ax = figures.draw(spec).axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["M", "F"]
    assert ax.get_ylabel() == "mean credit score (points)"
    gap = figures.run_metric(episodes, "wealth_gap", family="eutopia")
    assert gap.ylabel == "mean wealth M - F ($K)" and len(gap.series) == 1


def test_the_frontier_has_ci_whiskers_on_both_axes_and_marks_the_pareto_points():
    spec = figures.frontier(study_frame(), family="eutopia")
    assert spec.kind == "scatter" and spec.name == "frontier"
    assert spec.xlabel == "final mean wealth M - F ($K)" and spec.ylabel == "final cumulative profit ($K)"
    by = {s.config: s for s in spec.series}
    a = by["a"]
    assert a.x[0] == 3.0 and a.y[0] == 110.0 and a.n == 2
    half = stats.t.ppf(0.975, 1) * np.std([2.0, 4.0], ddof=1) / np.sqrt(2)
    np.testing.assert_allclose([a.x_low[0], a.x_high[0]], [3.0 - half, 3.0 + half])
    assert np.isfinite(a.low[0]) and np.isfinite(a.high[0])
    # a: gap 3, profit 110; b: gap 1, profit 85; c: gap 5.5, profit 55 (dominated by both)
    assert {c: bool(s.pareto[0]) for c, s in by.items()} == {"a": True, "b": True, "c": False}
    assert a.label.endswith("*") and "Pareto" in spec.caption and "95%" in spec.caption
    ax = figures.draw(spec).axes[0]
    assert ax.get_xlabel() == spec.xlabel and ax.get_ylabel() == spec.ylabel
    assert any("(n=2)" in t for t in _legend_texts(ax.figure))
    other = figures.frontier(study_frame(), fairness="wealth_gap", profit="cumulative_profit")
    assert other.name == "frontier"
    assert figures.pareto_mask([1.0, 1.0, 2.0], [5.0, 5.0, 6.0]).tolist() == [True, True, True]
    assert figures.pareto_mask([1.0, 2.0, np.nan], [5.0, 4.0, 9.0]).tolist() == [True, False, False]


def test_group_rates_are_cumulative_counts_per_group_and_their_gap():
    one = study_frame()[lambda f: f["run_id"] == "a-r0"].drop(columns=["run_id"])
    rates = figures.rate_columns(one.reset_index(drop=True), ["M", "F"])
    np.testing.assert_allclose(rates["selection_M"], [5 / 10, 11 / 20])
    np.testing.assert_allclose(rates["selection_F"], [0.2, 0.2])
    np.testing.assert_allclose(rates["default_M"], [1 / 5, 2 / 10])  # defaults / (defaults + repayments)
    np.testing.assert_allclose(rates["selection_gap"], [0.3, 0.35])
    panels = figures.group_rates(study_frame(), family="eutopia")
    names = [p.name for p in panels.panels]
    assert names == ["selection_rate", "default_rate", "selection_gap", "default_gap"]
    top = panels.panels[0]
    assert len(top.series) == 3 * 2 and {s.group for s in top.series} == {"M", "F"}
    assert all(s.n == 2 for s in top.series)
    fig = figures.draw(panels)
    assert [ax.get_ylabel() for ax in fig.axes[:2]] == ["approved / applications, cumulative",
                                                        "defaults / resolved loans, cumulative"]
    assert any("(n=2)" in t for t in _legend_texts(fig))


def test_paper_figures_keep_the_seeds_panel_layout(tmp_path):
    from abm.reports import seed001, seed002

    rows = []
    for label in ("race_blind", "fair_lp(constraint=dp)", "fair_lp(constraint=eo)"):
        for episode in (0, 1):
            rows.append({"run_id": label, "config": label, "policy": label, "objective": "none", "episode": episode,
                         "bank.gamma": 0.8, "exact_reward": 0.08, "exact_discounted_return": 0.4,
                         "exact_dp_gap": 0.1, "exact_eo_gap": -0.1, "sim_reward": 0.08, "sim_reward_se": 0.001,
                         "sim_dp_gap": 0.1, "sim_dp_gap_se": 0.01, "sim_eo_gap": -0.1, "sim_eo_gap_se": 0.01})
    pd.DataFrame(rows).to_parquet(tmp_path / "study.parquet")
    (fig1,) = seed001.figures(tmp_path)
    assert [p.title[:3] for p in fig1.panels] == ["(a)", "(b)", "(c)", "(d)"]
    assert all(p.kind == "bar" and p.categories[0] == "race-blind" for p in fig1.panels)
    assert fig1.panels[1].series[0].y[0] == pytest.approx(0.1) and fig1.panels[1].reference == 0.1
    assert (figures.save(fig1, tmp_path)).stat().st_size > 10_000

    # named settings (the seed's and the public code's) get a series each, never one pooled bar
    for r in rows:
        r["study_group"] = "seed"
    public = [{**r, "study_group": "public", "run_id": r["run_id"] + "-public", "exact_dp_gap": 0.3} for r in rows]
    pd.DataFrame(rows + public).to_parquet(tmp_path / "study.parquet")
    (fig1,) = seed001.figures(tmp_path)
    dp_value = fig1.panels[1].series
    assert [s.label for s in dp_value] == ["group public, gamma = 0.8", "group seed, gamma = 0.8"]
    assert [s.y[0] for s in dp_value] == pytest.approx([0.3, 0.1])

    runs = []
    for method in ("max_util", "eo_threshold"):
        for r in range(3):
            for e in range(3):
                runs.append({"run_id": f"{method}-{r}", "config": method, "study_group": "g", "study_groups": "g",
                             "policy": method, "objective": "none", "replicate": r, "episode": e,
                             "time": 1000.0 * (e + 1), "cumulative_return": 10.0 * e + r, "recall_G1": 0.5,
                             "recall_G2": 0.4 + 0.01 * r, "recall_gap": 0.1, "credit_gap": 1.0})
    (spec,) = seed002.figure_specs(pd.DataFrame(runs))
    assert spec.name == "seed002_figure1"
    assert [p.title for p in spec.panels] == ["(a) Average return", "(b) Recall, G1", "(c) Recall, G2",
                                              "(d) Credit gap"]
    ret = spec.panels[0].series[0]
    assert ret.n == 3 and ret.has_band() and ret.x.tolist() == [1000.0, 2000.0, 3000.0]


def test_the_same_specs_become_interactive_vega_lite_charts():
    from abm.dashboard.figures import chart_data, describe_point, to_altair, vega_spec

    spec = figures.study_metric(summary_frame(), "mean_wealth", family="eutopia")
    data = chart_data(spec)
    assert len(data) == 4 * 3 and set(data["series"]) == {s.label for s in spec.series}
    chart = vega_spec(spec)
    assert chart["$schema"].endswith("vega-lite/v5.json")
    marks = [layer["mark"]["type"] for layer in chart["layer"]]
    assert marks == ["area", "line", "point"]  # the band, the lines, the hover targets
    point = chart["layer"][-1]
    assert {t["field"] for t in point["encoding"]["tooltip"]} >= {"series", "x", "y", "low", "high", "n"}
    params = {p["name"]: p for p in chart["params"]}  # Altair lifts them to the top, naming their views
    assert params["zoom0"]["select"]["type"] == "interval" and params["zoom0"]["bind"] == "scales"  # pan, zoom
    assert params["pick0"]["select"]["fields"] == ["series"] and params["pick0"]["bind"] == "legend"
    assert chart["layer"][1]["encoding"]["y"]["title"] == "mean wealth ($K)"
    panels = to_altair(figures.group_rates(study_frame())).to_dict()
    assert len(panels["concat"]) == 4
    assert describe_point({"series": "a (n=2)", "x": 3, "y": 1.5, "low": 1.0, "high": 2.0}) == \
        "a (n=2): x = 3, value = 1.5 (band 1 to 2)"


LABELLED = {"study": {"name": "labelled", "seed": 2024, "episodes": 3, "seeds": 2},
            "base": str(SCENARIOS / "eutopia.yaml"),
            "overrides": {"population.n_male": 60, "population.n_female": 60},
            "grid": {"arrivals.base_slope": [0.01, 0.03]},
            # the study's order (random first) is not the alphabetical one
            "policies": [{"name": "random", "p": 0.5, "label": "Coin flip"}, {"name": "approve_all", "label": "Everyone"}]}
ORDER = ["Coin flip, arrivals.base_slope=0.01", "Everyone, arrivals.base_slope=0.01",
         "Coin flip, arrivals.base_slope=0.03", "Everyone, arrivals.base_slope=0.03"]


@pytest.fixture(scope="module")
def smoke_report(tmp_path_factory):
    """A small labelled study (4 configurations x 2 seeds, 3 episodes, 120 applicants) and its report."""
    from abm.reports import render
    from abm.study import run_study, study_from_dict

    folder = tmp_path_factory.mktemp("smoke") / "smoke"
    run_study(study_from_dict(LABELLED), folder, workers=0, quiet=True)
    return folder, render(folder, formats="png,svg", dpi=60)


def test_abm_report_of_a_study_writes_the_frontier_and_groups_on_one_axis(smoke_report):
    from abm.reports.study import study_figures

    folder, out = smoke_report
    names = {p.name for p in out.glob("*.png")}
    assert {"frontier.png", "mean_wealth.png", "reach.png", "wealth_gap.png", "cumulative_profit.png",
            "group_rates.png", "distribution.png"} <= names
    assert {p.stem for p in out.glob("*.svg")} == {p.stem for p in out.glob("*.png")}  # every figure in both
    made = {spec.name: spec for spec in study_figures(folder)}
    wealth = figures.draw(made["mean_wealth"]).axes[0]
    assert wealth.get_ylabel() == "mean wealth ($K)" and wealth.get_xlabel() == "episode"
    assert list(wealth.get_lines()[0].get_xdata()) == [0, 1, 2]  # episodes as the data number them
    labels = [line.get_label() for line in wealth.get_lines()]
    assert len(labels) == 4 * 2 and sum(label.split(" | ")[1].startswith("M") for label in labels) == 4
    assert len([c for c in wealth.collections if isinstance(c, PolyCollection)]) == 8  # n = 2: a band each
    assert all("(n=2)" in t for t in _legend_texts(wealth.figure))
    frontier = made["frontier"]
    assert frontier.xlabel == "final mean wealth M - F ($K)" and len(frontier.series) == 4
    assert any(s.pareto[0] for s in frontier.series)


def test_labels_name_configurations_in_the_study_order_in_every_legend_and_table(smoke_report):
    from abm.reports.study import study_figures

    folder, out = smoke_report
    for spec in study_figures(folder):
        for panel in spec.panels if isinstance(spec, figures.Panels) else [spec]:
            configs = list(dict.fromkeys(s.config for s in panel.series))
            assert configs == ORDER, (spec.name, configs)
            assert all("random(" not in s.label and "approve_all" not in s.label for s in panel.series)
    text = (out / "comparison.md").read_text()
    assert [text.index(c) for c in ORDER] == sorted(text.index(c) for c in ORDER)
    assert "random(p=0.5)" not in text and "95% confidence interval" in text
    table = pd.read_csv(out / "comparison.csv")
    assert list(table["config"]) == ORDER and {"wealth_gap_ci95", "wealth_gap_n", "selection_gap_mean"} <= set(table)


def _boxes(fig) -> list[tuple[str, object]]:
    """(owner, window extent) of every visible piece of text of a drawn figure: titles, axis labels,
    tick labels, legends (whole), the figure's title, legends and caption."""
    renderer = fig.canvas.get_renderer()
    out = []
    for k, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        texts = [("title", ax.title), ("xlabel", ax.xaxis.label), ("ylabel", ax.yaxis.label)]
        for axis, name in ((ax.xaxis, "xtick"), (ax.yaxis, "ytick")):  # the ticks drawn: those in view
            low, high = sorted(axis.get_view_interval())
            pairs = zip(axis.get_majorticklocs(), axis.get_ticklabels())
            texts += [(f"{name}{i}", t) for i, (loc, t) in enumerate(pairs)
                      if low - 1e-9 * abs(high - low) <= loc <= high + 1e-9 * abs(high - low)]
        out += [(f"axes{k}.{name}", t.get_window_extent(renderer)) for name, t in texts
                if t.get_visible() and t.get_text().strip()]
        if ax.get_legend() is not None:
            out.append((f"axes{k}.legend", ax.get_legend().get_window_extent(renderer)))
    out += [(f"figure.legend{i}", leg.get_window_extent(renderer)) for i, leg in enumerate(fig.legends)]
    out += [(f"figure.text{i}", t.get_window_extent(renderer)) for i, t in enumerate(fig.texts)
            if t.get_text() and t is not fig._suptitle]
    if fig._suptitle is not None:
        out.append(("figure.title", fig._suptitle.get_window_extent(renderer)))
    return out


def overlaps(fig) -> list[str]:
    """The pairs of text pieces of ``fig`` whose boxes share more than a pixel, once drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    boxes = _boxes(fig)
    found = []
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            if box_a.overlaps(box_b) and box_a.width * box_a.height and box_b.width * box_b.height:
                inter = ((min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0))
                         * (min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)))
                if inter > 1.0:  # more than a pixel shared: touching edges are not an overlap
                    found.append(f"{a} / {b}")
    return found


def test_no_text_overlaps_in_any_figure_of_a_run_or_study_report(smoke_report):
    from abm.api import load_run
    from abm.reports.run import run_figures
    from abm.reports.study import run_folders, study_figures

    folder, _ = smoke_report
    run = load_run(next((folder / "runs").iterdir()))
    specs = run_figures(run) + run_figures(run, facet="group")
    specs += study_figures(folder) + study_figures(folder, facet="group")
    study = pd.read_parquet(folder / "study.parquet")
    specs.append(figures.distribution(run_folders(folder, study), "eutopia", ["M", "F"]))
    kinds = {s.kind for spec in specs for s in (spec.panels if isinstance(spec, figures.Panels) else [spec])}
    assert {"line", "scatter"} <= kinds and any(isinstance(s, figures.Panels) for s in specs)
    bad = {spec.name: found for spec in specs if (found := overlaps(figures.draw(spec, dpi=60)))}
    assert not bad, bad


def test_facet_by_group_gives_one_panel_per_group_under_one_legend(smoke_report):
    from abm.reports.study import study_figures

    folder, _ = smoke_report
    made = {spec.name: spec for spec in study_figures(folder, facet="group")}
    wealth = made["mean_wealth"]
    assert isinstance(wealth, figures.Panels) and [p.title for p in wealth.panels] == ["group M", "group F"]
    assert [s.label for s in wealth.panels[0].series] == [f"{c} (n=2)" for c in ORDER]
    assert not isinstance(made["wealth_gap"], figures.Panels)  # one series per configuration: as it was
    fig = figures.draw(wealth)
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 4


@pytest.mark.parametrize("kwargs, message", [
    ({"formats": "png,gif"}, "--format: unknown format 'gif'; choose from png, svg, pdf"),
    ({"formats": ""}, "--format: unknown format ''"),
    ({"formats": 3}, "--format: expected formats like png,svg,pdf, got 3"),
    ({"dpi": 10}, "--dpi: expected a whole number from 50 to 1200, got 10"),
    ({"dpi": 99.5}, "--dpi: expected a whole number from 50 to 1200, got 99.5"),
    ({"dpi": True}, "--dpi: expected a whole number"),
    ({"facet": "policy"}, "--facet: unknown facet 'policy'; choose from group"),
])
def test_bad_report_options_are_one_line_before_anything_is_written(tmp_path, kwargs, message):
    from abm.errors import UserError
    from abm.reports import render

    with pytest.raises(UserError) as err:
        render(tmp_path, **kwargs)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert not (tmp_path / "report").exists()


def test_save_writes_each_format_at_the_dpi_asked(tmp_path):
    spec = figures.study_metric(summary_frame(), "mean_wealth", "eutopia")
    first = figures.save(spec, tmp_path, formats=("pdf", "png", "svg"), dpi=72)
    assert first.name == "mean_wealth.pdf" and first.read_bytes().startswith(b"%PDF")
    assert (tmp_path / "mean_wealth.svg").read_text().lstrip().startswith("<?xml")
    from PIL import Image

    small = Image.open(tmp_path / "mean_wealth.png").size
    figures.save(spec, tmp_path, dpi=144)
    large = Image.open(tmp_path / "mean_wealth.png").size
    assert large[0] == pytest.approx(2 * small[0], rel=0.05)


def test_comparison_tables_cover_every_figure_metric_with_a_95_ci():
    from abm.reports.study import ci_cell, final_metrics

    frame = study_frame()
    frame["recall_M"], frame["recall_F"], frame["recall_gap"] = 0.5, 0.25, 0.25
    final, tables = final_metrics(frame)
    shown = {c for _, cols in tables for _, c in cols}
    assert {"wealth_gap", "cumulative_profit", "recall_gap", "recall_M", "selection_gap", "default_F"} <= shown
    assert "tpr_M" not in shown  # the recall's own table shows it
    half = stats.t.ppf(0.975, 1) * np.std([2.0, 4.0], ddof=1) / np.sqrt(2)
    row = final[final["config"] == "a"]
    assert figures.mean_ci(row["wealth_gap"])[2] == pytest.approx(3.0 + half)
    assert ci_cell(3646.2, 140.3, 3, 3) == "3646 ± 140" and ci_cell(0.5, np.nan, 1, 1) == "0.5000"
    assert ci_cell(1.0, 0.5, 2, 3) == "1.000 ± 0.50 (n=2)"


def test_a_run_report_in_svg_only_and_faceted(smoke_report, tmp_path):
    import shutil

    from abm.reports import render

    folder, _ = smoke_report
    run = shutil.copytree(next((folder / "runs").iterdir()), tmp_path / "run")  # the study's runs stay as they are
    out = render(run, formats=["svg"], dpi=50, facet="group")
    assert not list(out.glob("*.png")) and {"mean_wealth.svg", "group_rates.svg", "distribution.svg"} <= \
        {p.name for p in out.glob("*.svg")} and (out / "summary.md").is_file()


def test_a_frontier_legend_lists_the_configurations_first_in_the_study_order():
    spec = figures.frontier(study_frame(), family="eutopia")
    legend = figures.draw(spec).axes[0].get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert [t.split(" (")[0] for t in texts] == ["a", "b", "c", "Pareto front"]


def test_abm_report_takes_format_dpi_and_facet_and_refuses_bad_ones_in_one_line(smoke_report, tmp_path):
    import shutil

    from conftest import call_in_process

    folder, _ = smoke_report
    run = shutil.copytree(next((folder / "runs").iterdir()), tmp_path / "run")
    code, out, err = call_in_process("report", str(run), "--format", "svg,pdf", "--dpi", "60", "--facet", "group")
    assert code == 0, err
    assert (run / "report" / "mean_wealth.svg").is_file() and (run / "report" / "mean_wealth.pdf").is_file()
    for args, needle in ((["--format", "gif"], "--format: unknown format 'gif'"), (["--dpi", "5"], "--dpi: "),
                         (["--facet", "policy"], "--facet: unknown facet 'policy'")):
        code, _, err = call_in_process("report", str(run), *args)
        assert code == 2 and needle in err and err.count("\n") == 1, err
