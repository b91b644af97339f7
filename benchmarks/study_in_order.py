"""Compute a study's runs in a chosen order (cheapest methods first, every seed of a method
before the next method) into the folder ``abm study`` uses, so that a session that cannot run
the whole design still ends with whole methods at every seed (docs/MODEL.md, "Table 1 at 10
seeds"). Each run is ``abm study``'s own task (``abm.study.execute.run_task``: the same run
folder, the same ``run_times.csv`` line); the order changes nothing in any run. ``abm study``
on the same file afterwards reuses every finished run and computes the rest.

    nice python benchmarks/study_in_order.py scenarios/studies/table1.yaml --order max_util,eo_threshold,ppo --workers 2

``--order``: policies by name, or NAME:VARIANT for one variant (``bisim_ppo:reward_only``); a
policy's runs go replicate by replicate (all its configurations of replicate 0, then 1, ...);
the runs no item names follow in the study's order. ``--skip LEDGER`` leaves out the runs a
ledger of earlier sittings holds (``benchmarks/study_ledger.py``: their rows stand for them). ``--out`` (default the study's folder under
outputs/studies). Bad values exit 2 with one line.
"""
from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path

from oneline import OneLineParser


def matches(item: str, label: str) -> bool:
    """Whether order item NAME or NAME:VARIANT names the policy of study label ``label``
    (``bisim_ppo(backend=lean,...,variant=full)``)."""
    name, _, variant = item.partition(":")
    if not (label == name or label.startswith(name + "(")):
        return False
    return not variant or f"variant={variant}" in label[len(name):]


def ordered(runs, order: list[str]):
    """``runs`` with those the items of ``order`` name first (in its order, each by replicate);
    the rest after, in the study's order."""
    def key(item):
        index, spec = item
        label = str(spec.columns.get("policy", ""))
        rank = next((i for i, it in enumerate(order) if matches(it, label)), len(order))
        return (rank, spec.replicate if rank < len(order) else 0, index)
    return [spec for _, spec in sorted(enumerate(runs), key=key)]


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("study")
    ap.add_argument("--order", default="")
    ap.add_argument("--workers", default="1")
    ap.add_argument("--out", default=None)
    ap.add_argument("--skip", default=None, metavar="LEDGER", help="leave out the runs this ledger holds")
    args = ap.parse_args(argv)
    try:
        workers = int(args.workers)
    except ValueError:
        workers = 0
    if not 1 <= workers <= 64:
        print(f"--workers: must be a whole number from 1 to 64, got {args.workers!r}", file=sys.stderr)
        return 2

    from abm.errors import UserError
    from abm.study.execute import _clean_leftovers, _locked, write_manifest
    from abm.study.spec import load_study

    try:
        study = load_study(args.study)
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 2
    labels = {str(spec.columns.get("policy", "")) for spec in study.runs}
    order = [item for item in args.order.split(",") if item]
    unknown = [item for item in order if not any(matches(item, label) for label in labels)]
    if unknown:
        names = sorted({label.split("(", 1)[0] for label in labels})
        print(f"--order: {unknown[0]!r} names no policy of {args.study} ({', '.join(names)})", file=sys.stderr)
        return 2
    skip: set[str] = set()
    if args.skip:
        from study_ledger import read_ledger  # exits 2 with one line for a bad ledger

        skip = set(read_ledger(Path(args.skip))["run_id"])
    folder = Path(args.out or Path("outputs") / "studies" / study.name)
    runs_dir, failed_dir = folder / "runs", folder / "failed"
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
        failed_dir.mkdir(exist_ok=True)
        with _locked(folder):  # as abm study: one writer per study folder
            _clean_leftovers(folder)  # a killed run's temporary folder
            write_manifest(study, folder)
            _compute(study, folder, order, workers, skip)
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{folder}: cannot create the study folder ({exc.strerror})", file=sys.stderr)
        return 2
    return 0


def _compute(study, folder: Path, order: list[str], workers: int, skip: set[str] = frozenset()) -> None:
    from abm.study.execute import is_complete, record_time, run_task

    runs_dir, failed_dir = folder / "runs", folder / "failed"
    tasks = [{"run_id": s.run_id, "scenario": s.scenario, "runs_dir": str(runs_dir.resolve()),
              "failed_dir": str(failed_dir.resolve())}
             for s in ordered(study.runs, order) if s.run_id not in skip and not is_complete(runs_dir / s.run_id)]
    backend = f"benchmarks/study_in_order.py, {workers} process{'es' * (workers > 1)}"
    held = f" ({len(skip & {s.run_id for s in study.runs})} held by the ledger)" if skip else ""
    print(f"{len(tasks)} of {len(study.runs)} runs to compute into {folder}{held}", flush=True)
    with multiprocessing.get_context("spawn").Pool(workers, initializer=_single_thread) as pool:
        for result in pool.imap_unordered(run_task, tasks, chunksize=1):
            record_time(folder, result, backend)
            print(f"{result['run_id']}: {result['status']}, {result['wall_s']:.0f} s wall, "
                  f"{result['cpu_s']:.0f} CPU-s", flush=True)


def _single_thread() -> None:
    import torch

    torch.set_num_threads(1)  # as a Dask worker of the local cluster (one thread per worker)


if __name__ == "__main__":
    raise SystemExit(main())
