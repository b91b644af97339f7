"""Append-only, typed, columnar event log: each applicant's history.

Events are appended in batches of numpy arrays (one append per decision batch, not per
event) and concatenated once at the end, so logging stays off the hot path.

Event kinds. The core's own kinds are ``EventKind`` (an application, the bank's two decisions
and the two loan outcomes). A family with events of its own declares them
(``Scenario.event_kinds``, registered by ``abm.registry.register_event_kinds``) and asks
``kind_code(name)`` for their int8 codes; the ``kind`` column of every log is a categorical over
the whole vocabulary (core kinds, then every registered family's in the order they were
registered), so logs of different families share one coding.

The applicant's state after each event is the column ``<state>_after``, named by the family
(``Scenario.state``: ``wealth_after`` in Eutopia, ``score_after`` in the credit families).
"""

from __future__ import annotations

import enum

import numpy as np
import pandas as pd
import pyarrow as pa

from abm import registry


class EventKind(enum.IntEnum):
    """The core's event kinds (every family's bank applies, decides, and sees loans resolve)."""

    APPLY = 0
    APPROVE = 1
    REJECT = 2
    REPAY = 3
    DEFAULT = 4


#: every registered kind, core kinds first (the in-process codes follow this order); the
#: registry's list, which registering a family's kinds extends in place. A log's ``kind``
#: categories are the core kinds and its own family's only, so a run's file does not depend on
#: which other families (a plugin, a new built-in) this process has registered.
KIND_NAMES = registry.KIND_NAMES


def kind_code(name: str) -> np.int8:
    """The code of a registered event kind (a family's own, e.g. admissions' ``admit``)."""
    try:
        return np.int8(KIND_NAMES.index(name))
    except ValueError:
        raise KeyError(f"event kind {name!r} is not registered (a family's Scenario.event_kinds)") from None

#: the columns of a log (``STATE_AFTER`` is written ``<state>_after``) and their types
STATE_AFTER = "state_after"
COLUMNS = {
    "time": np.float64,
    "episode": np.int32,
    "agent_id": np.int64,
    "group": np.int16,
    "kind": np.int8,
    "amount": np.float64,
    STATE_AFTER: np.float64,
    "decision_prob": np.float64,
}


class EventLog:
    """Buffered columnar log. ``add`` takes one event's scalars; ``extend`` a batch whose fields
    are scalars (shared by the batch) or equal-length arrays.

    ``extend`` only records the batch (a tuple, no numpy work); the arrays are built once, in
    ``columns()``, so a decision batch costs one list append whatever its size.
    """

    def __init__(self, enabled: bool = True, group_names: list[str] | None = None, state: str = "wealth",
                 family: str | None = None):
        self.enabled = enabled
        self.group_names = group_names or []
        self.family = family  # its kinds (registry.FAMILY_EVENT_KINDS) are this log's categories
        self.state_column = f"{state}_after"
        self.names = [self.state_column if c == STATE_AFTER else c for c in COLUMNS]  # the columns' names
        self._batches: list[tuple] = []  # (n, time, episode, agent_id, group, kind, amount, state, prob)
        self._scalars: list[tuple] = []  # single events not yet folded into a batch
        self._done: dict[str, np.ndarray] | None = None  # columns built so far
        self.count = 0

    def add(self, time: float, episode: int, agent_id: int, group: int, kind: EventKind,
            amount: float = np.nan, state_after: float = np.nan, decision_prob: float = np.nan) -> None:
        """One event (used for single arrivals)."""
        self.count += 1
        if self.enabled:
            self._scalars.append((time, episode, agent_id, group, int(kind), amount, state_after, decision_prob))

    def skip(self, n: int) -> None:
        """Count ``n`` events without recording them: for callers that check ``enabled`` first
        and so avoid building the fields of events a disabled log would drop."""
        self.count += n

    def extend(self, time: float, episode: int, agent_id: np.ndarray, group: np.ndarray, kind,
               amount=np.nan, state_after=np.nan, decision_prob=np.nan) -> None:
        """A batch of events sharing a time and episode; ``kind`` may be scalar or per event."""
        n = len(agent_id)
        if n == 0:
            return
        self.count += n
        if not self.enabled:
            return
        if self._scalars:
            self._flush_scalars()
        self._batches.append((n, time, episode, agent_id, group, kind, amount, state_after, decision_prob))

    def _flush_scalars(self) -> None:
        rows = self._scalars
        self._scalars = []
        cols = list(zip(*rows))
        self._batches.append((len(rows), *(np.asarray(c) for c in cols)))

    def columns(self) -> dict[str, np.ndarray]:
        """All events as numpy columns, in the order they happened."""
        if self._scalars:
            self._flush_scalars()
        batches, self._batches = self._batches, []
        out = {}
        for k, (col, dtype) in enumerate(zip(self.names, COLUMNS.values()), start=1):
            parts = [] if self._done is None else [self._done[col]]
            values = [b[k] for b in batches]
            if values and not any(isinstance(v, np.ndarray) for v in values):
                lengths = np.fromiter((b[0] for b in batches), np.int64, len(batches))
                parts.append(np.repeat(np.asarray(values, dtype=dtype), lengths))
            else:
                parts.extend(v.astype(dtype, copy=False) if isinstance(v, np.ndarray) else np.full(b[0], v, dtype)
                             for v, b in zip(values, batches))
            out[col] = np.concatenate(parts) if parts else np.empty(0, dtype=dtype)
        self._done = out
        return dict(out)

    def to_frame(self) -> pd.DataFrame:
        cols = self.columns()
        frame = pd.DataFrame(cols)
        own = {*registry.CORE_EVENT_KINDS, *registry.FAMILY_EVENT_KINDS.get(self.family, ())}
        present = np.zeros(len(KIND_NAMES), bool)
        present[np.unique(cols["kind"])] = True  # (a kind logged by another family's code, if any)
        keep = [i for i, k in enumerate(KIND_NAMES) if k in own or present[i]]
        local = np.full(len(KIND_NAMES), -1, np.int8)  # in-process code -> this log's category
        local[keep] = np.arange(len(keep))
        frame["kind"] = pd.Categorical.from_codes(local[cols["kind"]], categories=[KIND_NAMES[i] for i in keep])
        if self.group_names:
            frame["group"] = pd.Categorical.from_codes(cols["group"], categories=self.group_names)
        return frame

    def to_arrow(self) -> pa.Table:
        return pa.Table.from_pandas(self.to_frame(), preserve_index=False)
