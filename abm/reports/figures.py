"""Figure specs: what a published figure shows, built from run and study frames, drawn by matplotlib.

A ``FigureSpec`` is plain data: a title, axis labels with units, a caption that says what the
bands are, and ``Series`` (one per configuration and group: x, the mean, its band, n, and the
configuration, policy, setting and group it belongs to, with its colour, dash and marker).
``Panels`` puts several specs in one figure (the paper figures). The builders below make specs
from a run's ``episodes.parquet`` or a study's ``summary.parquet`` / ``study.parquet``;
``draw`` / ``save`` render them with matplotlib (``matplotlib.figure.Figure``, no pyplot, so
concurrent dashboard sessions never share state); ``abm.dashboard.figures.to_altair`` renders the
same specs as interactive Vega-Lite charts.

Conventions, the same in every figure:

- groups on the same axes; in a study, colour = policy (with its parameters), line style = the
  configuration's setting (objective and grid values), marker = group; in a run, colour = group;
- the band of a study curve is the 95% confidence interval of the mean over the seeded runs,
  Student t with n - 1 degrees of freedom (seed 002's intervals); n (runs) is in the legend, and
  n = 1 draws no band;
- legends sit outside the axes, entries in the study's order (the order of the study file's
  entries: the order of ``summary.parquet`` and ``study.parquet``); figures use constrained
  layout, so no title, label or legend overlaps another;
- x is the episode as the data number it, from 0 (the value recorded at the end of episode 0,
  the first); a distribution adds the applicants' initial values at x = -1, marked "start";
- ``save`` writes each figure in the formats asked (``FORMATS``: png, svg, pdf) at ``dpi``;
  ``facet_by_group`` turns a per-group figure into one panel per group.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

FORMATS = ("png", "svg", "pdf")  # what ``save`` writes (``abm report --format``)
DPI = 110  # the PNG resolution unless asked (``abm report --dpi``), within DPI_RANGE
DPI_RANGE = (50, 1200)
FACETS = ("group",)  # ``abm report --facet``: one panel per population group

CI_CAPTION = ("Lines: mean over seeded runs; bands: 95% confidence interval of the mean (Student t, n - 1 d.f.); "
              "n = runs per configuration (n = 1: no band).")
RUN_CAPTION = "One run: no replicates, no confidence band."

POLICY_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                  "#bcbd22", "#17becf",  # matplotlib's tab10, then darker tones for a benchmark's 20 methods
                  "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354",
                  "#756bb1", "#636363")
GROUP_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666",
                 "#1f78b4", "#b15928")
# name -> (matplotlib linestyle, Vega-Lite strokeDash)
DASHES = {"solid": ("-", [1, 0]), "dashed": ((0, (6, 3)), [6, 3]), "dotted": ((0, (1, 2)), [1, 2]),
          "dashdot": ((0, (6, 2, 1, 2)), [6, 2, 1, 2]), "long": ((0, (12, 3)), [12, 3]),
          "dashdotdot": ((0, (6, 2, 1, 2, 1, 2)), [6, 2, 1, 2, 1, 2])}
# name -> (matplotlib marker, Vega-Lite shape)
MARKERS = {"circle": ("o", "circle"), "square": ("s", "square"), "triangle": ("^", "triangle-up"),
           "down": ("v", "triangle-down"), "diamond": ("D", "diamond"), "cross": ("P", "cross"),
           "left": ("<", "triangle-left"), "right": (">", "triangle-right"), "hexagon": ("h", "arrow"),
           "wedge": ("*", "wedge")}

@dataclass(frozen=True)
class Metric:
    """A metric over episodes: its column (``{g}``: one per group), title and y label (with units)."""

    pattern: str
    title: str
    ylabel: str

    @property
    def stem(self) -> str:
        return self.pattern.replace("_{g}", "")

    @property
    def per_group(self) -> bool:
        return "{g}" in self.pattern


METRICS = (
    Metric("mean_wealth_{g}", "mean wealth per group", "mean {wealth}"),
    Metric("wealth_gap", "wealth gap", "mean wealth {g0} - {g1} ({wealth_unit})"),
    Metric("inequality_ratio", "inequality ratio", "wealth growth {g0} / {g1} (1 = parity)"),
    Metric("social_welfare_{g}", "social welfare per group", "(mu_g(t) - mu_g(0)) / t ({wealth_unit} per time unit)"),
    Metric("mean_score_{g}", "mean score per group", "mean {score}"),
    Metric("credit_gap", "credit gap", "1-Wasserstein distance between groups' scores (score points)"),
    Metric("profit", "profit per episode", "profit in the episode ({money})"),
    Metric("cumulative_profit", "cumulative profit", "cumulative profit ({money})"),
    Metric("cumulative_return", "cumulative return", "cumulative return ({money})"),
    Metric("average_return", "average return", "cumulative return / episodes ({money})"),
    Metric("reach_{g}", "reach per group", "share of the group approved in the episode"),
    Metric("recall_{g}", "recall (true-positive rate) per group", "recall tp / (tp + fn), cumulative"),
    Metric("recall_gap", "recall gap", "max - min recall over groups"),
    Metric("cumulative_loans_{g}", "cumulative loans per group", "loans granted so far"),
    Metric("social_burden_{g}", "social burden per group", "mean manipulation cost paid by the admitted (budget)"),
    Metric("intensity_{g}", "Hawkes intensity at episode end", "lambda_g (applications per time unit)"),
    Metric("exact_reward", "exact reward", "<Lambda, R> (exact, principal units)"),
    Metric("exact_dp_gap", "demographic-parity gap (exact)", "offer rate minority - majority"),
    Metric("exact_eo_gap", "equal-opportunity gap (exact)", "qualified offer rate minority - majority"),
)
METRIC_BY_STEM = {m.stem: m for m in METRICS}

# fairness axes of the frontier, in order of preference for the default: (column, badness)
FAIRNESS = (("wealth_gap", "abs"), ("recall_gap", "abs"), ("credit_gap", "abs"), ("exact_dp_gap", "abs"),
            ("exact_eo_gap", "abs"), ("inequality_ratio", "from_one"))
PROFITS = ("cumulative_profit", "cumulative_return", "exact_reward", "exact_discounted_return")


# -- the specs ----------------------------------------------------------------------------------
@dataclass
class Series:
    """One line (or point, or bar set) of a figure, with everything a renderer needs."""

    label: str  # the legend entry, with n where the series has replicates
    x: np.ndarray
    y: np.ndarray
    low: np.ndarray | None = None  # the band (a 95% CI, or the 25-75% quantiles)
    high: np.ndarray | None = None
    outer_low: np.ndarray | None = None  # a second, lighter band (10-90% quantiles)
    outer_high: np.ndarray | None = None
    x_low: np.ndarray | None = None  # scatter: the x interval
    x_high: np.ndarray | None = None
    n: int | None = None  # seeded runs behind the points (the most of any point); None: one run
    group: str | None = None
    config: str | None = None
    policy: str | None = None
    setting: str | None = None
    color: str = POLICY_COLOURS[0]
    dash: str = "solid"
    marker: str = "circle"
    pareto: np.ndarray | None = None  # scatter: which points are Pareto-optimal
    colors: list[str] | None = None  # bar: one colour per category (the category's policy)
    estimate: np.ndarray | None = None  # bar: a second estimate per category, drawn with low/high whiskers

    def has_band(self) -> bool:
        return self.low is not None and bool(np.isfinite(np.asarray(self.low, float)).any())


@dataclass
class FigureSpec:
    """One axes: title, labels with units, what the bands are (caption) and the series."""

    name: str  # file stem
    title: str
    xlabel: str
    ylabel: str
    series: list[Series]
    kind: str = "line"  # line | scatter | bar
    caption: str = ""
    categories: list[str] = field(default_factory=list)  # bar: the x categories
    reference: float | None = None  # a horizontal reference line (parity, zero)
    ylim: tuple[float, float] | None = None
    legend_title: str = ""


@dataclass
class Panels:
    """Several specs in one figure (a paper's panel layout)."""

    name: str
    title: str
    panels: list[FigureSpec]
    ncols: int = 2
    caption: str = ""
    legend_by_config: bool = False  # one entry per configuration, its name alone (not each panel's n and star)


# -- statistics ---------------------------------------------------------------------------------
def t_half_width(std, count) -> np.ndarray:
    """Half-width of the Student-t 95% CI of a mean from the sample std and n; NaN where n < 2."""
    from scipy import stats  # heavy; only figures need it

    std = np.asarray(std, float)
    n = np.asarray(count, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = stats.t.ppf(0.975, np.where(n >= 2, n - 1, np.nan))
        return np.where(n >= 2, t * std / np.sqrt(n), np.nan)


def mean_half(values) -> tuple[float, float, int]:
    """(mean, half-width of its Student-t 95% CI, n) of the finite values (NaN half-width below 2)."""
    x = np.asarray([v for v in np.asarray(values, float) if np.isfinite(v)], float)
    if len(x) == 0:
        return np.nan, np.nan, 0
    return float(x.mean()), float(t_half_width(x.std(ddof=1) if len(x) > 1 else np.nan, len(x))), len(x)


def mean_ci(values) -> tuple[float, float, float, int]:
    """(mean, CI low, CI high, n) of the finite values (Student t, 95%)."""
    mean, half, n = mean_half(values)
    return mean, mean - half, mean + half, n


# -- styles -------------------------------------------------------------------------------------
def bare_policy(policy: str) -> str:
    return str(policy).split("(")[0]


def grid_keys_of(frame: pd.DataFrame) -> list[str]:
    """The grid columns of a summary or study frame: between ``objective`` and the run/episode columns."""
    cols = list(frame.columns)
    if "objective" not in cols:
        return []
    start = cols.index("objective") + 1
    ends = [cols.index(c) for c in ("replicate", "seed", "episode") if c in cols and cols.index(c) >= start]
    return cols[start:min(ends)] if ends else []


def settings_of(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: ``config``, ``policy`` (its label, parameters included) and ``setting``
    (the rest: study group where there are several, objective, grid values)."""
    keys = grid_keys_of(frame)
    first = frame.drop_duplicates("config", keep="first")
    many_groups = "study_groups" in frame.columns and frame["study_groups"].nunique() > 1
    rows = []
    for r in first.to_dict("records"):
        policy = str(r.get("policy", r["config"]))
        parts = []
        if str(r.get("objective", "none")) not in ("none", "None", "nan"):
            parts.append(str(r["objective"]))
        parts += [f"{k.rsplit('.', 1)[-1]}={r[k]}" for k in keys if k in r]
        if many_groups:
            parts.insert(0, str(r["study_groups"]))
        rows.append({"config": str(r["config"]), "policy": policy, "setting": ", ".join(p for p in parts if p) or "-"})
    return pd.DataFrame(rows, columns=["config", "policy", "setting"])


@dataclass
class Style:
    """Colour per policy, dash per setting, marker (study) or colour (run) per group: one per report."""

    policies: list[str]
    settings: list[str]
    groups: list[str]

    @classmethod
    def of(cls, frame: pd.DataFrame | None = None, groups=()) -> Style:
        if frame is None or "config" not in frame.columns:
            return cls([], [], list(groups))
        table = settings_of(frame)
        return cls(list(dict.fromkeys(table["policy"])), list(dict.fromkeys(table["setting"])), list(groups))

    def colour(self, policy: str) -> str:
        name = str(policy)
        if name not in self.policies:
            self.policies.append(name)
        return POLICY_COLOURS[self.policies.index(name) % len(POLICY_COLOURS)]

    def dash(self, setting: str) -> str:
        if setting not in self.settings:
            self.settings.append(setting)
        names = list(DASHES)
        return names[self.settings.index(setting) % len(names)]

    def setting_marker(self, setting: str) -> str:
        self.dash(setting)
        names = list(MARKERS)
        return names[self.settings.index(setting) % len(names)]

    def _group(self, group: str) -> int:
        if group not in self.groups:
            self.groups.append(group)
        return self.groups.index(group)

    def marker(self, group: str) -> str:
        names = list(MARKERS)
        return names[self._group(group) % len(names)]

    def group_colour(self, group: str) -> str:
        return GROUP_COLOURS[self._group(group) % len(GROUP_COLOURS)]


def units(family: str | None) -> dict[str, str]:
    """What the family's state (``Scenario.state``) is and the unit of its profit: its ``Scenario.units`` (a
    family this process cannot load, e.g. a plugin's run read elsewhere: the defaults)."""
    from abm import registry
    from abm.config import ScenarioBase
    from abm.errors import UserError

    try:
        return registry.family_module(family).Scenario.units if isinstance(family, str) else ScenarioBase.units
    except UserError:
        return ScenarioBase.units


def axis_label(metric: Metric, groups: list[str], family: str | None) -> str:
    fill = dict(units(family))
    fill.update(g0=groups[0] if groups else "group 1", g1=groups[1] if len(groups) > 1 else "group 2")
    return metric.ylabel.format(**fill)


def groups_in(columns, suffix: str = "") -> list[str]:
    """Population group names from ``mean_wealth_<g>`` / ``applications_<g>`` / ``recall_<g>`` columns."""
    columns = list(columns)
    for stem in ("mean_wealth_", "applications_", "mean_score_"):
        found = [c[len(stem):len(c) - len(suffix)] for c in columns
                 if c.startswith(stem) and c.endswith(suffix) and c != f"{stem}gap{suffix}"]
        if found:
            return found
    return []


def metrics_in(columns, suffix: str = "") -> list[Metric]:
    """The catalogued metrics a frame has (``<column><suffix>``)."""
    columns = set(columns)
    groups = groups_in(columns, suffix)
    out = []
    for m in METRICS:
        names = [m.pattern.format(g=g) for g in groups] if m.per_group else [m.pattern]
        if any(f"{n}{suffix}" in columns for n in names):
            out.append(m)
    return out


def _n_text(n: int | None) -> str:
    return "" if n is None else f" (n={n})"


# -- metrics over episodes ----------------------------------------------------------------------
def run_metric(episodes: pd.DataFrame, metric: Metric | str, family: str | None = None,
               style: Style | None = None) -> FigureSpec:
    """One metric of one run over its episodes: one line per group (or one line)."""
    metric = METRIC_BY_STEM[metric] if isinstance(metric, str) else metric
    groups = groups_in(episodes.columns)
    style = style or Style([], [], list(groups))
    x = episodes["episode"].to_numpy(float)
    series = []
    for g in (groups if metric.per_group else [None]):
        col = metric.pattern.format(g=g) if g is not None else metric.pattern
        if col not in episodes.columns:
            continue
        series.append(Series(label=str(g) if g is not None else metric.title, x=x,
                             y=episodes[col].to_numpy(float), group=g,
                             color=style.group_colour(g) if g is not None else "#333333",
                             marker=style.marker(g) if g is not None else "circle"))
    return FigureSpec(metric.stem, metric.title, "episode", axis_label(metric, groups, family), series,
                      caption=RUN_CAPTION, legend_title="group" if metric.per_group else "")


def study_metric(summary: pd.DataFrame, metric: Metric | str, family: str | None = None, style: Style | None = None,
                 only_group: str | None = None, x: str = "episode") -> FigureSpec:
    """One metric of a study over episodes: one line per configuration (and group), 95% t-CI band."""
    metric = METRIC_BY_STEM[metric] if isinstance(metric, str) else metric
    groups = groups_in(summary.columns, "_mean")
    style = style or Style.of(summary, groups)
    table = settings_of(summary).set_index("config")
    shown = [only_group] if only_group is not None else groups
    series = []
    for config, rows in summary.groupby("config", sort=False):
        rows = rows.sort_values("episode")
        policy, setting = table.at[config, "policy"], table.at[config, "setting"]
        xs = rows["time_mean"].to_numpy(float) if x == "time" else rows["episode"].to_numpy(float)
        count = rows["count"].to_numpy(float)
        for g in (shown if metric.per_group else [None]):
            col = metric.pattern.format(g=g) if g is not None else metric.pattern
            if f"{col}_mean" not in rows.columns:
                continue
            mean = rows[f"{col}_mean"].to_numpy(float)
            half = t_half_width(rows[f"{col}_std"].to_numpy(float), count)
            n = int(np.nanmax(count)) if len(count) else 0
            name = str(config) if g is None or only_group is not None else f"{config} | {g}"
            series.append(Series(label=name + _n_text(n), x=xs, y=mean, low=mean - half, high=mean + half, n=n,
                                 group=g, config=str(config), policy=policy, setting=setting,
                                 color=style.colour(policy), dash=style.dash(setting),
                                 marker=style.marker(g) if g is not None else "circle"))
    title = metric.title + (f", group {only_group}" if only_group is not None else "")
    return FigureSpec(metric.stem if only_group is None else f"{metric.stem}_{only_group}", title,
                      "time (decisions)" if x == "time" else "episode", axis_label(metric, groups, family), series,
                      caption=CI_CAPTION, legend_title="configuration | group" if metric.per_group and
                      only_group is None else "configuration")


# -- the frontier -------------------------------------------------------------------------------
def fairness_choices(columns) -> list[str]:
    return [c for c, _ in FAIRNESS if c in set(columns)]


def profit_choices(columns) -> list[str]:
    return [c for c in PROFITS if c in set(columns)]


# columns of study.parquet that are numbers but not metrics (a run's identity and clock)
NOT_METRICS = ("replicate", "seed", "episode", "time")


def frontier_metrics(study: pd.DataFrame) -> list[str]:
    """The columns a frontier axis may be (``abm report --frontier-x/--frontier-y``): the study's
    numeric metric columns, in study.parquet's order (not the run's identity, clock or grid values)."""
    skip = {*NOT_METRICS, *grid_keys_of(study)}
    return [str(c) for c in study.columns if c not in skip and pd.api.types.is_numeric_dtype(study[c])
            and not pd.api.types.is_bool_dtype(study[c])]


def final_rows(study: pd.DataFrame) -> pd.DataFrame:
    """Each run's last episode."""
    last = study.groupby("run_id", sort=False)["episode"].transform("max")
    return study[study["episode"] == last].reset_index(drop=True)


def pareto_mask(badness: np.ndarray, value: np.ndarray) -> np.ndarray:
    """True where no other point has badness <= and value >= with one of them strict (NaN: never)."""
    badness, value = np.asarray(badness, float), np.asarray(value, float)
    ok = np.isfinite(badness) & np.isfinite(value)
    out = np.zeros(len(badness), bool)
    for i in np.flatnonzero(ok):
        others = ok & (badness <= badness[i]) & (value >= value[i]) & ((badness < badness[i]) | (value > value[i]))
        out[i] = not others.any()
    return out


def frontier(study: pd.DataFrame, fairness: str | None = None, profit: str | None = None,
             family: str | None = None, style: Style | None = None) -> FigureSpec:
    """Fairness (x) against profit or return (y) at the final episode: one point per configuration,
    95% t-CI whiskers on both axes over its runs, Pareto points marked."""
    fairness = fairness or (fairness_choices(study.columns) or [None])[0]
    profit = profit or (profit_choices(study.columns) or [None])[0]
    if fairness not in study.columns or profit not in study.columns:
        raise KeyError(f"frontier: the study has no {fairness!r} or {profit!r} column")
    rule = dict(FAIRNESS).get(fairness, "abs")
    groups = groups_in(study.columns)
    style = style or Style.of(study, groups)
    table = settings_of(study).set_index("config")
    final = final_rows(study)
    stats = []
    for config, runs in final.groupby("config", sort=False):
        xm, xl, xh, n = mean_ci(runs[fairness])
        ym, yl, yh, _ = mean_ci(runs[profit])
        stats.append((str(config), xm, xl, xh, ym, yl, yh, n))
    bad = np.array([abs(s[1] - 1.0) if rule == "from_one" else abs(s[1]) for s in stats])
    best = pareto_mask(bad, np.array([s[4] for s in stats]))
    series = []
    for (config, xm, xl, xh, ym, yl, yh, n), star in zip(stats, best):
        policy, setting = table.at[config, "policy"], table.at[config, "setting"]
        series.append(Series(label=config + _n_text(n) + (" *" if star else ""), x=np.array([xm]), y=np.array([ym]),
                             low=np.array([yl]), high=np.array([yh]), x_low=np.array([xl]), x_high=np.array([xh]),
                             n=n, config=config, policy=policy, setting=setting, color=style.colour(policy),
                             dash=style.dash(setting), marker=style.setting_marker(setting),
                             pareto=np.array([bool(star)])))
    fm = METRIC_BY_STEM.get(fairness, Metric(fairness, fairness, fairness))
    pm = METRIC_BY_STEM.get(profit, Metric(profit, profit, profit))
    toward = ("|gap - 1|" if rule == "from_one" else "|gap|") if fairness in dict(FAIRNESS) else f"|{fairness}|"
    caption = (f"Final episode. Points: mean over seeded runs; whiskers: 95% confidence intervals (Student t, "
               f"n - 1 d.f.) on both axes; n = runs. * and ringed: Pareto-optimal (no other configuration has a "
               f"smaller {toward} and a larger {pm.title}).")
    return FigureSpec("frontier" if fairness == (fairness_choices(study.columns) or [None])[0] and
                      profit == (profit_choices(study.columns) or [None])[0] else f"frontier_{fairness}_{profit}",
                      f"{pm.title} against {fm.title}", "final " + axis_label(fm, groups, family),
                      "final " + axis_label(pm, groups, family), series, kind="scatter", caption=caption,
                      legend_title="configuration", reference=None)


# -- per-group rates ----------------------------------------------------------------------------
RATES = (  # name, title, y label
    ("selection", "selection rate", "approved / applications, cumulative"),
    ("default", "default rate", "defaults / resolved loans, cumulative"),
    ("tpr", "true-positive rate", "recall tp / (tp + fn), cumulative"),
)


def rate_columns(frame: pd.DataFrame, groups: list[str]) -> pd.DataFrame:
    """Per row of one run's episodes: ``<rate>_<g>`` and ``<rate>_gap`` (max - min over groups) for the
    rates the family records (selection from approvals/applications, default from defaults over
    repayments + defaults, TPR from recall)."""
    out = pd.DataFrame(index=frame.index)
    ep = frame.sort_values("episode")
    for g in groups:
        cum = {c: ep[f"{c}_{g}"].astype(float).cumsum() for c in ("applications", "approvals", "defaults",
                                                                  "repayments") if f"{c}_{g}" in ep.columns}
        with np.errstate(invalid="ignore", divide="ignore"):
            if "applications" in cum and "approvals" in cum:
                out[f"selection_{g}"] = (cum["approvals"] / cum["applications"].where(cum["applications"] > 0))
            if "defaults" in cum:
                resolved = cum["defaults"] + cum["repayments"] if "repayments" in cum else cum.get("approvals")
                if resolved is not None:
                    out[f"default_{g}"] = cum["defaults"] / resolved.where(resolved > 0)
        if f"recall_{g}" in ep.columns:
            out[f"tpr_{g}"] = ep[f"recall_{g}"].astype(float)
        elif f"qualified_offer_rate_{g}" in ep.columns:
            out[f"tpr_{g}"] = ep[f"qualified_offer_rate_{g}"].astype(float)
    for name, _, _ in RATES:
        cols = [f"{name}_{g}" for g in groups if f"{name}_{g}" in out.columns]
        if len(cols) == len(groups) and len(cols) > 1:
            vals = out[cols].to_numpy(float)
            out[f"{name}_gap"] = vals.max(axis=1) - vals.min(axis=1)
    return out.reindex(frame.index)


def rate_frame(frame: pd.DataFrame, groups: list[str]) -> pd.DataFrame:
    """``rate_columns`` of each run of a run's episodes or a study frame, beside the identity columns."""
    if "run_id" not in frame.columns:
        return pd.concat([frame[["episode"]], rate_columns(frame, groups)], axis=1)
    ids = [c for c in frame.columns if c in ("run_id", "config", "study_groups", "policy", "objective", "episode")
           or c in grid_keys_of(frame)]
    parts = [pd.concat([runs[ids], rate_columns(runs, groups)], axis=1)
             for _, runs in frame.groupby("run_id", sort=False)]
    return pd.concat(parts)


def group_rates(frame: pd.DataFrame, family: str | None = None, style: Style | None = None) -> Panels | None:
    """Selection, default and true-positive rates per group (top row) and their gaps (bottom row) over
    episodes: from a run's ``episodes`` (one line per group) or a study's ``study.parquet`` (mean and
    95% t-CI over runs, one line per configuration and group). None when the family records none."""
    groups = groups_in(frame.columns)
    if len(groups) < 1:
        return None
    rates = rate_frame(frame, groups)
    study = "run_id" in frame.columns
    style = style or (Style.of(frame, groups) if study else Style([], [], list(groups)))
    table = None
    top, bottom = [], []
    for name, title, ylabel in RATES:
        per_group = [g for g in groups if f"{name}_{g}" in rates.columns]
        if not per_group:
            continue
        top.append(FigureSpec(f"{name}_rate", f"{title} per group", "episode", ylabel,
                              _rate_series(rates, [(f"{name}_{g}", g) for g in per_group], study, style, table),
                              caption=CI_CAPTION if study else RUN_CAPTION,
                              legend_title="configuration | group" if study else "group"))
        if f"{name}_gap" in rates.columns:
            bottom.append(FigureSpec(f"{name}_gap", f"{title} gap", "episode", f"max - min {title} over groups",
                                     _rate_series(rates, [(f"{name}_gap", None)], study, style, table),
                                     caption=CI_CAPTION if study else RUN_CAPTION, reference=0.0,
                                     legend_title="configuration" if study else ""))
    if not top:
        return None
    panels = top + bottom
    return Panels("group_rates", "Per-group rates and their gaps over episodes", panels, ncols=len(top),
                  caption=CI_CAPTION if study else RUN_CAPTION)


def over_runs(frame: pd.DataFrame, column: str, style: Style, group: str | None = None, x: str = "episode",
              label=None) -> list[Series]:
    """One series per configuration of a per-run frame (``study.parquet`` rows, or any frame with
    ``config, run_id, episode`` and ``column``): the mean over its runs at each episode and the 95%
    Student-t band. ``x``: ``episode`` (as numbered in the data, from 0) or ``time`` (the mean end time)."""
    table = settings_of(frame).set_index("config")
    out = []
    for config, rows in frame.groupby("config", sort=False):
        policy, setting = table.at[config, "policy"], table.at[config, "setting"]
        agg = rows.groupby("episode").agg(mean=(column, "mean"), std=(column, "std"), count=(column, "count"),
                                          time=("time", "mean") if "time" in rows.columns else (column, "size"))
        half = t_half_width(agg["std"].to_numpy(float), agg["count"].to_numpy(float))
        mean = agg["mean"].to_numpy(float)
        n = int(agg["count"].max()) if len(agg) else 0
        name = label(str(config)) if label else (str(config) if group is None else f"{config} | {group}")
        xs = agg["time"].to_numpy(float) if x == "time" else agg.index.to_numpy(float)
        out.append(Series(label=name + _n_text(n), x=xs, y=mean, low=mean - half, high=mean + half, n=n, group=group,
                          config=str(config), policy=policy, setting=setting, color=style.colour(policy),
                          dash=style.dash(setting), marker=style.marker(group) if group is not None else "circle"))
    return out


def _rate_series(rates: pd.DataFrame, columns: list[tuple[str, str | None]], study: bool, style: Style,
                 table: pd.DataFrame | None) -> list[Series]:
    out = []
    if not study:
        x = rates["episode"].to_numpy(float)
        for col, g in columns:
            out.append(Series(label=str(g) if g is not None else "gap", x=x, y=rates[col].to_numpy(float), group=g,
                              color=style.group_colour(g) if g is not None else "#333333",
                              marker=style.marker(g) if g is not None else "circle"))
        return out
    series = {}
    for col, g in columns:  # configuration by configuration, its groups together
        for s in over_runs(rates, col, style, group=g):
            series.setdefault(s.config, []).append(s)
    return [s for parts in series.values() for s in parts]


# -- training ------------------------------------------------------------------------------------
TRAINING_CAPTION = ("One training run: each point is a scenario episode a training world finished, in the order "
                    "they ended (with K worlds, K episodes end at about the same time); omega: after each "
                    "dynamics phase.")


def _training_rows(path: Path) -> pd.DataFrame | None:
    try:
        rows = pd.read_csv(path)
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError):  # absent, empty or damaged
        return None
    return rows if len(rows) else None


def training_curve(folder: str | Path, family: str | None = None) -> Panels | None:
    """What a deep lender's training did, from its run folder's ``policy/training.csv``: the return
    and each group's recall and approvals per training episode; with ``policy/bisimulator.csv`` of
    the full variant, omega over training decisions. None when the run kept no training curve."""
    policy = Path(folder) / "policy"
    rows = _training_rows(policy / "training.csv")
    if rows is None:
        return None
    groups = groups_in(rows.columns)
    style = Style([], [], list(groups))
    x = np.arange(1, len(rows) + 1, dtype=float)
    money = units(family)["money"]
    panels = []
    if "return" in rows.columns or "profit" in rows.columns:
        col = "return" if "return" in rows.columns else "profit"
        panels.append(FigureSpec("training_return", f"{col} per training episode", "training episodes finished",
                                 f"{col} in the episode ({money})",
                                 [Series(label=col, x=x, y=rows[col].to_numpy(float), color="#333333")],
                                 caption=TRAINING_CAPTION))
    for stem, title, ylabel in (("recall_", "recall per group", "recall tp / (tp + fn), cumulative in the episode"),
                                ("approvals_", "approvals per group", "approvals in the episode")):
        series = [Series(label=str(g), x=x, y=rows[f"{stem}{g}"].to_numpy(float), group=g,
                         color=style.group_colour(g), marker=style.marker(g))
                  for g in groups if f"{stem}{g}" in rows.columns]
        if series:
            panels.append(FigureSpec(f"training_{stem.rstrip('_')}", f"{title} over training",
                                     "training episodes finished", ylabel, series, caption=TRAINING_CAPTION,
                                     legend_title="group"))
    bisim = _training_rows(policy / "bisimulator.csv")
    if bisim is not None and "j_dyn" in bisim.columns:
        phases = bisim[bisim["j_dyn"].notna()]
        skip = {"iteration", "decisions", "j_rew_before", "j_rew_after", "j_dyn"}
        omega = [c for c in phases.columns if c not in skip]
        xs = phases["decisions"].to_numpy(float)
        series = [Series(label=c, x=xs, y=phases[c].to_numpy(float), color=POLICY_COLOURS[k % len(POLICY_COLOURS)])
                  for k, c in enumerate(omega)]
        if series:
            panels.append(FigureSpec("training_omega", "omega (the agent's observation dynamics)",
                                     "training decisions", "omega", series, caption=TRAINING_CAPTION,
                                     legend_title="field and group"))
    if not panels:
        return None
    return Panels("training", "What training did (policy/training.csv)", panels, ncols=min(2, len(panels)),
                  caption=TRAINING_CAPTION)


# -- distributions over time --------------------------------------------------------------------
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def state_paths(folder: str | Path, family: str | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """(groups per applicant, state matrix applicants x (episodes + 1)) of a run folder of ``family``:
    column 0 the initial state (``initial_<state>``: wealth, score ...), column e + 1 the value at the
    end of episode e, from the last event of each applicant in each episode (``<state>_after``,
    carried forward). None without an event log."""
    import pyarrow.parquet as pq

    from abm.runner import family_state, legacy_state_names

    folder = Path(folder)
    if not (folder / "events.parquet").is_file() or not (folder / "agents.parquet").is_file():
        return None
    state = family_state(family, folder)
    events_names = pq.read_schema(folder / "events.parquet").names
    if f"{state}_after" not in events_names and not legacy_state_names(state, events_names):
        state = family_state(None, folder)  # a run of another family (a study across environments)
    initial, after = f"initial_{state}", f"{state}_after"
    initial = legacy_state_names(state, pq.read_schema(folder / "agents.parquet").names).get(initial, initial)
    after = legacy_state_names(state, events_names).get(after, after)
    agents = pq.read_table(folder / "agents.parquet", columns=["agent_id", "group", initial]).to_pandas()
    n_ep = pq.read_metadata(folder / "episodes.parquet").num_rows
    ev = pq.read_table(folder / "events.parquet", columns=["time", "episode", "agent_id", after]).to_pandas()
    ev = ev[np.isfinite(ev[after].to_numpy(float))]
    if not ev["time"].is_monotonic_increasing:
        ev = ev.sort_values("time", kind="stable")
    last = ev.groupby(["agent_id", "episode"], sort=False)[after].last()
    grid = np.full((len(agents), n_ep + 1), np.nan)
    grid[:, 0] = agents[initial].to_numpy(float)
    aid = last.index.get_level_values(0).to_numpy(int)
    epi = last.index.get_level_values(1).to_numpy(int)
    keep = (epi >= 0) & (epi < n_ep) & (aid >= 0) & (aid < len(agents))
    grid[aid[keep], epi[keep] + 1] = last.to_numpy(float)[keep]
    grid = pd.DataFrame(grid).ffill(axis=1).to_numpy(float)
    return agents["group"].astype(str).to_numpy(), grid


def distribution(runs: dict[str, list[str | Path]], family: str | None = None, groups: list[str] | None = None,
                 max_panels: int = 12) -> Panels | None:
    """Quantile bands of each group's state (wealth, score ...) over episodes, one panel per configuration
    (applicants of all its runs pooled): median line, 25-75% band, 10-90% lighter band."""
    panels = []
    style = Style([], [], list(groups or []))
    for config, folders in list(runs.items())[:max_panels]:
        paths = [p for p in (state_paths(f, family) for f in folders) if p is not None]
        if not paths:
            continue
        width = min(p[1].shape[1] for p in paths)
        who = np.concatenate([p[0] for p in paths])
        values = np.concatenate([p[1][:, :width] for p in paths])
        series = []
        for g in dict.fromkeys(who):
            q = np.nanquantile(values[who == g], QUANTILES, axis=0)
            series.append(Series(label=f"{g} (median)", x=np.arange(-1, width - 1, dtype=float), y=q[2],
                                 low=q[1], high=q[3],
                                 outer_low=q[0], outer_high=q[4], n=len(paths), group=str(g), config=config,
                                 color=style.group_colour(str(g)), marker=style.marker(str(g))))
        pooled = f", {len(paths)} runs pooled" if len(paths) > 1 else ""
        panels.append(FigureSpec(f"distribution_{len(panels)}", f"{config}{pooled}", "episode (start: initial values)",
                                 units(family)["score"], series, legend_title="group"))
    if not panels:
        return None
    caption = ("Each group's applicants: median (line), 25-75% (band) and 10-90% (light band) of the "
               "value at each episode end, from the event log (applicants of a configuration's runs pooled).")
    if len(runs) > max_panels:
        caption += f" First {max_panels} of {len(runs)} configurations."
    for p in panels:
        p.caption = caption
    return Panels("distribution", f"Distribution of {units(family)['score']} per group over episodes", panels,
                  ncols=min(3, len(panels)), caption=caption)


# -- matplotlib ---------------------------------------------------------------------------------
def _draw_axes(ax, spec: FigureSpec, legend: bool = True) -> None:
    if spec.kind == "bar":
        _draw_bars(ax, spec)
    for s in spec.series if spec.kind != "bar" else ():
        ls = DASHES[s.dash][0]
        mk = MARKERS[s.marker][0]
        if spec.kind == "scatter":
            xerr = None if s.x_low is None else np.abs(np.vstack([s.x - s.x_low, s.x_high - s.x]))
            yerr = None if s.low is None else np.abs(np.vstack([s.y - s.low, s.high - s.y]))
            ax.errorbar(s.x, s.y, xerr=np.nan_to_num(xerr) if xerr is not None else None,
                        yerr=np.nan_to_num(yerr) if yerr is not None else None, fmt=mk, color=s.color, ms=7,
                        capsize=3, lw=1.1, label=s.label)
            if s.pareto is not None and s.pareto.any():
                ax.scatter(s.x[s.pareto], s.y[s.pareto], s=230, facecolors="none", edgecolors="black", lw=1.3,
                           zorder=4)
            continue
        alpha = 0.2 if len(spec.series) <= 4 else 0.1
        every = max(1, len(s.x) // 12)
        line, = ax.plot(s.x, s.y, color=s.color, linestyle=ls, lw=1.5, label=s.label,
                        marker=mk if (s.group is not None or len(s.x) <= 30) else None, ms=4, markevery=every)
        if s.has_band():
            ax.fill_between(s.x, s.low, s.high, color=s.color, alpha=alpha, lw=0)
        if s.outer_low is not None:
            ax.fill_between(s.x, s.outer_low, s.outer_high, color=s.color, alpha=0.08, lw=0)
    if spec.kind == "scatter":
        _pareto_line(ax, spec)
    if spec.reference is not None:
        ax.axhline(spec.reference, color="#999999", lw=0.8, zorder=0)
    if spec.ylim is not None:
        ax.set_ylim(*spec.ylim)
    ax.set_title(textwrap.fill(spec.title, 46 if legend else 40), fontsize=10)  # a panel's title fits its width
    ax.set_xlabel(spec.xlabel)
    if spec.xlabel.startswith("episode"):
        from matplotlib.ticker import FuncFormatter, MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if "start" in spec.xlabel:  # a distribution: x = -1 holds the initial values
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: "start" if v == -1 else f"{v:g}"))
    ax.set_ylabel(textwrap.fill(spec.ylabel, 42), fontsize=8.5)
    ax.grid(alpha=0.25, lw=0.6)
    if legend and spec.series:
        handles, labels = _legend_entries(ax, spec)
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=7.5,
                  title=spec.legend_title or None, title_fontsize=8, frameon=False)


def _legend_entries(ax, spec: FigureSpec) -> tuple[list, list[str]]:
    """The axes' legend entries in the spec's order (the study's), extras (the Pareto front) after."""
    rank = {s.label: k for k, s in enumerate(spec.series)}
    pairs = sorted(zip(*ax.get_legend_handles_labels()), key=lambda hl: rank.get(hl[1], len(rank)))
    return [h for h, _ in pairs], [label for _, label in pairs]


def _pareto_line(ax, spec: FigureSpec) -> None:
    pts = [(float(s.x[0]), float(s.y[0])) for s in spec.series if s.pareto is not None and s.pareto[0]]
    if len(pts) > 1:
        pts.sort(key=lambda p: abs(p[0]))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color="black", lw=0.8, ls=":", zorder=1,
                label="Pareto front")


def _draw_bars(ax, spec: FigureSpec) -> None:
    width = 0.8 / max(len(spec.series), 1)
    hatches = ("", "//", "..", "xx", "\\\\", "oo")
    pos = np.arange(len(spec.categories), dtype=float)
    for j, s in enumerate(spec.series):
        off = pos - 0.4 + width * (j + 0.5)
        ax.bar(off, s.y, width=width * 0.92, color=s.colors or s.color, hatch=hatches[j % len(hatches)],
               edgecolor="white", label=s.label, alpha=0.9)
        if s.estimate is not None:
            err = np.abs(np.vstack([s.estimate - s.low, s.high - s.estimate])) if s.low is not None else None
            ax.errorbar(off, s.estimate, yerr=None if err is None else np.nan_to_num(err), fmt="D", color="black",
                        ms=3.5, capsize=2.5, lw=0.9)
    ax.set_xticks(pos)
    ax.set_xticklabels(spec.categories, rotation=20, ha="right", fontsize=8)


def draw(spec: FigureSpec | Panels, dpi: int = DPI):
    """The spec as a ``matplotlib.figure.Figure`` in constrained layout (titles, labels and legends
    never overlap; the caption sits below the figure)."""
    from matplotlib.figure import Figure

    if isinstance(spec, FigureSpec):
        fig = Figure(figsize=(7.2, 3.9), dpi=dpi, layout="constrained")
        _draw_axes(fig.add_subplot(1, 1, 1), spec)
        if spec.caption:
            fig.text(0.01, -0.02, textwrap.fill(spec.caption, 130), ha="left", va="top", fontsize=7, color="#444444")
        return fig
    ncols = max(1, spec.ncols)
    nrows = math.ceil(len(spec.panels) / ncols)
    longest = max((len(s.label) for p in spec.panels for s in p.series), default=0)
    legend_width = 0.6 + 0.057 * longest if longest else 0.0  # inches beside the panels (7.5 pt text)
    fig = Figure(figsize=(4.4 * ncols + legend_width, 3.2 * nrows), dpi=dpi, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    handles: dict[str, object] = {}
    for k, ax in enumerate(axes.ravel()):
        if k >= len(spec.panels):
            ax.set_visible(False)
            continue
        _draw_axes(ax, replace(spec.panels[k], caption=""), legend=False)
        key_of = {s.label: s.config or s.label for s in spec.panels[k].series}
        for h, label in zip(*_legend_entries(ax, spec.panels[k])):
            handles.setdefault(key_of.get(label, label) if spec.legend_by_config else label, h)
    # over the panels, from their left edge (centred, a long title ran into the legend beside them)
    fig.suptitle(textwrap.fill(spec.title, 46 * ncols), x=0.01, ha="left", fontsize=11)
    if handles:  # one legend for every panel, outside the data, beside the panels
        title = spec.panels[0].legend_title if spec.panels else ""
        fig.legend(list(handles.values()), list(handles), loc="outside right upper", fontsize=7.5, frameon=False,
                   title=title or None, title_fontsize=8)
    if spec.caption:
        fig.text(0.01, -0.01, textwrap.fill(spec.caption, 40 * ncols + 60), ha="left", va="top", fontsize=7,
                 color="#444444")
    return fig


def output_options(formats=("png",), dpi: int = DPI, facet: str | None = None) -> tuple[tuple[str, ...], int,
                                                                                     str | None]:
    """``(formats, dpi, facet)`` checked: formats a comma-separated string or a sequence of
    ``FORMATS`` (at least one), dpi a whole number in ``DPI_RANGE``, facet None or one of
    ``FACETS``; anything else is a one-line UserError naming the flag (``abm report --format``,
    ``--dpi``, ``--facet``)."""
    from abm.errors import UserError

    items = formats.split(",") if isinstance(formats, str) else list(formats) if isinstance(formats, (list, tuple)) \
        else None
    if items is None or not all(isinstance(f, str) for f in items):
        raise UserError(f"--format: expected formats like png,svg,pdf, got {formats!r}")
    names = list(dict.fromkeys(f.strip().lower().lstrip(".") for f in items if f.strip()))
    bad = [f for f in names if f not in FORMATS]
    if bad or not names:
        raise UserError(f"--format: unknown format {bad[0] if bad else formats!r}; choose from {', '.join(FORMATS)}")
    low, high = DPI_RANGE
    if isinstance(dpi, bool) or not isinstance(dpi, (int, np.integer)) or not low <= dpi <= high:
        raise UserError(f"--dpi: expected a whole number from {low} to {high}, got {dpi!r}")
    if facet is not None and facet not in FACETS:
        raise UserError(f"--facet: unknown facet {facet!r}; choose from {', '.join(FACETS)}")
    return tuple(names), int(dpi), facet


def save(spec: FigureSpec | Panels, folder: str | Path, name: str | None = None, formats=("png",),
         dpi: int = DPI) -> Path:
    """Draw ``spec`` into ``folder/<name or spec.name>.<format>`` for each of ``formats`` (legends and
    caption kept in the picture; ``dpi`` sets a PNG's resolution); the first file's path."""
    formats, dpi, _ = output_options(formats, dpi)
    fig = draw(spec, dpi)
    paths = [Path(folder) / f"{name or spec.name}.{fmt}" for fmt in formats]
    for path, fmt in zip(paths, formats):
        # no creation date in a PDF or SVG: the same figure gives the same file
        fig.savefig(path, format=fmt, dpi=dpi, bbox_inches="tight",
                    metadata={"CreationDate": None} if fmt == "pdf" else {"Date": None} if fmt == "svg" else None)
    return paths[0]


def facet_by_group(spec: FigureSpec) -> FigureSpec | Panels:
    """A figure with per-group series as one panel per population group (each panel's lines: the
    configurations, in the same colours and dashes), under one legend; a figure without groups as
    it is."""
    groups = list(dict.fromkeys(s.group for s in spec.series if s.group is not None))
    if len(groups) < 2:
        return spec
    suffix = " | {g}"
    panels = []
    for g in groups:
        series = [replace(s, label=s.label.replace(suffix.format(g=g), "")) for s in spec.series if s.group == g]
        panels.append(replace(spec, name=f"{spec.name}_{g}", title=f"group {g}", series=series, caption="",
                              legend_title="configuration" if spec.legend_title.endswith("| group") else
                              spec.legend_title))
    return Panels(spec.name, spec.title, panels, ncols=min(3, len(panels)), caption=spec.caption)


def png(spec: FigureSpec | Panels, dpi: int = 90) -> bytes:
    import io

    buffer = io.BytesIO()
    draw(spec, dpi).savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()
