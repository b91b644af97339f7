"""Append-only, typed, columnar event log: each applicant's history.

Events are appended in batches of numpy arrays (one append per decision batch, not per
event) and concatenated once at the end, so logging stays off the hot path.
"""

from __future__ import annotations

import enum

import numpy as np
import pandas as pd
import pyarrow as pa


class EventKind(enum.IntEnum):
    APPLY = 0
    APPROVE = 1
    REJECT = 2
    REPAY = 3
    DEFAULT = 4
    # families beyond Eutopia
    ADMIT = 5
    MANIPULATE = 6
    LEAVE = 7


KIND_NAMES = [k.name.lower() for k in EventKind]

COLUMNS = {
    "time": np.float64,
    "episode": np.int32,
    "agent_id": np.int64,
    "group": np.int16,
    "kind": np.int8,
    "amount": np.float64,
    "wealth_after": np.float64,
    "decision_prob": np.float64,
}


class EventLog:
    """Buffered columnar log. ``append`` takes scalars or equal-length arrays per column."""

    def __init__(self, enabled: bool = True, group_names: list[str] | None = None):
        self.enabled = enabled
        self.group_names = group_names or []
        self._chunks: dict[str, list[np.ndarray]] = {c: [] for c in COLUMNS}
        self._scalars: dict[str, list] = {c: [] for c in COLUMNS}
        self.count = 0

    def add(self, time: float, episode: int, agent_id: int, group: int, kind: EventKind,
            amount: float = np.nan, wealth_after: float = np.nan, decision_prob: float = np.nan) -> None:
        """One event (used for single arrivals)."""
        self.count += 1
        if not self.enabled:
            return
        s = self._scalars
        s["time"].append(time)
        s["episode"].append(episode)
        s["agent_id"].append(agent_id)
        s["group"].append(group)
        s["kind"].append(int(kind))
        s["amount"].append(amount)
        s["wealth_after"].append(wealth_after)
        s["decision_prob"].append(decision_prob)

    def extend(self, time: float, episode: int, agent_id: np.ndarray, group: np.ndarray, kind,
               amount=np.nan, wealth_after=np.nan, decision_prob=np.nan) -> None:
        """A batch of events sharing a time and episode; ``kind`` may be scalar or per event."""
        n = len(agent_id)
        if n == 0:
            return
        self.count += n
        if not self.enabled:
            return
        self._flush_scalars()
        values = {
            "time": time, "episode": episode, "agent_id": agent_id, "group": group, "kind": kind,
            "amount": amount, "wealth_after": wealth_after, "decision_prob": decision_prob,
        }
        for col, dtype in COLUMNS.items():
            v = values[col]
            arr = np.full(n, v, dtype=dtype) if np.ndim(v) == 0 else np.asarray(v, dtype=dtype)
            self._chunks[col].append(arr)

    def _flush_scalars(self) -> None:
        if not self._scalars["time"]:
            return
        for col, dtype in COLUMNS.items():
            self._chunks[col].append(np.asarray(self._scalars[col], dtype=dtype))
            self._scalars[col] = []

    def columns(self) -> dict[str, np.ndarray]:
        """All events as numpy columns, in the order they happened."""
        self._flush_scalars()
        out = {}
        for col, dtype in COLUMNS.items():
            chunks = self._chunks[col]
            out[col] = np.concatenate(chunks) if chunks else np.empty(0, dtype=dtype)
            self._chunks[col] = [out[col]] if len(out[col]) else []
        return out

    def to_frame(self) -> pd.DataFrame:
        cols = self.columns()
        frame = pd.DataFrame(cols)
        frame["kind"] = pd.Categorical.from_codes(cols["kind"], categories=KIND_NAMES)
        if self.group_names:
            frame["group"] = pd.Categorical.from_codes(cols["group"], categories=self.group_names)
        return frame

    def to_arrow(self) -> pa.Table:
        return pa.Table.from_pandas(self.to_frame(), preserve_index=False)
