"""A ledger of a study's finished runs: one CSV row per run (its final episode, each metric the
mean over its evaluation episodes, as report/seed_tables.md takes it), with the run's identity,
what it cost (``run_times.csv``), the code that computed it, a digest of its episodes table and
what its policy learned (``policy/config.json``'s ``extra``: the Bisimulator's omega, a
Lagrangian's multipliers; columns ``extra.KEY`` and ``extra.KEY.I``).
The ledger is small enough to keep in the repository, so a design too long for one sitting
(seed 002's 10-seed tables: docs/results/seed002-table{1,2,5}.md) is computed over several sittings on machines that
keep nothing, and any row can be checked by computing its run again (``abm run`` of the run's
scenario.yaml gives the same episodes.parquet, so the same digest, on a processor with the same
float kernels: the ``machine`` column; a learned lender trained on another processor ends a
little elsewhere, docs/MODEL.md "Reproducible per processor").

    python benchmarks/study_ledger.py add outputs/studies/table1 docs/results/table1.csv
    python benchmarks/study_ledger.py tables docs/results/table1.csv     # seed tables + cost per method

``add`` appends the study folder's finished runs that the ledger lacks; a run already there
must carry the same digest (a different one exits 2: two computations of one run disagree;
the message names both machines).
``abm study STUDY.yaml --skip LEDGER`` leaves its runs out of the next sitting's work,
and ``benchmarks/seed002_budget_stats.py`` takes a ledger in place of a study folder. Bad input
exits 2 with one line.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pandas as pd

from oneline import OneLineParser, fail

IDENTITY = ("run_id", "config_id", "config", "group", "groups", "policy", "objective", "replicate", "seed")
COST = ("wall_s", "cpu_s", "load_1m", "started", "host", "backend", "machine")
PROVENANCE = ("code", "episodes_sha256")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def flat_extra(extra, prefix: str = "extra") -> dict[str, float | str]:
    """``extra`` of a policy's config.json as flat columns: numbers and strings as they are,
    lists and mappings one column per element (``extra.omega.0``, ``extra.nu.G1.1``)."""
    if isinstance(extra, dict):
        out: dict[str, float | str] = {}
        for key, value in extra.items():
            out.update(flat_extra(value, f"{prefix}.{key}"))
        return out
    if isinstance(extra, (list, tuple)):
        out = {}
        for i, value in enumerate(extra):
            out.update(flat_extra(value, f"{prefix}.{i}"))
        return out
    if extra is None or isinstance(extra, (bool, int, float, str)):
        return {prefix: extra}
    return {prefix: str(extra)}


def policy_extra(run_dir: Path) -> dict[str, float | str]:
    import json

    path = run_dir / "policy" / "config.json"
    try:
        extra = json.loads(path.read_text()).get("extra") if path.is_file() else None
    except (OSError, ValueError, AttributeError):
        return {}
    return flat_extra(extra) if extra else {}


def study_rows(folder: Path) -> pd.DataFrame:
    """The ledger rows of a study folder's finished runs."""
    from abm.provenance import recorded_fingerprint
    from abm.reports.seed002 import final_rows
    from abm.study.aggregate import aggregate, latest_run_times

    study, _ = aggregate(folder)
    study = study.rename(columns={"study_group": "group", "study_groups": "groups"})  # the ledgers' names
    if study.empty:
        return pd.DataFrame(columns=[*IDENTITY, *COST, *PROVENANCE])
    final = final_rows(study, folder).reset_index(drop=True)
    times = latest_run_times(folder)
    added = {col: [times[col].get(r) if col in times else None for r in final["run_id"]] for col in COST}
    added["code"] = [recorded_fingerprint(folder / "runs" / r) or "unknown" for r in final["run_id"]]
    added["episodes_sha256"] = [digest(folder / "runs" / r / "episodes.parquet") for r in final["run_id"]]
    extras = pd.DataFrame([policy_extra(folder / "runs" / r) for r in final["run_id"]], index=final.index)
    final = pd.concat([final, pd.DataFrame(added, index=final.index), extras], axis=1)  # at once: not fragmented
    first = [c for c in (*IDENTITY, "episode", "eval_episodes") if c in final.columns]
    last = [*COST, *PROVENANCE]
    middle = [c for c in final.columns if c not in first and c not in last and c not in extras.columns]
    return final[first + middle + last + list(extras.columns)]


def read_ledger(path: Path) -> pd.DataFrame:
    """A ledger CSV (exit 2 with one line when it is not one)."""
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        fail(f"{path}: no such ledger")
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        fail(f"{path}: not a ledger CSV ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
    missing = [c for c in (*IDENTITY, "eval_episodes", *PROVENANCE) if c not in frame.columns]
    if missing:
        fail(f"{path}: not a ledger (no column {missing[0]!r})")
    return frame



def add(folder: Path, path: Path) -> str:
    if not (folder / "manifest.json").is_file():
        fail(f"{folder}: no study folder (no manifest.json)")
    new = study_rows(folder)
    old = read_ledger(path) if path.exists() else None
    if old is not None:
        known = dict(zip(old["run_id"], old["episodes_sha256"]))
        clash = [r for r, d in zip(new["run_id"], new["episodes_sha256"]) if r in known and known[r] != d]
        if clash:
            def where(frame):
                value = frame.loc[frame["run_id"] == clash[0], "machine"].iloc[0] if "machine" in frame else None
                return value if isinstance(value, str) and value else "not recorded"

            fail(f"{path}: run {clash[0]} is in the ledger with another episodes digest (two computations "
                 f"of one run disagree; machines: ledger {where(old)}, study {where(new)})")
        new = new[~new["run_id"].isin(known)]
        merged = pd.concat([old, new], ignore_index=True)
    else:
        merged = new
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    merged.to_csv(tmp, index=False)
    os.replace(tmp, path)  # a killed add leaves the old ledger whole
    return f"{path}: {len(new)} runs added, {len(merged)} in all"


def tables(path: Path) -> str:
    from abm.reports.seed002 import tables_markdown

    ledger = read_ledger(path)
    if ledger.empty:
        return f"{path}: no runs yet"
    lines = [tables_markdown(ledger), "## Cost", "",
             "| group | method | runs | CPU-s per run (median, range) | CPU-s in all | wall-s in all |",
             "|---|---|---|---|---|---|"]
    for (group, config), rows in ledger.groupby(["group", "config"], sort=False):
        cpu = pd.to_numeric(rows.get("cpu_s"), errors="coerce")
        wall = pd.to_numeric(rows.get("wall_s"), errors="coerce")
        lines.append(f"| {group} | {config} | {len(rows)} | {cpu.median():.0f} ({cpu.min():.0f}-{cpu.max():.0f}) | "
                     f"{cpu.sum():.0f} | {wall.sum():.0f} |")
    cpu = pd.to_numeric(ledger.get("cpu_s"), errors="coerce")
    lines += ["", f"{len(ledger)} runs, {cpu.sum():.0f} CPU-s ({cpu.sum() / 3600:.2f} CPU-hours)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    a = sub.add_parser("add", help="append a study folder's finished runs to a ledger")
    a.add_argument("folder")
    a.add_argument("ledger")
    t = sub.add_parser("tables", help="seed tables and cost per method of a ledger")
    t.add_argument("ledger")
    args = ap.parse_args(argv)
    from abm.errors import UserError

    try:
        out = add(Path(args.folder), Path(args.ledger)) if args.command == "add" else tables(Path(args.ledger))
    except UserError as exc:
        fail(str(exc))
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
