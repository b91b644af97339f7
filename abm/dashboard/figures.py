"""Matplotlib figures for the dashboard, drawn on the server and sent to the page as PNG.

Built on ``matplotlib.figure.Figure`` (not pyplot), so concurrent page sessions never share
pyplot's global figure state.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

# how each event kind is marked on an applicant's wealth path
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


def run_metric(episodes: pd.DataFrame, title: str, columns: list[str]) -> Figure:
    """One panel of group metrics over episodes (one line per column)."""
    fig, ax = _figure()
    for col in columns:
        ax.plot(episodes["episode"], episodes[col], lw=1.3, label=_legend_name(col, columns))
    ax.set_xlabel("episode")
    ax.set_title(title, fontsize=10)
    if len(columns) > 1:
        ax.legend(title="group", fontsize=8)
    return fig


def _legend_name(col: str, columns: list[str]) -> str:
    return col.rsplit("_", 1)[-1] if len(columns) > 1 else col


def study_bands(bands: pd.DataFrame, title: str) -> Figure:
    """Configurations side by side: mean line and mean ± std band per configuration."""
    fig, ax = _figure()
    for label, rows in bands.groupby("config", sort=False):
        line, = ax.plot(rows["episode"], rows["mean"], lw=1.3, label=label)
        ax.fill_between(rows["episode"], rows["lower"], rows["upper"], color=line.get_color(), alpha=0.2, lw=0)
    ax.set_xlabel("episode")
    ax.set_title(f"{title}, mean ± std", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    return fig


def timeline(wealth: pd.DataFrame, events: pd.DataFrame, agent_id: int) -> Figure:
    """An applicant's wealth over time, each application, decision and outcome marked."""
    fig, ax = _figure(11.0, 3.6, right=0.84)
    ax.step(wealth["time"], wealth["wealth"], where="post", color="#444444", lw=1.1, label="wealth")
    for kind, style in KIND_STYLE.items():
        rows = events[events["kind"] == kind]
        if len(rows):
            ax.scatter(rows["time"], rows["wealth_after"], s=28, zorder=3, marker=style["marker"],
                       color=style["color"], label=f"{style['label']} ({len(rows)})")
    ax.set_xlabel("time")
    ax.set_ylabel("wealth (or score)")
    ax.set_title(f"applicant {agent_id}", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def intensity(trace: pd.DataFrame, episode_ends: pd.DataFrame) -> Figure:
    """Group Hawkes intensities over time; dots: ``intensity_<g>`` recorded at episode ends."""
    fig, ax = _figure(9.0, 3.4)
    for group, rows in trace.groupby("group", sort=False):
        line, = ax.plot(rows["time"], rows["intensity"], lw=0.9, label=f"λ_{group}(t)")
        col = f"intensity_{group}"
        if col in episode_ends.columns:
            ax.scatter(episode_ends["time"], episode_ends[col], color=line.get_color(), edgecolor="black",
                       s=30, zorder=3)
    for t in np.asarray(episode_ends["time"], float):
        ax.axvline(t, color="#bbbbbb", lw=0.6, zorder=0)
    ax.set_xlabel("time (grey lines: episode ends, dots: intensity recorded there)")
    ax.set_title("group Hawkes intensity λ_g(t)", fontsize=10)
    ax.legend(fontsize=8)
    return fig
