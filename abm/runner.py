"""Run one scenario into a self-describing run folder, atomically.

The folder is written under a temporary name beside its final name and renamed only once
every file is complete, so a crash never leaves a folder that looks finished. A run whose
final folder already exists (same config hash) is not recomputed: nothing computed is lost.
A complete folder computed by other code (``abm.provenance``) is set aside, not overwritten; so is
a complete folder with a damaged file (``run_folder_problem``: kept as ``<name>.corrupt``), which
is then recomputed. A temp folder names the process writing it (``.tmp-<name>-<hex>-p<pid>-<host>``):
a later run of the same name removes those whose process is dead (a killed run's leftovers).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from abm import __version__, registry
from abm.build import simulation
from abm.config import config_hash, scenario_to_dict
from abm.errors import InvariantError, UserError, read_user_file
from abm.provenance import code_fingerprint, differs, recorded_fingerprint, set_aside
from abm.world import HeadlineSummary, NullableMetrics

COMPLETE_MARKER = "summary.json"  # written last: its presence means the folder is complete
TIDY_FILE = "episodes_tidy.csv"  # episodes.parquet's per-group columns, long: episode, group, metric, value
TIDY_COLUMNS = ("episode", "group", "metric", "value")
# the columns a readable run folder's tables must have (episodes: the engine's; events: the log's,
# and one state column <state>_after, named by the family: Scenario.state)
EPISODE_COLUMNS = ("episode",)
EVENT_COLUMNS = ("time", "episode", "agent_id", "group", "kind", "amount", "decision_prob")
#: the state's name in every family's run files before each family named its own (Scenario.state)
LEGACY_STATE = "wealth"
# a temp run folder names its owner: .tmp-<run name>-<8 hex>-p<pid>-<8 hex of the host name>
_OWNER = re.compile(r"-p(\d+)-([0-9a-f]{8})$")


def run_name(scenario) -> str:
    """``<scenario>-<policy>-seed<S>-<hash>``; a plugin's ``module:Class`` is written ``module.Class``
    (no colon in a folder name: Windows and macOS refuse or mangle it)."""
    policy = scenario.policy.name.replace(":", ".")
    return f"{scenario.name}-{policy}-seed{scenario.seed}-{config_hash(scenario)}"


def is_complete(folder: Path) -> bool:
    return (folder / COMPLETE_MARKER).is_file() and not folder.name.startswith(".tmp-")


def run_folder_problem(folder: Path) -> str | None:
    """Why a complete run folder cannot be used (a damaged file), or None. Checks ``summary.json``
    (JSON), ``episodes.parquet`` (read whole: it is small and every reader needs it; its columns
    and row count), ``events.parquet`` when present and ``agents.parquet`` (their footers: schema,
    row counts), so a truncated or overwritten file is caught without reading every event."""
    folder = Path(folder)
    try:
        summary = json.loads(read_user_file(folder / COMPLETE_MARKER))  # bounded: it may be someone else's
    except (UserError, ValueError) as exc:
        return f"{COMPLETE_MARKER} is unreadable ({type(exc).__name__})"
    if not isinstance(summary, dict):
        return f"{COMPLETE_MARKER} is not a JSON object"
    expected = [("episodes.parquet", EPISODE_COLUMNS, summary.get("episodes"), True),
                ("events.parquet", EVENT_COLUMNS, summary.get("events"), False),
                ("agents.parquet", (), None, True)]
    for name, columns, rows, required in expected:
        path = folder / name
        if not path.is_file():
            if required:
                return f"{name} is missing"
            continue
        try:
            if name == "episodes.parquet":
                table = pq.read_table(path)
                names, count = table.column_names, table.num_rows
            else:
                meta = pq.ParquetFile(path)
                names, count = meta.schema_arrow.names, meta.metadata.num_rows
        except Exception as exc:  # ArrowInvalid, OSError, ...: any damage of the file
            return f"{name} is unreadable ({type(exc).__name__})"
        missing = [c for c in columns if c not in names]
        if name == "events.parquet" and not any(str(c).endswith("_after") for c in names):
            missing.append("<state>_after")
        if missing:
            return f"{name} lacks column(s) {', '.join(missing)}"
        if isinstance(rows, int) and count != rows:
            return f"{name} has {count} rows, {COMPLETE_MARKER} says {rows}"
    return None


def family_state(family: Any, folder: Path | None = None) -> str:
    """The state a run's files name (its family's ``Scenario.state``: events' ``<state>_after``,
    agents' ``initial_<state>``/``final_<state>``). A plugin family's module is not imported to read
    a folder: its state is that of the one ``*_after`` column of ``folder``'s events, else ``wealth``."""
    if isinstance(family, str) and family in registry.FAMILIES:
        return registry.family_module(family).Scenario.state
    try:
        names = pq.read_schema(Path(folder) / "events.parquet").names if folder is not None else []
    except Exception:  # noqa: BLE001  no log, or a damaged one: its readers say so
        names = []
    found = [c.removesuffix("_after") for c in names if c.endswith("_after")]
    return found[0] if len(found) == 1 else LEGACY_STATE


def legacy_state_names(state: str, names) -> dict[str, str]:
    """Today's column -> its name in a table written before the family named its state (every family
    wrote ``wealth_after``, ``initial_wealth``, ``final_wealth``), for those the table has only so."""
    if state == LEGACY_STATE:
        return {}
    names = {str(c) for c in names}
    pairs = {f"{state}_after": "wealth_after", f"initial_{state}": "initial_wealth", f"final_{state}": "final_wealth"}
    return {new: old for new, old in pairs.items() if new not in names and old in names}


def current_state_columns(frame: pd.DataFrame, state: str) -> pd.DataFrame:
    """A run table as today's code writes it: an older folder's ``wealth`` columns of a family whose
    state has another name are renamed to it, or dropped where the table also has today's (the score
    families wrote both ``initial_score`` and ``initial_wealth``)."""
    if state == LEGACY_STATE:
        return frame
    renames = {old: new for new, old in legacy_state_names(state, frame.columns).items()}
    stale = [c for c in ("wealth_after", "initial_wealth", "final_wealth") if c in frame.columns and c not in renames]
    return frame.drop(columns=stale).rename(columns=renames) if renames or stale else frame


def set_aside_corrupt(folder: Path) -> Path:
    """Rename a corrupted run folder to ``<name>.corrupt[-k]`` (kept, never deleted); return the new path."""
    folder = Path(folder)
    target, k = folder.with_name(f"{folder.name}.corrupt"), 1
    while target.exists():
        k += 1
        target = folder.with_name(f"{folder.name}.corrupt-{k}")
    os.replace(folder, target)
    return target


def _host_tag() -> str:
    return hashlib.sha256(os.uname().nodename.encode()).hexdigest()[:8]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists (another user's)
        return True
    return True


def remove_dead_temps(root: Path, name: str) -> list[Path]:
    """Remove ``.tmp-<name>-*`` folders whose owner (the pid in the name, on this host) is dead: what
    a killed run left. Folders of a live process, of another host, or without an owner are kept."""
    removed = []
    for tmp in Path(root).glob(f".tmp-{name}-*"):
        owner = _OWNER.search(tmp.name)
        if owner is None or owner.group(2) != _host_tag() or not tmp.is_dir() or _alive(int(owner.group(1))):
            continue
        shutil.rmtree(tmp, ignore_errors=True)
        removed.append(tmp)
    return removed


def safe_child(root: Path, name: str) -> Path:
    """``root/name``, refused if it would escape ``root`` (via '..' or symlinks)."""
    root_resolved = root.resolve()
    target = (root / name).resolve()
    if root_resolved != target and root_resolved not in target.parents:
        raise UserError(f"output path {root / name} escapes the output root {root}")
    return root / name


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(table, path, compression="zstd")


def group_columns(columns, group_names) -> dict[str, tuple[str, str]]:
    """Wide per-group columns -> (metric, group): ``mean_wealth_F`` -> (mean_wealth, F). The longest
    group name is tried first (groups ``A`` and ``B_A``: ``x_B_A`` is metric ``x`` of ``B_A``)."""
    groups = sorted((str(g) for g in group_names), key=len, reverse=True)
    found = {}
    for col in columns:
        col = str(col)
        for g in groups:
            if col.endswith(f"_{g}") and len(col) > len(g) + 1:
                found[col] = (col[: -len(g) - 1], g)
                break
    return found


def tidy_episodes(episodes: pd.DataFrame, group_names) -> pd.DataFrame:
    """The per-group metrics of an episodes table in long form: columns episode, group (categorical,
    ``group_names`` order), metric, value (float); sorted by episode, then metric (in column order),
    then group. What ``episodes_tidy.csv`` holds and ``abm.api.Run.tidy()`` returns."""
    names = [str(g) for g in group_names]
    columns = group_columns(episodes.columns, names)
    if not columns:
        return pd.DataFrame({"episode": pd.Series(dtype="int64"),
                             "group": pd.Series(pd.Categorical([], categories=names)),
                             "metric": pd.Series(dtype="object"), "value": pd.Series(dtype="float64")})
    wide = episodes[["episode", *columns]]
    long = wide.melt(id_vars="episode", var_name="column", value_name="value")
    long["metric"] = long["column"].map(lambda c: columns[c][0])
    long["group"] = pd.Categorical(long["column"].map(lambda c: columns[c][1]), categories=names)
    long["value"] = long["value"].astype(float)
    metrics = list(dict.fromkeys(m for m, _ in columns.values()))
    long["metric_order"] = long["metric"].map({m: i for i, m in enumerate(metrics)})
    long = long.sort_values(["episode", "metric_order", "group"], kind="stable")
    return long[list(TIDY_COLUMNS)].reset_index(drop=True)


def check_run(sim, episodes: pd.DataFrame, events: pd.DataFrame | None) -> None:
    """End-of-run invariants: the world's own, the event ledger and the metric table."""
    world = sim.world
    world.check_invariants()
    nullable = world.nullable_metrics if isinstance(world, NullableMetrics) else ()  # e.g. recall before any repayer
    optional = ("inequality_ratio", *nullable)
    required = [c for c in episodes.columns if c not in optional]
    if episodes[required].isna().any().any():
        bad = [c for c in required if episodes[c].isna().any()]
        raise InvariantError(f"invariant 'no NaN in required metrics' broken: {', '.join(bad)}")
    if "profit" in episodes.columns and not np.isclose(float(episodes["profit"].sum()), sim.world.profit_total,
                                                       rtol=1e-9, atol=1e-6):
        raise InvariantError(f"invariant 'episode profits sum to the bank profit' broken: "
                             f"{float(episodes['profit'].sum()):.6f} vs {sim.world.profit_total:.6f}")
    if events is not None and "decision_prob" in events.columns:
        probs = events["decision_prob"].to_numpy(dtype=float)
        probs = probs[~np.isnan(probs)]  # events other than decisions carry none
        if np.any((probs < 0) | (probs > 1)):
            raise InvariantError(f"invariant 'decision probabilities in [0, 1]' broken: "
                                 f"{probs[(probs < 0) | (probs > 1)][:3].tolist()}")
    if events is not None:  # the family's own ledger: profit and counts recomputed from the events
        world.ledger_check(events, episodes)


def execute(scenario, *, on_episode: Callable[[dict], None] | None = None, policy=None):
    """Simulate ``scenario``; return (sim, episodes frame, events frame or None)."""
    sim = simulation(scenario, policy)
    sim.run(on_episode=on_episode)
    episodes = pd.DataFrame(sim.episode_rows)
    events = sim.log.to_frame() if sim.log.enabled else None
    check_run(sim, episodes, events)
    return sim, episodes, events


def run_to_folder(scenario, out_root: str | Path | None = None, *, on_episode=None,
                  reuse: bool = True, policy=None, name: str | None = None, stale: str = "recompute",
                  notify: Callable[[str], None] | None = None) -> tuple[Path, bool]:
    """Run ``scenario`` into ``out_root/<run name>``. Returns (folder, computed_now).

    A complete folder of the same name is reused when ``reuse`` and it was computed by this code
    (or by code of unknown fingerprint). One computed by other code is set aside and recomputed
    (``stale="recompute"``) or reused (``stale="reuse"``). ``reuse=False`` sets any complete
    folder aside and recomputes. ``notify`` receives a line whenever a folder is set aside or a
    stale one reused."""
    if stale not in ("recompute", "reuse"):
        raise ValueError(f"stale must be 'recompute' or 'reuse', got {stale!r}")
    root = Path(out_root or scenario.outputs.root)
    created = first_missing(root)  # removed again if the run fails: a failed run leaves no folder
    try:  # (the mkdir inside: a Ctrl+C the moment the folder exists still removes it)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"{root}: cannot create output folder ({exc.strerror})") from None
        return _run_into(root, scenario, on_episode, reuse, policy, name, stale, notify or (lambda line: None))
    except BaseException:
        if created is not None:
            _remove_empty_tree(created, root)
        raise


def first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (None if ``path`` exists)."""
    missing = None
    for p in (path, *path.parents):
        if p.exists():
            break
        missing = p
    return missing


def _remove_empty_tree(top: Path, leaf: Path) -> None:
    """rmdir ``leaf`` and its parents up to ``top`` while they are empty (nothing else's is lost)."""
    for p in (leaf, *leaf.parents):
        try:
            p.rmdir()
        except OSError:
            return
        if p == top:
            return


def _run_into(root: Path, scenario, on_episode, reuse: bool, policy, name: str | None, stale: str,
              notify: Callable[[str], None]) -> tuple[Path, bool]:
    final = safe_child(root, name or run_name(scenario))
    remove_dead_temps(root, final.name)
    problem = run_folder_problem(final) if is_complete(final) else None
    if problem is not None:  # a corrupted complete folder: kept beside, recomputed
        notify(f"{final}: {problem}; the folder is kept as {set_aside_corrupt(final).name} and the run recomputed")
    if is_complete(final):
        old = recorded_fingerprint(final)
        if reuse and not differs(old, scenario):
            return final, False
        if reuse and stale == "reuse":
            notify(f"{final}: computed by other code (fingerprint {old}, now {code_fingerprint(scenario)}); reused")
            return final, False
        why = "computed by other code" if reuse else "recomputing on request"
        notify(f"{final}: {why} (fingerprint {old or 'unknown'}, now {code_fingerprint(scenario)}); "
               f"the old folder is kept as {set_aside(final).name}")
    if final.exists() and not is_complete(final):
        raise UserError(f"{final} exists but is not a complete run folder; move it away first")
    tmp = safe_child(root, f".tmp-{final.name}-{uuid.uuid4().hex[:8]}-p{os.getpid()}-{_host_tag()}")
    started = time.perf_counter()
    sim, episodes, events = execute(scenario, on_episode=on_episode, policy=policy)
    wall = time.perf_counter() - started
    try:
        tmp.mkdir()
        write_folder(tmp, scenario, sim, episodes, events, wall)
        os.replace(tmp, final) if not final.exists() else None
    except BaseException as exc:  # a full disk, or Ctrl+C while writing: no temp folder is left
        shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(exc, OSError):
            raise
        reason = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        error = UserError(f"{root}: cannot write run folder ({reason})")
        error.errno = exc.errno  # a study stops on a full or read-only output folder (abm.study.execute)
        raise error from None
    if tmp.exists():  # another process finished the same run first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return final, True


def write_folder(folder: Path, scenario, sim, episodes: pd.DataFrame, events: pd.DataFrame | None, wall: float) -> None:
    resolved = scenario_to_dict(scenario)
    resolved["abm_version"] = __version__
    (folder / "scenario.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    write_parquet(episodes, folder / "episodes.parquet")
    tidy_episodes(episodes, sim.world.group_names).to_csv(folder / TIDY_FILE, index=False, lineterminator="\n")
    if events is not None:
        write_parquet(events, folder / "events.parquet")
    write_parquet(sim.world.agents_table(), folder / "agents.parquet")
    if sim.policy is not None and sim.policy.saves:  # a trained policy: its weights + config
        sim.policy.save(folder / "policy")
    final = episodes.iloc[-1].to_dict() if len(episodes) else {}
    summary: dict[str, Any] = {
        "abm_version": __version__,
        "family": scenario.family,
        "policy": scenario.policy.name,
        "objective": scenario.objective,
        "seed": scenario.seed,
        "config_hash": config_hash(scenario),
        "code_fingerprint": code_fingerprint(scenario),
        "episodes": int(len(episodes)),
        "events": int(sim.log.count),
        "final": {k: _jsonable(v) for k, v in final.items()},
        "world": sim.world.summary(),
        "policy_state": sim.policy.state() if sim.policy is not None else {},
        "wall_seconds": round(wall, 3),
        "invariants": "passed",
    }
    if isinstance(sim.world, HeadlineSummary):  # a family's headline numbers (beta_belief: exact vs
        summary.update({k: v for k, v in sim.world.headline_summary().items() if k not in summary})  # simulated)
    path = folder / COMPLETE_MARKER
    path.write_text(json.dumps(summary, indent=2, default=_jsonable))


def _jsonable(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        return None if not np.isfinite(v) else float(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, np.ndarray):
        return [_jsonable(x) for x in v.tolist()]
    return v
