"""Reading run folders: an applicant's timeline and a group's summary (``abm inspect``).

Run folders come from disk and may be truncated, corrupted, hand-edited or from another tool:
every problem with one is a one-line ``UserError`` naming the file (exit 2), never a traceback.
``load_run`` checks what the readers rely on: ``summary.json`` is a JSON object,
``episodes.parquet`` has rows and a numeric ``time``, ``agents.parquet`` has rows, a ``group``
column and integer ``agent_id`` 0..n-1 in row order; ``Run.events`` checks the event log's
columns and types before filtering it. A study folder is recognised and its runs are listed.
Each family names the applicants' state its files carry (``Scenario.state``: events'
``<state>_after``, agents' ``initial_<state>``/``final_<state>``; ``Run.state``); a folder written
before the credit, admissions and belief families named theirs (as ``wealth``) reads the same.

Exports (``abm inspect ... --json PATH`` / ``--csv PATH``, ``-``: stdout) carry what the
printed tables show: a run's overview (JSON: one object with the keys ``kind``, ``folder``,
``summary``, ``final``, ``groups``; CSV: the per-group table, one row per group), a group's row
of that table (``--group``), an applicant's history (``--agent``: JSON keys ``kind``,
``folder``, ``agent_id``, ``applicant``, ``events``; CSV: the event rows, with the neighbours'
approvals of a run with a network marked ``whose = neighbour``), or a study folder's runs
(JSON keys ``kind``, ``folder``, ``runs``; CSV: one row per run with its headline metrics). In
JSON a missing or non-finite number is ``null``.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from abm.errors import UserError, owned_output, read_user_file
from abm.runner import current_state_columns, family_state, legacy_state_names

EVENT_COLUMNS = ("time", "episode", "agent_id", "kind")  # what a timeline needs; amount etc. are optional
NUMERIC_EVENT_COLUMNS = ("time", "amount", "decision_prob")  # and the state's <state>_after
# a run's headline numbers (final episode) where its family records them: the study listing's columns
HEADLINE = ("wealth_gap", "inequality_ratio", "cumulative_profit", "cumulative_return", "credit_gap", "recall_gap",
            "exact_reward", "exact_dp_gap", "exact_eo_gap")
EXPORT_FORMATS = ("json", "csv")


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _is_int(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or (pa.types.is_dictionary(kind) and pa.types.is_integer(kind.value_type))


def _is_number(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_null(kind)


def _type_name(kind: pa.DataType) -> str:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return "string" if pa.types.is_string(kind) or pa.types.is_large_string(kind) else str(kind)


def _schema(path: Path) -> pa.Schema:
    if not path.exists():
        raise UserError(f"{path}: missing")
    if not path.is_file():
        raise UserError(f"{path}: not a file")
    try:
        return pq.read_schema(path)
    except Exception as exc:  # noqa: BLE001  pyarrow raises many kinds for a damaged or foreign file
        raise UserError(f"{path}: unreadable run folder: not a Parquet file, or a damaged one ({_reason(exc)})") from None


def _read(path: Path, **kwargs) -> pd.DataFrame:
    """``path`` read whole (or filtered) into pandas; any failure is a one-line UserError naming it."""
    _schema(path)
    try:
        # page checksums are verified where the writer stored them (pyarrow's write_page_checksum)
        return pq.read_table(path, page_checksum_verification=True, **kwargs).to_pandas()
    except Exception as exc:  # noqa: BLE001  truncated or corrupted pages surface here, as any pyarrow error
        raise UserError(f"{path}: unreadable run folder: not a Parquet file, or a damaged one ({_reason(exc)})") from None


@dataclass
class Run:
    folder: Path
    summary: dict
    episodes: pd.DataFrame
    agents: pd.DataFrame
    state: str = "wealth"  # the family's Scenario.state: events' <state>_after, agents' initial_<state>

    @property
    def state_after(self) -> str:
        return f"{self.state}_after"

    def events(self, agent_id: int | None = None, group: str | None = None,
               agent_ids: list[int] | None = None) -> pd.DataFrame:
        """Events, filtered while reading (the whole log is never loaded for one applicant)."""
        path = self.folder / "events.parquet"
        if not path.exists():
            raise UserError(f"{self.folder}: this run did not keep an event log (outputs.events: false)")
        schema = _schema(path)
        needed = [*EVENT_COLUMNS, *(["group"] if group is not None else [])]
        missing = [c for c in needed if c not in schema.names]
        if missing:
            raise UserError(f"{path}: no column {', '.join(missing)} (columns: {', '.join(schema.names) or 'none'})")
        if not _is_int(schema.field("agent_id").type):
            raise UserError(f"{path}: agent_id is {_type_name(schema.field('agent_id').type)}, expected integers")
        state_column = legacy_state_names(self.state, schema.names).get(self.state_after, self.state_after)
        for name in (*NUMERIC_EVENT_COLUMNS, state_column):
            if name in schema.names and not _is_number(schema.field(name).type):
                raise UserError(f"{path}: {name} is {_type_name(schema.field(name).type)}, expected numbers")
        filters = []
        if agent_id is not None:
            filters.append(("agent_id", "=", int(agent_id)))
        if group is not None:
            filters.append(("group", "=", str(group)))
        if agent_ids is not None:  # e.g. an applicant's neighbours (runs with a network)
            filters.append(("agent_id", "in", sorted({int(i) for i in agent_ids}) or [-1]))
        return current_state_columns(_read(path, filters=filters or None), self.state)


def study_runs(folder: str | Path) -> list[tuple[str, bool]] | None:
    """``[(run id, finished?), ...]`` when ``folder`` is a study folder (``manifest.json`` or
    ``runs/`` and no ``summary.json``), else None. A damaged manifest falls back to ``runs/``."""
    folder = Path(folder)
    if not folder.is_dir() or (folder / "summary.json").is_file():
        return None
    manifest, runs = folder / "manifest.json", folder / "runs"
    if not (manifest.is_file() or runs.is_dir()):
        return None
    ids: list[str] = []
    try:
        ids = [str(spec["run_id"]) for spec in json.loads(read_user_file(manifest))["runs"]]
    except (UserError, ValueError, KeyError, TypeError):
        pass
    if not ids and runs.is_dir():
        ids = sorted(p.name for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))
    return [(i, (runs / i / "summary.json").is_file()) for i in ids]


def _study_error(folder: Path, runs: list[tuple[str, bool]]) -> UserError:
    done = [i for i, ok in runs if ok]
    example = f" e.g. `abm inspect {folder / 'runs' / done[0]} --agent 0`" if done else ""
    return UserError(f"{folder}: a study folder ({len(done)} of {len(runs)} runs finished), not a run folder: "
                     f"inspect one of its runs in {folder / 'runs'}/,{example}".rstrip(","))


def load_run(folder: str | Path) -> Run:
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder}: no such run folder" if not folder.exists() else f"{folder}: not a folder")
    runs = study_runs(folder)
    if runs is not None:
        raise _study_error(folder, runs)
    summary_path = folder / "summary.json"
    if not summary_path.is_file():
        raise UserError(f"{folder}: not a complete run folder (no summary.json)")
    try:
        summary = json.loads(read_user_file(summary_path).decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise UserError(f"{summary_path}: unreadable ({_reason(exc)})") from None
    if not isinstance(summary, dict):
        raise UserError(f"{summary_path}: expected a JSON object, got {type(summary).__name__}")
    episodes = _read(folder / "episodes.parquet")
    if episodes.empty:
        raise UserError(f"{folder / 'episodes.parquet'}: no episodes (0 rows)")
    if "time" not in episodes.columns or not pd.api.types.is_numeric_dtype(episodes["time"]):
        raise UserError(f"{folder / 'episodes.parquet'}: no numeric 'time' column")
    agents = _read(folder / "agents.parquet")
    _check_agents(folder / "agents.parquet", agents)
    state = family_state(summary.get("family"), folder)
    return Run(folder, summary, episodes, current_state_columns(agents, state), state)


def _check_agents(path: Path, agents: pd.DataFrame) -> None:
    if agents.empty:
        raise UserError(f"{path}: no applicants (0 rows)")
    for name in ("agent_id", "group"):
        if name not in agents.columns:
            raise UserError(f"{path}: no '{name}' column (columns: {', '.join(map(str, agents.columns))})")
    ids = agents["agent_id"]
    if not pd.api.types.is_integer_dtype(ids):
        kind = "string" if pd.api.types.is_string_dtype(ids) or ids.dtype == object else str(ids.dtype)
        raise UserError(f"{path}: agent_id is {kind}, expected integers")
    if not np.array_equal(ids.to_numpy(), np.arange(len(ids))):
        raise UserError(f"{path}: agent_id must be 0..{len(ids) - 1} in row order")


def neighbour_approvals(run: Run, agent_id: int) -> pd.DataFrame | None:
    """The approvals of an applicant's neighbours (runs with a network: agents.parquet's
    ``neighbors``), as event rows; None when the run has no network."""
    if "neighbors" not in run.agents.columns:
        return None
    ids = np.asarray(run.agents["neighbors"].iloc[agent_id], dtype=np.int64)
    if len(ids) == 0:
        return pd.DataFrame(columns=[*EVENT_COLUMNS])
    ev = run.events(agent_ids=ids.tolist())
    return ev[ev["kind"].astype(str) == "approve"]


def _check_agent(run: Run, agent_id: int) -> None:
    if not (0 <= agent_id < len(run.agents)):
        raise UserError(f"--agent: no applicant {agent_id} (ids are 0..{len(run.agents) - 1})")


def agent_timeline(run: Run, agent_id: int, limit: int = 200, neighbours: bool = True):
    """An applicant's events; with a network, its neighbours' approvals interleaved ("neighbour
    j approved": what excites its applications and informs its perceived approval)."""
    from rich.table import Table

    if limit < 0:
        raise UserError(f"--limit: must be 0 or more, got {limit}")
    _check_agent(run, agent_id)
    row = run.agents.iloc[agent_id]
    ev = run.events(agent_id=agent_id)
    state = run.state
    title = (f"applicant {agent_id} (group {row['group']}): initial {state} {_money(row.get(f'initial_{state}'))}, "
             f"final {_money(row.get(f'final_{state}'))}, {len(ev)} events")
    nb = neighbour_approvals(run, agent_id) if neighbours else None
    if nb is not None:
        title += (f"; degree {row.get('degree')}, community {row.get('community')}: "
                  f"{len(nb)} neighbour approvals")
        ev = ev.assign(kind=ev["kind"].astype(str))
        if len(nb):
            nb = nb.assign(kind=[f"neighbour {int(j)} approved" for j in nb["agent_id"]], amount=np.nan,
                           **{run.state_after: np.nan})
            ev = pd.concat([ev, nb], ignore_index=True).sort_values("time", kind="mergesort")
    table = Table(title=title)
    for col in ("time", "episode", "event", "amount", f"{state} after", "decision prob"):
        table.add_column(col, justify="right")
    for r in ev.head(limit).to_dict("records"):
        table.add_row(_num(r.get("time")), str(r.get("episode")), str(r.get("kind")), _num(r.get("amount")),
                      _num(r.get(run.state_after)), _num(r.get("decision_prob")))
    if len(ev) > limit:
        table.caption = f"first {limit} of {len(ev)} {'rows' if nb is not None else 'events'} (use --limit)"
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
    if "approvals" in part.columns and pd.api.types.is_numeric_dtype(part["approvals"]):
        table.add_row("share ever approved", f"{(part['approvals'] > 0).mean():.4f}")
    last = run.episodes.iloc[-1]
    for c in run.episodes.columns:
        if str(c).endswith(f"_{group}") and pd.api.types.is_numeric_dtype(run.episodes[c]):
            table.add_row(f"last episode {c}", f"{float(last[c]):.4f}")
    return table


# -- a run's overview and the exports ------------------------------------------------------------
def group_names(run: Run) -> list[str]:
    """The run's groups: agents.parquet's category order (else order of appearance)."""
    groups = run.agents["group"]
    if isinstance(groups.dtype, pd.CategoricalDtype):
        return [str(g) for g in groups.cat.categories]
    return [str(g) for g in pd.unique(groups.astype(str))]


def _numeric_episodes(run: Run) -> pd.DataFrame:
    ep = run.episodes[[c for c in run.episodes.columns if pd.api.types.is_numeric_dtype(run.episodes[c])]]
    return ep if "episode" in ep.columns else ep.assign(episode=np.arange(len(ep)))


def final_metrics(run: Run) -> dict:
    """The last episode's numbers that are not per group (``wealth_gap``, ``cumulative_profit`` ...)."""
    from abm.runner import group_columns

    ep = _numeric_episodes(run)
    per_group = group_columns(ep.columns, group_names(run))
    last = ep.iloc[-1]
    return {str(c): last[c] for c in ep.columns if c not in per_group}


def per_group_table(run: Run) -> pd.DataFrame:
    """One row per group: ``group``, ``applicants``, ``mean_<column>`` of agents.parquet's numeric
    columns, ``share_ever_approved`` (where applicants count approvals) and ``final_<metric>``: the
    last episode's per-group metrics (``episodes.parquet``'s ``<metric>_<group>`` columns, parsed by
    ``abm.runner.tidy_episodes``, the function behind ``episodes_tidy.csv``)."""
    from abm.runner import tidy_episodes

    names = group_names(run)
    agents = run.agents
    labels = agents["group"].astype(str)
    numeric = [c for c in agents.columns
               if c not in ("agent_id", "group") and pd.api.types.is_numeric_dtype(agents[c])]
    final = tidy_episodes(_numeric_episodes(run).iloc[[-1]], names)
    rows = []
    for g in names:
        part = agents[labels == g]
        rec: dict = {"group": g, "applicants": int(len(part))}
        for c in numeric:
            rec[f"mean_{c}"] = float(part[c].astype(float).mean()) if len(part) else np.nan
        if "approvals" in numeric:
            rec["share_ever_approved"] = float((part["approvals"] > 0).mean()) if len(part) else np.nan
        for r in final[final["group"].astype(str) == g].itertuples(index=False):
            rec[f"final_{r.metric}"] = float(r.value)
        rows.append(rec)
    columns = list(dict.fromkeys(k for rec in rows for k in rec))
    return pd.DataFrame(rows, columns=columns)


def run_overview(run: Run):
    """``abm inspect RUN``: the run's summary line and its per-group table (one column per group)."""
    from rich.markup import escape
    from rich.table import Table

    table = per_group_table(run)
    s = run.summary
    title = (f"{run.folder.name}: {s.get('family', '?')} / {s.get('policy', '?')}, seed {s.get('seed', '?')}, "
             f"{len(run.episodes)} episodes, {len(run.agents):,} applicants")
    out = Table(title=escape(title))
    out.add_column("measure")
    for g in table["group"]:
        out.add_column(escape(str(g)), justify="right")
    for col in table.columns[1:]:
        out.add_row(escape(str(col)), *[_num4(v) for v in table[col]])
    final = final_metrics(run)
    shown = [f"{k} = {_num4(final[k])}" for k in HEADLINE if k in final]
    if shown:
        out.caption = escape("final episode: " + "; ".join(shown))
    return out


def run_export(run: Run) -> tuple[dict, pd.DataFrame]:
    """The overview as (JSON object, CSV table)."""
    table = per_group_table(run)
    return ({"kind": "run", "folder": str(run.folder), "summary": run.summary, "final": final_metrics(run),
             "groups": table.to_dict("records")}, table)


def group_export(run: Run, group: str) -> tuple[dict, pd.DataFrame]:
    """One group's row of the per-group table as (JSON object, CSV table of one row)."""
    table = per_group_table(run)
    if group not in set(table["group"]):
        raise UserError(f"--group: no group {group!r} (groups: {', '.join(sorted(table['group']))})")
    row = table[table["group"] == group].reset_index(drop=True)
    measures = {k: v for k, v in row.iloc[0].to_dict().items() if k != "group"}
    return {"kind": "group", "folder": str(run.folder), "group": group, "measures": measures}, row


def agent_export(run: Run, agent_id: int, limit: int | None = None,
                 neighbours: bool = True) -> tuple[dict, pd.DataFrame]:
    """An applicant's history as (JSON object, CSV table): its events in time order (every column of
    the event log, plus ``whose``: ``own``, or ``neighbour`` for a neighbour's approval in a run with
    a network, unless ``neighbours`` is off); ``limit``: at most that many rows (None: all)."""
    if limit is not None and limit < 0:
        raise UserError(f"--limit: must be 0 or more, got {limit}")
    _check_agent(run, agent_id)
    ev = run.events(agent_id=agent_id)
    ev = ev.astype({c: str for c in ("kind", "group") if c in ev.columns}).assign(whose="own")
    nb = neighbour_approvals(run, agent_id) if neighbours else None
    if nb is not None and len(nb):
        nb = nb.astype({c: str for c in ("kind", "group") if c in nb.columns}).assign(whose="neighbour")
        ev = pd.concat([ev, nb], ignore_index=True).sort_values("time", kind="mergesort")
    ev = ev.reset_index(drop=True)
    if limit is not None:
        ev = ev.head(limit)
    applicant = run.agents.iloc[agent_id].to_dict()
    return ({"kind": "agent", "folder": str(run.folder), "agent_id": int(agent_id), "applicant": applicant,
             "events": ev.to_dict("records")}, ev)


def study_export(folder: str | Path, runs: list[tuple[str, bool]]) -> tuple[dict, pd.DataFrame]:
    """A study folder's runs as (JSON object, CSV table): ``run_id``, ``finished``, and from each
    finished run's summary.json ``family``, ``policy``, ``objective``, ``seed``, ``episodes`` and the
    final episode's ``HEADLINE`` metrics that any run records (null where a run has none, or its
    summary.json is unreadable)."""
    folder = Path(folder)
    found = []
    for run_id, finished in runs:
        summary: dict = {}
        if finished:
            try:
                loaded = json.loads(read_user_file(folder / "runs" / run_id / "summary.json").decode("utf-8"))
                summary = loaded if isinstance(loaded, dict) else {}
            except (UserError, ValueError):
                summary = {}
        final = summary.get("final") if isinstance(summary.get("final"), dict) else {}
        rec = {"run_id": run_id, "finished": bool(finished),
               **{k: summary.get(k) for k in ("family", "policy", "objective", "seed", "episodes")}}
        found.append((rec, final))
    present = [k for k in HEADLINE if any(k in final for _, final in found)]
    records = [{**rec, **{k: final.get(k) for k in present}} for rec, final in found]
    columns = ["run_id", "finished", "family", "policy", "objective", "seed", "episodes", *present]
    table = pd.DataFrame(records, columns=columns, dtype=object)  # object: 64-bit seeds stay exact
    return {"kind": "study", "folder": str(folder), "runs": records}, table


def plain(value):
    """``value`` as plain JSON data: numpy scalars and arrays unwrapped, NaN and infinities -> None."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (str, int)):
        return value
    return str(value)


def export_text(fmt: str, payload: dict, table: pd.DataFrame) -> str:
    """The export in ``fmt`` (json: the object, indented; csv: the table with a header)."""
    if fmt == "json":
        return json.dumps(plain(payload), indent=2, allow_nan=False) + "\n"
    if fmt == "csv":
        return table.to_csv(index=False, lineterminator="\n")
    raise UserError(f"inspect: unknown export format {fmt!r} (formats: {', '.join(EXPORT_FORMATS)})")


def write_export(text: str, target: str | Path, flag: str) -> Path:
    """Write ``text`` to ``target`` atomically (a temporary file renamed onto a regular file or
    nothing: ``owned_output``); any failure is one line naming the flag and the path."""
    path = owned_output(target, flag, stdout_ok=True)  # never a symlink, FIFO, device or folder
    tmp = path.with_name(f".tmp-{path.name}-{uuid.uuid4().hex[:8]}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "x", encoding="utf-8") as handle:  # "x": never through a file planted there
            handle.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        reason = "a folder on its path is a file" if isinstance(exc, (FileExistsError, NotADirectoryError)) else \
            exc.strerror or _reason(exc)
        raise UserError(f"{flag} {path}: cannot write ({reason})") from None
    return path


def _num4(v) -> str:
    try:
        return "" if v is None or pd.isna(v) else f"{float(v):.4g}"
    except (TypeError, ValueError):
        return str(v)


def _num(v) -> str:
    try:
        return "" if v is None or pd.isna(v) else f"{float(v):.3f}"
    except (TypeError, ValueError):
        return str(v)


def _money(v) -> str:
    try:
        return "?" if v is None else f"{float(v):.2f}"
    except (TypeError, ValueError):
        return str(v)
