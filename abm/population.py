"""The population of a scenario as a table (``abm population``), and its summary."""

from __future__ import annotations

import numpy as np
import pandas as pd

from abm import registry
from abm.engine import STREAMS


def generate_population(scenario) -> pd.DataFrame:
    """Build the scenario's world (seeded exactly as a run would) and return its population."""
    mod = registry.family_module(scenario.family)
    seeds = np.random.SeedSequence(scenario.seed).spawn(len(STREAMS))
    rng = np.random.default_rng(seeds[STREAMS.index("population")])
    return mod.population_table(scenario, rng)


def generate_network(scenario) -> pd.DataFrame | None:
    """The scenario's social ties, each once (``source < target``, ``weight``), seeded exactly as a
    run builds them; None when the scenario has no network (or its family none)."""
    mod = registry.family_module(scenario.family)
    table = getattr(mod, "network_table", None)  # a module function, not a world capability
    return table(scenario) if table is not None else None


def edges_path(out) -> "Path":
    """Where ``abm population --out FILE`` writes the ties: FILE's stem + ``.edges.parquet`` beside it."""
    from pathlib import Path

    out = Path(out)
    return out.with_name(f"{out.stem}.edges{out.suffix or '.parquet'}")


def summary_table(frame: pd.DataFrame):
    """A rich table: per group size, mean wealth, label rate and mean approval score."""
    from rich.table import Table

    group_col = "group_name" if "group_name" in frame.columns else "group"
    numeric = [c for c in ("wealth", "label", "approval_score", "loan_amount", "default") if c in frame.columns]
    table = Table(title="population by group")
    table.add_column("group")
    table.add_column("size", justify="right")
    names = {"wealth": "mean wealth ($K)", "label": "label rate", "approval_score": "mean approval score",
             "loan_amount": "mean loan ($K)", "default": "default rate"}
    for c in numeric:
        table.add_column(names[c], justify="right")
    for g, part in frame.groupby(group_col, observed=True, sort=True):
        table.add_row(str(g), f"{len(part):,}", *[f"{part[c].astype(float).mean():.3f}" for c in numeric])
    return table
