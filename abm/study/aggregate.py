"""Study aggregation: ``study.parquet``, ``summary.parquet`` and ``runs.csv`` of a study folder.

``study.parquet`` holds one row per finished run and episode: the run's episode metrics plus
its configuration columns (run id, configuration id and label, the study group(s) of the run
(``study_group``: the first, ``study_groups``: all, comma-separated; named groups of the study
file, not population groups, whose metrics are the ``<metric>_<group>`` columns), policy,
objective, one column per grid field, replicate, seed), in the study's order. ``summary.parquet``
holds one row per configuration and episode, configurations in the study's order (the order of
the study file's entries): ``<metric>_mean`` and ``<metric>_std`` (sample std, ddof 1) over the
replicates, and ``count``, the number of finished runs behind them. ``runs.csv`` lists every
run with its status and, where ``run_times.csv`` has it, its wall and CPU seconds. Tables and plots on top of these: ``abm.reports.study``.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import numpy as np
import pandas as pd

from abm.errors import UserError, read_user_file
from abm.provenance import differs, recorded_fingerprint
from abm.runner import is_complete, run_folder_problem, write_parquet

RUN_COLUMNS = ("run_id", "config_id", "config", "study_group", "study_groups", "policy", "objective")
TAIL_COLUMNS = ("replicate", "seed")


# what a manifest holds (``abm.study.execute.write_manifest``) as its readers use it
MANIFEST_FIELDS = {"name": str, "seed": int, "grid_keys": list, "runs": list}
RUN_FIELDS = {"run_id": str, "config_id": str, "columns": dict, "groups": list, "replicate": int, "seed": int}


def read_manifest(folder: Path) -> dict:
    """A study folder's ``manifest.json``, checked against ``MANIFEST_FIELDS`` and, for each run,
    ``RUN_FIELDS`` (its ``columns`` naming the policy and objective, one group at least); anything
    else is a one-line UserError naming the file."""
    path = Path(folder) / "manifest.json"
    if not path.is_file():
        raise UserError(f"{folder}: not a study folder (no manifest.json; run `abm study` first)")
    try:
        manifest = json.loads(read_user_file(path))
    except ValueError as exc:
        raise UserError(f"{path}: unreadable ({' '.join(str(exc).split())})") from None
    problem = _shape_problem(manifest, MANIFEST_FIELDS, "")
    for i, spec in enumerate(manifest["runs"] if problem is None else []):
        problem = problem or _shape_problem(spec, RUN_FIELDS, f"runs[{i}].")
        if problem is None and not ({"policy", "objective"} <= set(spec["columns"]) and spec["groups"]):
            problem = f"runs[{i}]: columns without policy and objective, or no groups"
    if problem is not None:
        raise UserError(f"{path}: not a study manifest ({problem}); rerun `abm study` to write it again")
    return manifest


def _shape_problem(value, fields: dict, where: str) -> str | None:
    if not isinstance(value, dict):
        return f"{where.rstrip('.') or 'the top level'} is not an object"
    for key, kind in fields.items():
        found = value.get(key)
        if not isinstance(found, kind) or kind is int and isinstance(found, bool):
            return f"{where}{key} is {type(found).__name__ if key in value else 'missing'}, expected {kind.__name__}"
    return None


def config_label(columns: dict, grid_keys: list[str]) -> str:
    """A configuration's name in legends and tables: its policy entry's ``label:`` (else the policy
    with its parameters), its objective unless none, its grid values."""
    parts = [str(columns.get("label") or columns["policy"])]
    if columns.get("objective", "none") != "none":
        parts.append(str(columns["objective"]))
    parts += [f"{k}={columns[k]}" for k in grid_keys if k in columns]
    return ", ".join(parts)


def _write_atomic(frame: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".tmp-{path.name}-{uuid.uuid4().hex[:8]}")
    write_parquet(frame, tmp)
    os.replace(tmp, path)


def _arrow_safe(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Grid columns mixing types (e.g. 1 and 'a' in different groups) become text."""
    for col in columns:
        kinds = {type(v) for v in frame[col].dropna()}
        if len(kinds) > 1 and not kinds <= {int, float, np.int64, np.float64}:
            frame[col] = frame[col].map(lambda v: v if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
    return frame


def aggregate(folder: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(Re)build ``study.parquet`` and ``summary.parquet`` from the finished runs of a study."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    grid_keys = list(manifest.get("grid_keys", []))
    frames = []
    corrupt: dict[str, str] = {}  # run id -> what is damaged: left out, reported in runs.csv
    for spec in manifest["runs"]:
        run_dir = folder / "runs" / spec["run_id"]
        if not is_complete(run_dir):
            continue
        problem = run_folder_problem(run_dir)
        if problem is not None:
            corrupt[spec["run_id"]] = problem
            continue
        episodes = pd.read_parquet(run_dir / "episodes.parquet")
        cols = spec["columns"]
        info = {"run_id": spec["run_id"], "config_id": spec["config_id"], "config": config_label(cols, grid_keys),
                "study_group": spec["groups"][0], "study_groups": ",".join(spec["groups"]), "policy": cols["policy"],
                "objective": cols["objective"]}
        info.update({k: cols.get(k) for k in grid_keys})
        info.update({"replicate": spec["replicate"], "seed": spec["seed"]})
        head = pd.DataFrame({k: [v] * len(episodes) for k, v in info.items()})
        frames.append(pd.concat([head, episodes.reset_index(drop=True)], axis=1))
    id_cols = [*RUN_COLUMNS, *grid_keys, *TAIL_COLUMNS]
    study = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*id_cols, "episode"])
    study = _arrow_safe(study, grid_keys)
    keys = ["config_id", "config", "study_groups", "policy", "objective", *grid_keys, "episode"]
    metrics = [c for c in study.columns
               if c not in id_cols and c != "episode" and pd.api.types.is_numeric_dtype(study[c])]
    if frames:
        grouped = study.groupby(keys, dropna=False, sort=False)
        stats = grouped[metrics].agg(["mean", "std"])
        stats.columns = [f"{metric}_{stat}" for metric, stat in stats.columns]
        # copy(): one block, not one per metric (10 groups: pandas warned "highly fragmented")
        summary = stats.join(grouped.size().rename("count")).copy().reset_index()
        order = {c: i for i, c in enumerate(dict.fromkeys(study["config_id"]))}  # the study's order
        summary = summary.sort_values(["config_id", "episode"], key=lambda c: c.map(order) if c.name == "config_id"
                                      else c, kind="stable").reset_index(drop=True)
    else:
        summary = pd.DataFrame(columns=[*keys, "count"])
    _write_atomic(study, folder / "study.parquet")
    _write_atomic(summary, folder / "summary.parquet")
    _write_status(folder, manifest, grid_keys, corrupt)
    return study, summary


TIMES = "run_times.csv"  # every computed run's cost, appended by ``abm.study.execute.record_time``
TIME_COLUMNS = ("run_id", "status", "started", "wall_s", "cpu_s", "load_1m", "host", "backend", "machine")
# run_times.csv as studies wrote it before it named the machine (read as machine "", appended to as it is)
OLD_TIME_COLUMNS = TIME_COLUMNS[:-1]


def read_run_times(folder: str | Path) -> pd.DataFrame:
    """``run_times.csv`` of a study folder (``abm.study.execute.record_time``): one row per
    computed run, oldest first; lines that do not parse (a torn last line of a killed study, an
    edited file) are left out. Empty (with the columns) when the study kept no times. A file
    from before the ``machine`` column reads with ``machine`` empty."""
    columns = list(TIME_COLUMNS)
    path = Path(folder) / TIMES
    try:
        frame = pd.read_csv(path, on_bad_lines="skip", dtype=str, keep_default_na=False)
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError):  # absent, empty or not text
        return pd.DataFrame(columns=columns)
    if list(frame.columns) == list(OLD_TIME_COLUMNS):
        frame["machine"] = ""
    if list(frame.columns) != columns:
        return pd.DataFrame(columns=columns)
    for col in ("wall_s", "cpu_s", "load_1m"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    good = frame["wall_s"].notna() & frame["cpu_s"].notna() & (frame["wall_s"] >= 0) & (frame["cpu_s"] >= 0)
    return frame[good].reset_index(drop=True)


def latest_run_times(folder: str | Path) -> pd.DataFrame:
    """The latest successful computation of each run in ``run_times.csv``, indexed by run id."""
    times = read_run_times(folder)
    return times[times["status"] == "ok"].drop_duplicates("run_id", keep="last").set_index("run_id")


def _write_status(folder: Path, manifest: dict, grid_keys: list[str], corrupt: dict[str, str] | None = None) -> None:
    """``runs.csv``: every run of the study with its status (ok / stale: finished by other code /
    corrupt: finished, but a file is damaged (left out of the tables; the next ``abm study`` sets
    it aside and recomputes it) / failed / missing), the code fingerprint that computed it and its
    error (for a run recomputed after its folder was found corrupted, where the old one is kept),
    and for a finished run the wall and CPU seconds of its latest computation (``run_times.csv``;
    empty for runs computed before the study kept times)."""
    rows = []
    corrupt = corrupt or {}
    last = latest_run_times(folder)
    for spec in manifest["runs"]:
        run_id = spec["run_id"]
        record = folder / "failed" / f"{run_id}.json"
        code = ""
        if run_id in corrupt:
            status, error = "corrupt", f"{corrupt[run_id]}; rerun abm study to set it aside and recompute it"
            code = recorded_fingerprint(folder / "runs" / run_id) or "unknown"
        elif is_complete(folder / "runs" / run_id):
            status, error = "ok", ""
            recorded = recorded_fingerprint(folder / "runs" / run_id)
            status, code = ("stale" if differs(recorded) else "ok"), recorded or "unknown"
            if (folder / "runs" / f"{run_id}.corrupt").is_dir():
                error = f"recomputed; the corrupted earlier folder is kept as runs/{run_id}.corrupt"
        elif record.is_file():
            try:
                status, error = "failed", json.loads(record.read_text()).get("error", "")
            except ValueError:
                status, error = "failed", "unreadable failure record"
        else:
            status, error = "missing", ""
        cols = spec["columns"]
        timed = status in ("ok", "stale") and run_id in last.index
        rows.append({"run_id": run_id, "status": status, "config": config_label(cols, grid_keys),
                     "groups": ",".join(spec["groups"]), "replicate": spec["replicate"], "seed": spec["seed"],
                     "code_fingerprint": code, "error": error,
                     "wall_s": last.at[run_id, "wall_s"] if timed else np.nan,
                     "cpu_s": last.at[run_id, "cpu_s"] if timed else np.nan})
    tmp = folder / f".tmp-runs.csv-{uuid.uuid4().hex[:8]}"
    pd.DataFrame(rows, columns=["run_id", "status", "config", "groups", "replicate", "seed", "code_fingerprint",
                                "error", "wall_s", "cpu_s"]).to_csv(
        tmp, index=False)
    os.replace(tmp, folder / "runs.csv")


def load_summary(folder: Path) -> pd.DataFrame:
    """``summary.parquet``, rebuilt first when missing, older than the manifest or written before the
    study group columns were named ``study_group(s)``."""
    path = folder / "summary.parquet"
    manifest = folder / "manifest.json"
    if not path.is_file() or (manifest.is_file() and manifest.stat().st_mtime > path.stat().st_mtime):
        return aggregate(folder)[1]
    summary = pd.read_parquet(path)
    return summary if "study_groups" in summary.columns or summary.empty else aggregate(folder)[1]
