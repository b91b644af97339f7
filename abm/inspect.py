"""Reading run folders: an applicant's timeline and a group's summary (``abm inspect``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from abm.errors import UserError


@dataclass
class Run:
    folder: Path
    summary: dict
    episodes: pd.DataFrame
    agents: pd.DataFrame

    def events(self, agent_id: int | None = None, group: str | None = None) -> pd.DataFrame:
        """Events, filtered while reading (the whole log is never loaded for one applicant)."""
        path = self.folder / "events.parquet"
        if not path.is_file():
            raise UserError(f"{self.folder}: this run did not keep an event log (outputs.events: false)")
        filters = []
        if agent_id is not None:
            filters.append(("agent_id", "=", int(agent_id)))
        if group is not None:
            filters.append(("group", "=", str(group)))
        table = pq.read_table(path, filters=filters or None)
        return table.to_pandas()


def load_run(folder: str | Path) -> Run:
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder}: no such run folder")
    summary_path = folder / "summary.json"
    if not summary_path.is_file():
        raise UserError(f"{folder}: not a complete run folder (no summary.json)")
    try:
        summary = json.loads(summary_path.read_text())
        episodes = pd.read_parquet(folder / "episodes.parquet")
        agents = pd.read_parquet(folder / "agents.parquet")
    except (OSError, ValueError) as exc:
        raise UserError(f"{folder}: unreadable run folder ({exc})") from None
    return Run(folder, summary, episodes, agents)


def agent_timeline(run: Run, agent_id: int, limit: int = 200):
    from rich.table import Table

    if not (0 <= agent_id < len(run.agents)):
        raise UserError(f"--agent: no applicant {agent_id} (ids are 0..{len(run.agents) - 1})")
    row = run.agents.iloc[agent_id]
    ev = run.events(agent_id=agent_id)
    title = (f"applicant {agent_id} (group {row['group']}): initial wealth {row['initial_wealth']:.2f}, "
             f"final {row['final_wealth']:.2f}, {len(ev)} events")
    table = Table(title=title)
    for col in ("time", "episode", "event", "amount", "wealth after", "decision prob"):
        table.add_column(col, justify="right")
    for r in ev.head(limit).itertuples(index=False):
        table.add_row(f"{r.time:.3f}", str(r.episode), str(r.kind), _num(r.amount), _num(r.wealth_after),
                      _num(r.decision_prob))
    if len(ev) > limit:
        table.caption = f"first {limit} of {len(ev)} events (use --limit)"
    return table


def group_summary(run: Run, group: str):
    from rich.table import Table

    groups = [str(g) for g in run.agents["group"].astype(str).unique()]
    if group not in groups:
        raise UserError(f"--group: no group {group!r} (groups: {', '.join(sorted(groups))})")
    part = run.agents[run.agents["group"].astype(str) == group]
    table = Table(title=f"group {group}: {len(part):,} applicants")
    table.add_column("measure")
    table.add_column("value", justify="right")
    numeric = [c for c in part.columns if c not in ("agent_id", "group") and pd.api.types.is_numeric_dtype(part[c])]
    for c in numeric:
        table.add_row(f"mean {c}", f"{part[c].astype(float).mean():.4f}")
    if "approvals" in part.columns:
        table.add_row("share ever approved", f"{(part['approvals'] > 0).mean():.4f}")
    last = run.episodes.iloc[-1]
    for c in run.episodes.columns:
        if c.endswith(f"_{group}"):
            table.add_row(f"last episode {c}", f"{float(last[c]):.4f}")
    return table


def _num(v) -> str:
    return "" if pd.isna(v) else f"{float(v):.3f}"
