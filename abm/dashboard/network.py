"""The dashboard's network panel: a sampled neighbourhood of one applicant (runs with social ties).

Shown under an applicant's timeline when the run's ``agents.parquet`` carries the network
columns (``degree``, ``community``, ``neighbors``: docs/MODEL.md, "Social ties (our extension)").
The applicant, its neighbours and a sample of their neighbours (at most ``MAX_NODES`` applicants,
sampled with a fixed seed so a reload draws the same picture) are laid out with networkx's
spring layout; each node's colour is its final wealth and its shape its group, ties between the
groups are drawn dashed. Drawn on the server as a PNG (``matplotlib.figure.Figure``, no pyplot).
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import solara
from matplotlib.figure import Figure

MAX_NODES = 60
SHAPES = ("o", "s", "^", "D")  # one per group, in agents.parquet's category order


def has_network(agents: pd.DataFrame) -> bool:
    return "neighbors" in agents.columns


def neighbourhood(agents: pd.DataFrame, agent_id: int, max_nodes: int = MAX_NODES,
                  seed: int = 0) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """(applicants shown, ties among them): the applicant, its neighbours (a sample if more
    than ``max_nodes - 1``), then a sample of their neighbours up to ``max_nodes``."""
    rng = np.random.default_rng(seed + int(agent_id))
    nbrs = agents["neighbors"]
    first = np.asarray(nbrs.iloc[agent_id], dtype=np.int64)
    if len(first) > max_nodes - 1:
        first = rng.choice(first, max_nodes - 1, replace=False)
    chosen = [int(agent_id), *map(int, first)]
    room = max_nodes - len(chosen)
    if room > 0 and len(first):
        second = np.unique(np.concatenate([np.asarray(nbrs.iloc[j], dtype=np.int64) for j in first]))
        second = np.setdiff1d(second, chosen)
        if len(second) > room:
            second = rng.choice(second, room, replace=False)
        chosen += [int(j) for j in second]
    shown = np.array(chosen, dtype=np.int64)
    inside = set(chosen)
    ties = [(i, int(j)) for i in chosen for j in np.asarray(nbrs.iloc[i], dtype=np.int64) if i < j and int(j) in inside]
    return shown, ties


def figure(agents: pd.DataFrame, agent_id: int, max_nodes: int = MAX_NODES) -> Figure:
    import networkx as nx

    shown, ties = neighbourhood(agents, agent_id, max_nodes)
    G = nx.Graph()
    G.add_nodes_from(shown.tolist())
    G.add_edges_from(ties)
    pos = nx.spring_layout(G, seed=0)
    groups = agents["group"].astype("category")
    codes = groups.cat.codes.to_numpy()
    names = list(groups.cat.categories)
    wealth = agents["final_wealth"].to_numpy(float) if "final_wealth" in agents.columns else np.zeros(len(agents))
    lo, hi = float(wealth[shown].min()), float(wealth[shown].max())
    fig = Figure(figsize=(6.4, 4.6), dpi=90)
    fig.subplots_adjust(left=0.02, right=0.86, bottom=0.02, top=0.9)
    ax = fig.add_subplot(1, 1, 1)
    for i, j in ties:
        same = codes[i] == codes[j]
        ax.plot([pos[i][0], pos[j][0]], [pos[i][1], pos[j][1]], color="#999999", lw=0.7, zorder=1,
                ls="-" if same else "--")
    art = None
    for g, name in enumerate(names):
        mine = shown[codes[shown] == g]
        if len(mine) == 0:
            continue
        xy = np.array([pos[int(i)] for i in mine])
        art = ax.scatter(xy[:, 0], xy[:, 1], c=wealth[mine], cmap="viridis", vmin=lo, vmax=max(hi, lo + 1e-9),
                         marker=SHAPES[g % len(SHAPES)], s=[160 if i == agent_id else 50 for i in mine],
                         edgecolors=["#d62728" if i == agent_id else "black" for i in mine], linewidths=0.8,
                         zorder=2, label=f"group {name}")
    if art is not None:
        fig.colorbar(art, ax=ax, fraction=0.05, pad=0.01).set_label("final wealth ($K)", fontsize=8)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_axis_off()
    ax.set_title(f"applicant {agent_id} (red ring) and {len(shown) - 1} applicants around it; dashed: ties "
                 f"between groups", fontsize=8)
    return fig


def png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def panel_png(run, agent_id: int) -> bytes:
    return png(figure(run.agents, int(agent_id)))


@solara.component
def NetworkPanel(run, agent_id: int):
    """Under an applicant's timeline: its sampled neighbourhood (nothing for runs without a network)."""
    agents = run.agents
    image = solara.use_memo(lambda: panel_png(run, agent_id) if has_network(agents) else None,
                            [str(run.folder), int(agent_id)])
    if image is None or not (0 <= int(agent_id) < len(agents)):
        return
    row = agents.iloc[int(agent_id)]
    solara.Markdown(f"#### Ties of applicant {agent_id}: degree {row['degree']}, community {row['community']}")
    solara.Image(image)
