"""Study aggregation and report: ``study.parquet``, ``summary.parquet``, tables and plots.

``study.parquet`` holds one row per finished run and episode: the run's episode metrics plus
its configuration columns (run id, configuration id and label, group(s), policy, objective,
one column per grid field, replicate, seed). ``summary.parquet`` holds one row per
configuration and episode: ``<metric>_mean`` and ``<metric>_std`` (sample std, ddof 1) over the
replicates, and ``count``, the number of finished runs behind them. ``render_report`` writes
comparison tables (Markdown and CSV, final episode) and one PNG per metric with a mean ± std
band per configuration.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import numpy as np
import pandas as pd

from abm.errors import UserError
from abm.provenance import differs, recorded_fingerprint
from abm.runner import is_complete, write_parquet

RUN_COLUMNS = ("run_id", "config_id", "config", "group", "groups", "policy", "objective")
TAIL_COLUMNS = ("replicate", "seed")
# metrics shown in the comparison tables and plots, when a family provides them
KEY_METRICS = ("wealth_gap", "inequality_ratio", "cumulative_profit", "mean_wealth_{g}", "reach_{g}",
               "social_welfare_{g}", "recall_{g}", "credit_gap")


def read_manifest(folder: Path) -> dict:
    path = folder / "manifest.json"
    if not path.is_file():
        raise UserError(f"{folder}: not a study folder (no manifest.json; run `abm study` first)")
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise UserError(f"{path}: unreadable ({exc})") from None


def config_label(columns: dict, grid_keys: list[str]) -> str:
    parts = [str(columns["policy"])]
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
    for spec in manifest["runs"]:
        run_dir = folder / "runs" / spec["run_id"]
        if not is_complete(run_dir):
            continue
        episodes = pd.read_parquet(run_dir / "episodes.parquet")
        cols = spec["columns"]
        info = {"run_id": spec["run_id"], "config_id": spec["config_id"], "config": config_label(cols, grid_keys),
                "group": spec["groups"][0], "groups": ",".join(spec["groups"]), "policy": cols["policy"],
                "objective": cols["objective"]}
        info.update({k: cols.get(k) for k in grid_keys})
        info.update({"replicate": spec["replicate"], "seed": spec["seed"]})
        head = pd.DataFrame({k: [v] * len(episodes) for k, v in info.items()})
        frames.append(pd.concat([head, episodes.reset_index(drop=True)], axis=1))
    id_cols = [*RUN_COLUMNS, *grid_keys, *TAIL_COLUMNS]
    study = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*id_cols, "episode"])
    study = _arrow_safe(study, grid_keys)
    keys = ["config_id", "config", "groups", "policy", "objective", *grid_keys, "episode"]
    metrics = [c for c in study.columns
               if c not in id_cols and c != "episode" and pd.api.types.is_numeric_dtype(study[c])]
    if frames:
        grouped = study.groupby(keys, dropna=False, sort=False)
        stats = grouped[metrics].agg(["mean", "std"])
        stats.columns = [f"{metric}_{stat}" for metric, stat in stats.columns]
        summary = stats.join(grouped.size().rename("count")).reset_index()
        summary = summary.sort_values(["config", "episode"], kind="stable").reset_index(drop=True)
    else:
        summary = pd.DataFrame(columns=[*keys, "count"])
    _write_atomic(study, folder / "study.parquet")
    _write_atomic(summary, folder / "summary.parquet")
    _write_status(folder, manifest, grid_keys)
    return study, summary


def _write_status(folder: Path, manifest: dict, grid_keys: list[str]) -> None:
    """``runs.csv``: every run of the study with its status (ok / stale: finished by other code /
    failed / missing), the code fingerprint that computed it and its error."""
    rows = []
    for spec in manifest["runs"]:
        run_id = spec["run_id"]
        record = folder / "failed" / f"{run_id}.json"
        code = ""
        if is_complete(folder / "runs" / run_id):
            status, error = "ok", ""
            recorded = recorded_fingerprint(folder / "runs" / run_id)
            status, code = ("stale" if differs(recorded) else "ok"), recorded or "unknown"
        elif record.is_file():
            try:
                status, error = "failed", json.loads(record.read_text()).get("error", "")
            except ValueError:
                status, error = "failed", "unreadable failure record"
        else:
            status, error = "missing", ""
        cols = spec["columns"]
        rows.append({"run_id": run_id, "status": status, "config": config_label(cols, grid_keys),
                     "groups": ",".join(spec["groups"]), "replicate": spec["replicate"], "seed": spec["seed"],
                     "code_fingerprint": code, "error": error})
    tmp = folder / f".tmp-runs.csv-{uuid.uuid4().hex[:8]}"
    pd.DataFrame(rows, columns=["run_id", "status", "config", "groups", "replicate", "seed", "code_fingerprint",
                                "error"]).to_csv(
        tmp, index=False)
    os.replace(tmp, folder / "runs.csv")


def _metric_list(summary: pd.DataFrame) -> list[str]:
    groups = [c.removeprefix("mean_wealth_").removesuffix("_mean") for c in summary.columns
              if c.startswith("mean_wealth_") and c.endswith("_mean")]
    out = []
    for pattern in KEY_METRICS:
        names = [pattern.format(g=g) for g in groups] if "{g}" in pattern else [pattern]
        out += [m for m in names if f"{m}_mean" in summary.columns]
    return out


def _load_summary(folder: Path) -> pd.DataFrame:
    path = folder / "summary.parquet"
    manifest = folder / "manifest.json"
    if not path.is_file() or (manifest.is_file() and manifest.stat().st_mtime > path.stat().st_mtime):
        return aggregate(folder)[1]
    return pd.read_parquet(path)


def render_report(folder: str | Path) -> Path:
    """Write ``report/`` in a study folder: comparison.md/.csv and one PNG per metric."""
    from abm.report import to_markdown

    folder = Path(folder)
    manifest = read_manifest(folder)
    summary = _load_summary(folder)
    if summary.empty:
        raise UserError(f"{folder}: no finished runs to report (see runs.csv / failed/)")
    out = folder / "report"
    out.mkdir(exist_ok=True)
    metrics = _metric_list(summary)
    final = summary.loc[summary.groupby("config_id", sort=False)["episode"].idxmax()].reset_index(drop=True)
    grid_keys = [k for k in manifest.get("grid_keys", []) if k in summary.columns]
    table_cols = ["config", "groups", "policy", "objective", *grid_keys, "episode", "count"]
    final[table_cols + [f"{m}_{s}" for m in metrics for s in ("mean", "std")]].to_csv(out / "comparison.csv",
                                                                                      index=False)
    lines = [f"# Study {manifest['name']}", "",
             f"Final episode of each configuration: mean ± std over `count` seeded runs "
             f"(study seed {manifest['seed']}, {len(manifest['runs'])} runs).", ""]
    groups = list(dict.fromkeys(g for gs in final["groups"] for g in str(gs).split(",")))
    for group in groups:
        rows = final[final["groups"].astype(str).str.split(",").map(lambda gs, g=group: g in gs)]
        view = pd.DataFrame({"configuration": rows["config"], "runs": rows["count"].astype(int)})
        for m in metrics:
            view[m] = [_pm(a, b) for a, b in zip(rows[f"{m}_mean"], rows[f"{m}_std"])]
        if len(groups) > 1:
            lines += [f"## Group {group}", ""]
        lines += [to_markdown(view), ""]
    status = pd.read_csv(folder / "runs.csv") if (folder / "runs.csv").is_file() else None
    if status is not None and (status["status"] != "ok").any():
        bad = status[status["status"] != "ok"]
        lines += ["## Runs not finished", "", to_markdown(bad[["run_id", "status", "config", "error"]].fillna("")), ""]
    (out / "comparison.md").write_text("\n".join(lines))
    from policies.deep.tables import write_seed_tables  # seed 002's table form, when runs carry recalls

    write_seed_tables(folder, out)
    from abm.report_seed000 import write_seed000_report  # seed 000's Figure 3 / Tables 2-3 form

    write_seed000_report(folder, out)
    _plots(summary, metrics, out)
    return out


def _pm(mean: float, std: float) -> str:
    if not np.isfinite(mean):
        return "NaN"
    return f"{mean:.4g} ± {std:.2g}" if np.isfinite(std) else f"{mean:.4g}"


def _plots(summary: pd.DataFrame, metrics: list[str], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for metric in metrics:
        fig, ax = plt.subplots(figsize=(7, 4))
        for label, rows in summary.groupby("config", sort=False):
            rows = rows.sort_values("episode")
            mean = rows[f"{metric}_mean"].to_numpy(float)
            std = np.nan_to_num(rows[f"{metric}_std"].to_numpy(float))
            line, = ax.plot(rows["episode"], mean, label=label, lw=1.4)
            ax.fill_between(rows["episode"], mean - std, mean + std, color=line.get_color(), alpha=0.2, lw=0)
        ax.set_xlabel("episode")
        ax.set_title(f"{metric} (mean ± std over seeds)")
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        fig.savefig(out / f"{metric}.png", dpi=110)
        plt.close(fig)
