"""The dashboard's figures: the report's figure specs as interactive Vega-Lite charts, and two
server-drawn matplotlib pictures (an applicant's timeline, the Hawkes trace).

``to_altair(spec)`` renders an ``abm.reports.figures`` spec (the same object ``abm report``
draws with matplotlib) as an Altair chart: hover a point for its values (a tooltip, and the
page's ``on_hover``), drag to pan, wheel to zoom, click a legend entry to bring one series
forward. ``VegaChart`` shows one in the page with the Vega, Vega-Lite and Vega-Embed builds
that the ``solara-assets`` wheel ships (served from Solara's own CDN folder), so it works
offline; Solara's ``FigureAltair`` asks the internet CDN for them instead.

The matplotlib pictures use ``matplotlib.figure.Figure`` (not pyplot), so concurrent page
sessions never share pyplot's global figure state.
"""

from __future__ import annotations

import functools
import io
import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from abm.reports.figures import DASHES, MARKERS, FigureSpec, Panels

# how each event kind is marked on an applicant's state path (wealth, score ...)
KIND_STYLE = {
    "apply": dict(marker="o", color="#1f77b4", label="application"),
    "approve": dict(marker="^", color="#2ca02c", label="approved"),
    "reject": dict(marker="x", color="#d62728", label="rejected"),
    "repay": dict(marker="*", color="#9467bd", label="repaid"),
    "default": dict(marker="v", color="#000000", label="defaulted"),
    "admit": dict(marker="s", color="#17becf", label="admitted"),
    "manipulate": dict(marker="D", color="#ff7f0e", label="manipulated"),
    "leave": dict(marker="P", color="#7f7f7f", label="left"),
}
VEGA_LITE_SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"  # the bundled Vega-Lite is 5.x


# -- interactive charts from figure specs -------------------------------------------------------
def chart_data(spec: FigureSpec) -> pd.DataFrame:
    """The spec's series in long form: one row per point (what the chart and its tooltips read)."""
    rows = []
    for s in spec.series:
        n = len(s.x)

        def col(values, n=n):
            return np.full(n, np.nan) if values is None else np.asarray(values, float)

        part = pd.DataFrame({"series": s.label, "x": col(s.x), "y": col(s.y), "low": col(s.low), "high": col(s.high),
                             "outer_low": col(s.outer_low), "outer_high": col(s.outer_high),
                             "x_low": col(s.x_low), "x_high": col(s.x_high),
                             "n": s.n if s.n is not None else 1, "group": s.group or "", "config": s.config or "",
                             "pareto": s.pareto if s.pareto is not None else np.zeros(n, bool)})
        if spec.kind == "bar":
            part["category"] = spec.categories[:n]
            part["estimate"] = col(s.estimate)
        rows.append(part)
    frame = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["series", "x", "y"])
    return frame.replace([np.inf, -np.inf], np.nan)


def _scales(spec: FigureSpec):
    import altair as alt

    labels = [s.label for s in spec.series]
    colour = alt.Scale(domain=labels, range=[s.color for s in spec.series])
    dash = alt.Scale(domain=labels, range=[DASHES[s.dash][1] for s in spec.series])
    shape = alt.Scale(domain=labels, range=[MARKERS[s.marker][1] for s in spec.series])
    return colour, dash, shape


def to_altair(spec: FigureSpec | Panels, width: int = 440, height: int = 260):
    """The spec as an interactive Altair chart (a ``Panels`` spec: its panels side by side)."""
    import altair as alt

    if isinstance(spec, Panels):
        first = [s.label for s in spec.panels[0].series] if spec.panels else []
        charts = [_chart(p, width=max(220, width * 2 // max(2, spec.ncols)), height=height * 4 // 5,
                         legend=k == 0 or [s.label for s in p.series] != first, index=k)
                  for k, p in enumerate(spec.panels)]
        return alt.concat(*charts, columns=max(1, spec.ncols)).properties(
            title=alt.TitleParams(spec.title, subtitle=[spec.caption] if spec.caption else [])).resolve_scale(
            color="independent", strokeDash="independent", shape="independent").resolve_legend(
            color="independent", strokeDash="independent", shape="independent")
    return _chart(spec, width, height, legend=True, caption=True)


def _chart(spec: FigureSpec, width: int, height: int, legend: bool = True, caption: bool = False, index: int = 0):
    import altair as alt

    data = chart_data(spec)
    colour, dash, shape = _scales(spec)
    pick = alt.selection_point(fields=["series"], bind="legend", name=f"pick{index}")
    zoom = alt.selection_interval(bind="scales", name=f"zoom{index}")
    axis = alt.Axis(tickMinStep=1, format="d") if spec.xlabel.startswith("episode") else alt.Axis()
    x = alt.X("x:Q", title=spec.xlabel, scale=alt.Scale(zero=False), axis=axis)
    y = alt.Y("y:Q", title=spec.ylabel, scale=alt.Scale(zero=False, domain=list(spec.ylim)) if spec.ylim else
              alt.Scale(zero=False))
    one = len(spec.series) == 1 and spec.series[0].group is None  # a lone series needs no legend
    symbols = {} if spec.kind == "scatter" else {"symbolType": "stroke", "symbolStrokeWidth": 2.2}
    legend_spec = alt.Legend(title=spec.legend_title or None, orient="right", labelLimit=420, symbolOpacity=1.0,
                             **symbols) if legend and not one else None
    fade = alt.condition(pick, alt.value(1.0), alt.value(0.15))
    band_fade = alt.condition(pick, alt.value(0.18), alt.value(0.03))
    tips = [alt.Tooltip("series:N", title="series"), alt.Tooltip("x:Q", title=spec.xlabel, format=".4g"),
            alt.Tooltip("y:Q", title="value", format=".4g"), alt.Tooltip("low:Q", title="band low", format=".4g"),
            alt.Tooltip("high:Q", title="band high", format=".4g"), alt.Tooltip("n:Q", title="n (runs)")]
    base = alt.Chart(data)
    colour_enc = alt.Color("series:N", scale=colour, legend=legend_spec)
    if spec.kind == "bar":
        layers = [base.mark_bar().encode(x=alt.X("category:N", title=spec.xlabel, sort=spec.categories),
                                         xOffset="series:N", y=alt.Y("y:Q", title=spec.ylabel),
                                         color=colour_enc, opacity=fade,
                                         tooltip=[alt.Tooltip("category:N"), *tips]).add_params(pick)]
    elif spec.kind == "scatter":
        tips += [alt.Tooltip("x_low:Q", title="x CI low", format=".4g"),
                 alt.Tooltip("x_high:Q", title="x CI high", format=".4g"), alt.Tooltip("pareto:N", title="Pareto")]
        layers = [
            base.mark_rule().encode(x=alt.X("x_low:Q", title=spec.xlabel, scale=alt.Scale(zero=False)), x2="x_high:Q",
                                    y="y:Q", color=colour_enc, opacity=fade),
            base.mark_rule().encode(x="x:Q", y=alt.Y("low:Q", title=spec.ylabel, scale=alt.Scale(zero=False)),
                                    y2="high:Q", color=colour_enc, opacity=fade),
            base.transform_filter("datum.pareto").mark_point(size=380, filled=False, color="black").encode(x=x, y=y),
            base.mark_point(size=90, filled=True).encode(x=x, y=y, color=colour_enc,
                                                         shape=alt.Shape("series:N", scale=shape, legend=legend_spec),
                                                         opacity=fade, tooltip=tips).add_params(pick, zoom),
        ]
    else:
        dash_enc = alt.StrokeDash("series:N", scale=dash, legend=legend_spec)
        layers = []
        if data["outer_low"].notna().any():
            layers.append(base.mark_area(opacity=0.08).encode(x=x, y="outer_low:Q", y2="outer_high:Q",
                                                              color=colour_enc))
        if data["low"].notna().any():
            layers.append(base.mark_area().encode(x=x, y="low:Q", y2="high:Q", opacity=band_fade,
                                                  color=colour_enc))
        layers.append(base.mark_line(strokeWidth=1.8).encode(x=x, y=y, color=colour_enc, strokeDash=dash_enc,
                                                            opacity=fade, detail="series:N"))
        # points: visible from the first episode on (a one-point line draws nothing), hover targets
        layers.append(base.mark_point(filled=True, size=36).encode(
            x=x, y=y, color=colour_enc,
            shape=alt.Shape("series:N", scale=shape, legend=legend_spec), opacity=fade,
            tooltip=tips).add_params(pick, zoom))
    if spec.reference is not None:
        layers.append(alt.Chart(pd.DataFrame({"ref": [spec.reference]})).mark_rule(color="#999999").encode(
            y="ref:Q"))
    title = alt.TitleParams(spec.title, subtitle=[spec.caption] if caption and spec.caption else [],
                            subtitleFontSize=10, anchor="start")
    return alt.layer(*layers).properties(width=width, height=height, title=title)


def vega_spec(spec: FigureSpec | Panels, **size) -> dict:
    """The Vega-Lite JSON the page receives (schema pinned to the bundled 5.x build)."""
    out = to_altair(spec, **size).to_dict()
    out["$schema"] = VEGA_LITE_SCHEMA
    return out


def _bundled(name: str, fallback: str) -> str:
    """``name@version/build/name.min.js`` of the copy in Solara's asset folder (else the CDN name)."""
    from pathlib import Path

    from solara.server import settings

    found = sorted(Path(settings.assets.proxy_cache_dir).glob(f"{name}@*/build/{name}.min.js"))
    return f"{found[-1].parent.parent.name}/build/{name}.min.js" if found else fallback


VEGA_TEMPLATE = """
<template><div><div ref="plotElement" class="abm-vega"></div></div></template>
<script>
module.exports = {
    mounted() { this.plot(); },
    watch: { spec() { this.plot(); } },
    methods: {
        assetBase() {
            if (window.solara && window.solara.cdn) { return window.solara.cdn; }
            let base = document.body.dataset.baseUrl || document.baseURI;
            if (!base.endsWith('/')) { base += '/'; }
            return base + '_solara/cdn';
        },
        load() {
            if (!this.loading) {
                this.loading = new Promise((resolve, reject) => {
                    const go = () => {
                        window.requirejs.config({paths: {
                            'abm-vega': `${this.assetBase()}/VEGA`, 'abm-vega-lite': `${this.assetBase()}/VEGA_LITE`,
                            'abm-vega-embed': `${this.assetBase()}/VEGA_EMBED`}, map: {'*': {
                            'vega': 'abm-vega', 'vega-lite': 'abm-vega-lite'}}});
                        window.requirejs(['abm-vega', 'abm-vega-lite', 'abm-vega-embed'],
                                         (v, vl, embed) => resolve(embed), reject);
                    };
                    if (window.requirejs) { go(); return; }
                    const script = document.createElement('script');
                    script.src = `${this.assetBase()}/REQUIRE`;
                    script.onload = go;
                    script.onerror = reject;
                    document.head.appendChild(script);
                });
            }
            return this.loading;
        },
        async plot() {
            const embed = await this.load();
            const { view } = await embed(this.$refs.plotElement, this.spec, {actions: false, renderer: 'svg'});
            if (this.listen_to_hover) {
                view.addEventListener('mouseover', (event, item) => {
                    if (item && item.datum && item.datum.series !== undefined) { this.altair_hover(item.datum); }
                });
            }
        }
    }
}
</script>
"""


@functools.cache
def _widget_class():
    import traitlets
    from solara.widgets import VegaLite

    template = (VEGA_TEMPLATE.replace("VEGA_LITE", _bundled("vega-lite", "vega-lite@5/build/vega-lite.min.js")
                                      .removesuffix(".js"))
                .replace("VEGA_EMBED", _bundled("vega-embed", "vega-embed@6/build/vega-embed.min.js")
                         .removesuffix(".js"))
                .replace("VEGA", _bundled("vega", "vega@5/build/vega.min.js").removesuffix(".js"))
                .replace("REQUIRE", "requirejs@2.3.6/require.js"))

    class LocalVegaLite(VegaLite):
        """Solara's VegaLite widget, loading the Vega builds that ship with solara-assets."""

        template_file = None

        @traitlets.default("template")
        def _template(self):
            return template

    return LocalVegaLite


def VegaChart(spec: dict, on_hover=None, classes: list[str] | None = None):
    """A Vega-Lite chart element (``spec`` from ``vega_spec``); ``on_hover(datum)`` for a hovered point."""
    import solara

    widget = _widget_class().element(spec=spec, on_hover=on_hover, listen_to_hover=on_hover is not None)
    return solara.Div(children=[widget], classes=["abm-chart", *(classes or [])])


def describe_point(datum: dict | None) -> str:
    """A hovered point in words (the page's line under a chart)."""
    if not datum:
        return ""

    def num(key):
        value = datum.get(key)
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)

    text = f"{datum.get('series', '')}: x = {num('x'):.4g}, value = {num('y'):.4g}" if num('x') is not None and \
        num('y') is not None else str(datum.get("series", ""))
    if num("low") is not None and num("high") is not None:
        text += f" (band {num('low'):.4g} to {num('high'):.4g})"
    return text


# -- server-drawn pictures ----------------------------------------------------------------------
def _figure(width: float = 6.0, height: float = 3.2, right: float = 0.97) -> tuple[Figure, object]:
    fig = Figure(figsize=(width, height), dpi=90)
    # fixed margins: tight_layout would cost more than drawing the figure
    fig.subplots_adjust(left=0.11, right=right, bottom=0.15, top=0.9)
    return fig, fig.add_subplot(1, 1, 1)


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes (what the page receives)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def timeline(path: pd.DataFrame, events: pd.DataFrame, agent_id: int, state: str = "wealth") -> Figure:
    """An applicant's state (``path``: time, <state>) over time, each application, decision and
    outcome marked at its ``<state>_after``."""
    fig, ax = _figure(11.0, 3.6, right=0.84)
    ax.step(path["time"], path[state], where="post", color="#444444", lw=1.1, label=state)
    for kind, style in KIND_STYLE.items():
        rows = events[events["kind"] == kind]
        if len(rows):
            ax.scatter(rows["time"], rows[f"{state}_after"], s=28, zorder=3, marker=style["marker"],
                       color=style["color"], label=f"{style['label']} ({len(rows)})")
    ax.set_xlabel("time")
    ax.set_ylabel(state)
    ax.set_title(f"applicant {agent_id}", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def intensity(trace: pd.DataFrame, episode_ends: pd.DataFrame) -> Figure:
    """Group Hawkes intensities over time; dots: ``intensity_<g>`` recorded at episode ends."""
    fig, ax = _figure(9.0, 3.4, right=0.85)
    for group, rows in trace.groupby("group", sort=False):
        line, = ax.plot(rows["time"], rows["intensity"], lw=0.9, label=f"λ_{group}(t)")
        col = f"intensity_{group}"
        if col in episode_ends.columns:
            ax.scatter(episode_ends["time"], episode_ends[col], color=line.get_color(), edgecolor="black",
                       s=30, zorder=3)
    for t in np.asarray(episode_ends["time"], float):
        ax.axvline(t, color="#bbbbbb", lw=0.6, zorder=0)
    ax.set_xlabel("time (grey lines: episode ends, dots: intensity recorded there)")
    ax.set_ylabel("λ_g(t) (applications per time unit)")
    ax.set_title("group Hawkes intensity λ_g(t)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig
