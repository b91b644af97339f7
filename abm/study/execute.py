"""Running a study: skip what is finished, execute the rest on Dask, record failures.

Backends: a ``distributed.LocalCluster`` on this machine (default: one single-threaded worker
process per core, scratch inside the study folder, closed and removed at the end), an
existing scheduler (``scheduler="tcp://HOST:PORT"``; the study folder must then be on a file
system the workers see at the same path), an existing ``distributed.Client`` (tests, the
benchmark), or ``workers=0``: a plain loop in this process. With none of these (the default),
``AutoBackend`` decides: the runs start in process, and a local cluster takes the rest only
when the runs left would take longer in process than the cluster's measured break-even
(``CLUSTER_START_S``, ``WARMUP_FACTOR``; benchmarks/RESULTS.md, "Studies: in process or on a
local cluster").
Every path computes the same files: a run is seeded by its id, not by where it runs.

Safety. Each run is written by the worker that computed it, through ``run_to_folder`` (temp
name, rename on success; ``summary.json`` last), so a study killed at any moment — SIGKILL
included — leaves only complete run folders and ``.tmp-*`` leftovers, which the next start
removes. A run that raises is recorded in ``failed/<run id>.json`` (error and traceback) and
the study goes on. A lock file keeps two studies from writing one folder at once. A finished
run whose files are damaged (``abm.runner.run_folder_problem``: a truncated or overwritten
parquet file) is set aside as ``runs/<id>.corrupt`` and recomputed; it never blocks the study.
A study refused before its cluster is up (a bad ``--workers``, an unreachable ``--scheduler``)
removes the folder (or the study files) it created: nothing is left behind.

Order. Runs start in the study's order, or with ``order`` the named policies' runs first, each
at every replicate before the next (``abm.study.spec.order_runs``); ``skip`` leaves out runs held
elsewhere (a ledger kept over sittings). Neither changes any run.

Plugins. Each task carries the command's plugin consent (``abm.plugins.current()``: its
``--plugins`` folders and the names the user typed, as absolute paths), which ``run_task``
applies on the worker, so a worker imports a plugin from exactly where the command may.

Cost. Each computed run's wall and CPU time, as its worker measured them, is appended to
``run_times.csv`` in the study folder; ``runs.csv`` and the report's "Time" section read it.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import functools
import gc
import io
import json
import logging
import math
import os
import platform
import resource
import shutil
import signal
import sys
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from abm import plugins
from abm.config import validate_scenario_dict
from abm.errors import UserError, read_user_file
from abm.provenance import is_stale, set_aside
from abm.runner import first_missing, is_complete, run_folder_problem, run_to_folder, set_aside_corrupt
from abm.study.aggregate import OLD_TIME_COLUMNS, TIME_COLUMNS, TIMES, aggregate as aggregate_runs
from abm.study.spec import RunSpec, Study, order_runs

SCRATCH = ".dask-scratch"
LOCK = ".lock"
# a run that cannot write its folder for these reasons says nothing about the run: every later
# run would fail the same way, so the study stops (exit 2) instead of recording failures
OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


@dataclass
class StudyOutcome:
    """What one ``run_study`` call did."""

    folder: Path
    total: int
    succeeded: int = 0  # computed by this call
    skipped: int = 0  # already finished before this call
    stale: int = 0  # of ``skipped``: computed by other code (abm.provenance), kept
    recomputed_stale: int = 0  # stale runs set aside and queued again (--recompute-stale)
    corrupt: int = 0  # finished runs with a damaged file: set aside (runs/<id>.corrupt) and queued again
    failed: int = 0  # failed in this call, plus earlier failures not retried
    failed_before: int = 0  # of ``failed``: earlier failures left alone (no --retry-failed)
    held: int = 0  # not finished here, held elsewhere (``skip``: a ledger of earlier sittings), not computed
    wall_s: float = 0.0
    backend: str = ""
    choice: str = ""  # the default backend's choice and why (AutoBackend), one line
    failures: dict[str, str] = field(default_factory=dict)  # run id -> one-line error

    def summary_line(self, name: str) -> str:
        before = f" ({self.failed_before} from earlier; --retry-failed reruns them)" if self.failed_before else ""
        stale = (f"; {self.stale} of the skipped were computed by other code (--recompute-stale reruns them)"
                 if self.stale else "")
        again = f"; {self.recomputed_stale} stale runs set aside and recomputed" if self.recomputed_stale else ""
        corrupt = (f"; {self.corrupt} finished runs had a corrupted file: set aside (runs/<id>.corrupt) and "
                   f"recomputed" if self.corrupt else "")
        held = f", {self.held} held by --skip" if self.held else ""
        return (f"study {name}: {self.total} runs: {self.succeeded} succeeded, {self.skipped} skipped{held}, "
                f"{self.failed} failed{before} in {self.wall_s:.1f}s [{self.backend}]{stale}{again}{corrupt} "
                f"-> {self.folder}")


# ---------------------------------------------------------------------------------------------
# The task a worker runs


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".tmp-{path.name}-{uuid.uuid4().hex[:8]}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename is None:  # a failed write() names no file: name it (the CLI's error line shows it)
            exc.filename = str(path)
        raise


def record_failure(failed_dir: Path, run_id: str, error: str, trace: str) -> None:
    failed_dir.mkdir(parents=True, exist_ok=True)
    record = {"run_id": run_id, "error": error, "traceback": trace,
              "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": os.uname().nodename}
    _atomic_write(failed_dir / f"{run_id}.json", json.dumps(record, indent=2))


def cpu_seconds() -> float:
    """CPU seconds of this process (every thread) and of its children that have ended and been
    waited for: a Bisimulator's helper processes (``ABM_PHASE_WORKERS``) count to the run."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _clock() -> tuple[float, float, float]:
    return time.time(), time.perf_counter(), cpu_seconds()


@functools.cache
def _processor() -> str:
    """The processor's model name (read once per process: it does not change under a worker)."""
    model = ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "")
    return model or platform.processor() or platform.machine()


def machine() -> str:
    """The processor a run was computed on, and torch's CPU kernels where torch is loaded
    (``Intel(R) Xeon(R) Processor; torch 2.13.0 AVX512``). A learned lender's training is
    deterministic on one machine, not across processors: float kernels differ (docs/MODEL.md,
    "Table 1 at 10 seeds"), so a run's digest is reproduced where this label is the same."""
    model = _processor()
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            model += f"; torch {torch.__version__.split('+')[0]} {torch.backends.cpu.get_cpu_capability()}"
    return model


def _cost(start: tuple[float, float, float]) -> dict[str, Any]:
    """What a run cost, measured on its worker: wall and CPU seconds (the worker process's, every
    thread of it, and its helper processes'), its start (UTC), the machine's 1-minute load
    average as it ended and the processor (``machine``)."""
    epoch, wall, cpu = start
    return {"wall_s": time.perf_counter() - wall, "cpu_s": cpu_seconds() - cpu,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)), "host": os.uname().nodename,
            "load_1m": os.getloadavg()[0], "machine": machine()}


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Compute one run into ``runs/<run id>`` (on a worker); never raises for a failing run. The
    result carries the run's cost (``_cost``), which ``run_study`` keeps in ``run_times.csv``."""
    run_id = task["run_id"]
    runs_dir, failed_dir = Path(task["runs_dir"]), Path(task["failed_dir"])
    start = _clock()
    try:
        with plugins.allowed(task.get("plugins") or plugins.Consent()):  # the study's consent (--plugins), here too
            scenario = validate_scenario_dict(task["scenario"], f"run {run_id}")
            run_to_folder(scenario, runs_dir, name=run_id, reuse=True, stale="reuse")  # run_study decides on stale runs
    except Exception as exc:  # a failing run is data for the study, not a reason to stop it
        for leftover in runs_dir.glob(f".tmp-{run_id}-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        error = f"{type(exc).__name__}: {exc}".replace("\n", "; ")
        if getattr(exc, "errno", None) in OUTPUT_ERRNOS:  # the output folder's fault, not the run's
            return {"run_id": run_id, "status": "failed", "error": str(exc), "output_error": True, **_cost(start)}
        record_failure(failed_dir, run_id, error, traceback.format_exc())
        return {"run_id": run_id, "status": "failed", "error": error, **_cost(start)}
    (failed_dir / f"{run_id}.json").unlink(missing_ok=True)
    return {"run_id": run_id, "status": "ok", **_cost(start)}


# ---------------------------------------------------------------------------------------------
# Backends: each yields one result dict per task as runs finish


def _serial(tasks: list[dict]) -> Iterable[dict]:
    for task in tasks:
        yield run_task(task)


def _on_client(client, tasks: list[dict]) -> Iterable[dict]:
    """Run ``tasks`` on a Dask client, started in the order given (``run_study``'s ``order``): no
    more tasks are submitted than the cluster has threads, the next one as one finishes, so the
    scheduler never holds a backlog it could reorder; a worker waits one round trip (milliseconds)
    between runs of seconds to hours."""
    from distributed import as_completed

    tag = uuid.uuid4().hex[:8]
    pending = iter(enumerate(tasks))
    futures: dict[Any, dict] = {}

    def fill(running) -> None:
        window = max(1, sum(client.nthreads().values()))  # workers may join or leave a scheduler's cluster
        while len(futures) < window:
            item = next(pending, None)
            if item is None:
                return
            i, task = item
            future = client.submit(run_task, task, key=f"abm-run-{task['run_id']}-{tag}", pure=False,
                                   priority=len(tasks) - i)
            futures[future] = task
            running.add(future)

    running = as_completed()
    try:
        fill(running)
        for future in running:
            task = futures.pop(future)
            try:
                result = future.result()
            except Exception as exc:  # the worker died (KilledWorker) or the task was lost
                error = f"{type(exc).__name__}: {exc}".replace("\n", "; ")
                record_failure(Path(task["failed_dir"]), task["run_id"], error, traceback.format_exc())
                result = {"run_id": task["run_id"], "status": "failed", "error": error}
            future.release()
            fill(running)  # the next run starts before this one's result is recorded
            yield result
    finally:
        client.cancel(list(futures))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# What a LocalCluster of single-threaded workers costs beyond the runs, measured on 2 cores
# (benchmarks/RESULTS.md, "Studies: in process or on a local cluster"): its start (1.0-1.3 s, each
# worker process importing abm) and shutdown (0.25 s); and each worker's first run warming up
# (imports, the data sets), in parallel, 1.4-2.5 times the warm-up this process's first run showed.
CLUSTER_START_S = 1.5
WARMUP_FACTOR = 2.0
IN_PROCESS = "in process, no dask"


@dataclass(frozen=True)
class AutoBackend:
    """The default backend's rule (no ``workers``, no ``scheduler``, no ``client``).

    The runs start in this process; the rule is weighed after each from the second on (the
    first carries this process's warm-up: imports, the data sets). A run is estimated at the
    mean wall time of the runs after the first, the warm-up ``w`` at the first's excess over
    it. A local cluster of ``n = min(cores, runs left)`` workers costs ``F = start_s +
    warmup_factor * w`` beyond the runs, and takes ``F + work / n`` for what takes ``work`` in
    process: it pays when ``work > F * n / (n - 1)``, the break-even. Above it, the cluster
    starts for the runs left; below it, the next run is computed here and the rule weighed
    again, so a study below the break-even finishes in process. One worker (one core, one run
    left) never pays. Every input is injectable (``start_s``, ``warmup_factor``, ``cores``)."""

    start_s: float = CLUSTER_START_S
    warmup_factor: float = WARMUP_FACTOR
    cores: int | None = None  # None: the cores this process may use

    def workers(self, pending: int) -> int:
        return max(1, min(self.cores or _cores(), pending))

    def break_even_s(self, pending: int, warmup_s: float = 0.0) -> float:
        n = self.workers(pending)
        return math.inf if n < 2 else (self.start_s + self.warmup_factor * warmup_s) * n / (n - 1)

    @staticmethod
    def per_run_and_warmup(walls: list[float]) -> tuple[float, float]:
        """A run's seconds (the mean after the first) and the warm-up (the first's excess over it);
        with one run, its time and no warm-up estimate."""
        if len(walls) < 2:
            return (walls[0] if walls else 0.0), 0.0
        per_run = sum(walls[1:]) / (len(walls) - 1)
        return per_run, max(0.0, walls[0] - per_run)

    def decide(self, walls: list[float], pending: int) -> tuple[bool, float, float, float]:
        """``(start a cluster?, seconds a run, estimated seconds left in process, break-even)``
        after the runs that took ``walls`` seconds in process, with ``pending`` runs left."""
        per_run, warmup = self.per_run_and_warmup(walls)
        estimate, even = pending * per_run, self.break_even_s(pending, warmup)
        # one run: its time is mostly warm-up for short runs; measure one more before deciding
        return len(walls) >= 2 and estimate > even, per_run, estimate, even


def _auto(tasks: list[dict], rule: AutoBackend, scratch: Path, outcome: StudyOutcome,
          say: Callable[[str], None]) -> Iterable[dict]:
    """``AutoBackend``'s backend: runs in process while the runs left are below the break-even,
    then (if ever) a local cluster for the rest. ``outcome.backend`` names the path each result
    came by (``run_times.csv``); ``say`` gets one line: the path and why."""
    walls: list[float] = []
    outcome.backend = IN_PROCESS
    for i, task in enumerate(tasks):
        result = run_task(task)
        yield result
        walls.append(float(result.get("wall_s", 0.0)))
        pending = len(tasks) - i - 1
        if not pending:
            break
        cluster, per_run, estimate, even = rule.decide(walls, pending)
        if not cluster:
            continue
        n = rule.workers(pending)
        say(f"backend: a local cluster of {n} workers for the {pending} runs left: ~{estimate:.0f}s in process "
            f"({per_run:.1f}s a run) is above the break-even {even:.0f}s (--workers 0 keeps a study in process)")
        with local_client(n, scratch) as client:
            outcome.backend = f"dask local cluster, {n} worker{'s' * (n > 1)}"
            yield from _on_client(client, tasks[i + 1:])
        outcome.backend = f"{len(walls)} in process, then {outcome.backend}"
        return
    n = rule.workers(len(tasks))
    _, warmup = rule.per_run_and_warmup(walls)
    why = ("one run to compute" if len(tasks) == 1 else "one core" if n < 2 else
           f"the runs left stayed below a {n}-worker local cluster's break-even "
           f"(~{rule.break_even_s(len(tasks), warmup):.0f}s)")
    say(f"backend: in process, {len(walls)} runs in {sum(walls):.1f}s: {why} (--workers N starts a cluster)")


def _not_the_sync_cancel_race(record: logging.LogRecord) -> bool:
    """A ``tornado.application`` log filter. On Ctrl+C, distributed's ``sync()`` (2026.8) schedules
    a ``cancel`` callback that reads its ``future`` before its coroutine has set it when the
    interrupt comes first; tornado then logs that callback's NameError with a traceback. The
    interrupt itself is handled (``Interrupted``: one line, exit 130), so that one record is
    dropped; every other record passes."""
    exc = record.exc_info[1] if record.exc_info else None
    tb = getattr(exc, "__traceback__", None)
    if not isinstance(exc, NameError) or tb is None:
        return True
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return not (code.co_name == "cancel" and Path(code.co_filename).parts[-2:] == ("distributed", "utils.py"))


logging.getLogger("tornado.application").addFilter(_not_the_sync_cancel_race)  # for every client this module opens


@contextlib.contextmanager
def local_client(n_workers: int, scratch: Path):
    """A LocalCluster of single-threaded worker processes with scratch in ``scratch``."""
    from distributed import Client, LocalCluster

    scratch.mkdir(parents=True, exist_ok=True)
    try:
        with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
                          local_directory=str(scratch), silence_logs=logging.ERROR, scheduler_port=0,
                          scheduler_kwargs={"dashboard_address": ":0"},  # its HTTP routes: any free port, no
                          preload=[__name__]) as cluster, Client(cluster) as client:  # warning when 8787 is taken
            yield client
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def dask_setup(worker) -> None:
    """Dask's preload hook, run in each local worker process as it starts (``local_client``): Ctrl+C
    in a terminal reaches the whole process group, and this process stops the workers, so a worker
    ignores it (instead of printing a traceback each)."""
    with contextlib.suppress(ValueError):  # not the main thread: nothing to change
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def remote_client(address: str, timeout_s: float = 20.0):
    from distributed import Client

    try:
        client = Client(address, timeout=timeout_s)
    except (OSError, TimeoutError, ValueError) as exc:
        # the half-built Client is garbage in a reference cycle; its __del__ closes its loop runner.
        # Collected later, it can run inside the next Client's loop-runner thread start, which
        # holds that lock: a deadlock (seen in the suite). Collect it now, here, where nothing is held.
        gc.collect()
        reason = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        raise UserError(f"--scheduler {address}: cannot connect ({reason})") from None
    try:
        yield client
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------
# Progress


@contextlib.contextmanager
def _progress(name: str, total: int, done: int, quiet: bool):
    """Yields ``update(result)``: a rich bar on a terminal; off a terminal (a log file, nohup), a
    plain line on stderr each time another tenth of the runs is done; nothing when ``quiet``."""
    if quiet:
        yield lambda result: None
        return
    if not sys.stderr.isatty():
        started, todo = time.monotonic(), max(total - done, 1)
        new = failed = tenths = 0  # runs finished by this call, of them failed, tenths of todo reported

        def line(result: dict) -> None:
            nonlocal new, failed, tenths
            new += 1
            failed += result["status"] != "ok"
            if new * 10 // todo > tenths or done + new == total:
                tenths = new * 10 // todo
                elapsed = time.monotonic() - started
                left = elapsed / new * (total - done - new)
                print(f"study {name}: {done + new}/{total} runs done, {failed} failed, "
                      f"{elapsed / 60:.1f} min elapsed, ~{left / 60:.1f} min left", file=sys.stderr, flush=True)

        yield line
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("failed {task.fields[failed]}"), TimeElapsedColumn(), TextColumn("ETA"),
                  TimeRemainingColumn(), console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(f"study {name}", total=total, completed=done, failed=0)
        failed = 0

        def update(result: dict) -> None:
            nonlocal failed
            failed += result["status"] != "ok"
            bar.update(task, advance=1, failed=failed)

        yield update


# ---------------------------------------------------------------------------------------------
# The study


@contextlib.contextmanager
def _locked(folder: Path):
    try:
        handle = open(folder / LOCK, "w")
    except OSError as exc:
        raise UserError(f"{folder}: cannot write the study folder ({exc.strerror})") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise UserError(f"{folder}: another study is running in this folder") from None
    try:
        yield
    finally:
        handle.close()


def _clean_leftovers(folder: Path) -> None:
    """Remove what a killed study left behind: temp run folders/files and Dask scratch."""
    for sub in ("runs", "failed", "."):
        for leftover in (folder / sub).glob(".tmp-*"):
            shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)
    shutil.rmtree(folder / SCRATCH, ignore_errors=True)


def record_time(folder: Path, result: dict[str, Any], backend: str) -> None:
    """Append one run's cost to ``run_times.csv`` (one line per computed run, never rewritten: a
    resumed or recomputed study keeps the earlier lines). A result without a cost (a worker that
    died) adds nothing. One ``write`` per line, so a killed study leaves at most a torn last line,
    which ``abm.study.aggregate.read_run_times`` skips. A file begun before the ``machine`` column
    keeps its columns (the new lines say no machine)."""
    if "wall_s" not in result or "cpu_s" not in result:
        return
    path = folder / TIMES
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    fields = [result["run_id"], result["status"], result.get("started", ""), f"{result['wall_s']:.3f}",
              f"{result['cpu_s']:.3f}", f"{result.get('load_1m', float('nan')):.2f}", result.get("host", ""),
              backend, result.get("machine", "")]
    if not path.is_file() or path.stat().st_size == 0:
        writer.writerow(TIME_COLUMNS)
    elif _header(path) == ",".join(OLD_TIME_COLUMNS):
        fields = fields[:len(OLD_TIME_COLUMNS)]
    writer.writerow(fields)
    with open(path, "a") as handle:
        handle.write(buf.getvalue())


def _header(path: Path) -> str:
    with contextlib.suppress(OSError, UnicodeDecodeError):
        with open(path) as handle:
            return handle.readline().rstrip("\r\n")
    return ""


def write_manifest(study: Study, folder: Path) -> None:
    _atomic_write(folder / "study.yaml", yaml.safe_dump(study.document, sort_keys=False))
    manifest = {"name": study.name, "seed": study.seed, "source": study.source, "grid_keys": study.grid_keys,
                "runs": [spec.to_json() for spec in study.runs]}
    _atomic_write(folder / "manifest.json", json.dumps(manifest, indent=1))


def read_held(path: str | Path) -> set[str]:
    """The run ids of a CSV with a ``run_id`` column (a ledger: ``benchmarks/study_ledger.py``;
    a study's ``runs.csv``): the runs ``abm study --skip`` leaves out. UserError naming the file."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such ledger (--skip)")
    data = read_user_file(path, "--skip")  # a regular file of bounded size: a FIFO or /dev/zero never hangs
    try:
        frame = pd.read_csv(io.BytesIO(data), usecols=lambda column: column == "run_id", dtype=str, index_col=False)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{path}: not a ledger CSV (--skip: {reason})") from None
    if "run_id" not in frame.columns:
        raise UserError(f"{path}: not a ledger (--skip: no column 'run_id')")
    return set(frame["run_id"].dropna())


def skip_notices(held: set[str] | frozenset[str], study: Study, source: str = "--skip") -> list[str]:
    """Warnings about the run ids ``--skip`` gave (``read_held``): ids that hold a quote, comma or
    line break (a ledger whose quoting is broken joins rows), and ids that are no run of ``study``."""
    notes = []
    odd = sorted(r for r in held if any(c in r for c in '",\r\n'))
    if odd:
        notes.append(f"{source}: {len(odd)} run id(s) hold a quote, comma or line break (broken CSV quoting?), "
                     f"e.g. {odd[0]!r}")
    unknown = held - {spec.run_id for spec in study.runs}
    if held and unknown == held:
        notes.append(f"{source}: none of its {len(held)} run ids is a run of study {study.name}; nothing is held")
    elif unknown:
        notes.append(f"{source}: {len(unknown)} of its {len(held)} run ids are no run of study {study.name} "
                     f"(ignored)")
    return notes


def run_study(study: Study, out_dir: str | Path, *, scheduler: str | None = None, workers: int | None = None,
              client=None, retry_failed: bool = False, recompute_stale: bool = False, quiet: bool = False,
              on_result: Callable[[dict], None] | None = None, aggregate: bool = True,
              order: list[str] | tuple[str, ...] = (), skip: set[str] | frozenset[str] = frozenset(),
              auto: AutoBackend | None = None, on_backend: Callable[[str], None] | None = None) -> StudyOutcome:
    """Run every unfinished run of ``study`` into ``out_dir``; aggregate; return the counts.

    Backend: ``client``, else ``scheduler``, else ``workers`` (0: in process; N: a local cluster
    of N), else the default, ``auto`` (``AutoBackend()``: in process below the measured
    break-even, a local cluster above it), which tells ``on_backend`` its choice in one line
    (also kept as ``outcome.choice``).

    ``order``: policies (NAME or NAME:VARIANT) whose runs start first, each at every replicate
    before the next (``abm.study.spec.order_runs``); the order changes no run. ``skip``: run ids
    held elsewhere (a ledger of earlier sittings on machines that kept nothing): not computed,
    counted as ``held``; a finished run folder of one is still reused."""
    started = time.perf_counter()
    folder = Path(out_dir)
    runs_dir, failed_dir = folder / "runs", folder / "failed"
    runs = order_runs(study, order)  # refused before anything is written
    if workers is not None and workers < 0:  # refused before anything is written
        raise UserError(f"--workers: must be >= 0 (0 = in this process, no Dask), got {workers}")
    if scheduler and workers is not None:
        raise UserError("--workers sizes the local cluster; with --scheduler the cluster's own workers run the study")
    # what this call creates; removed again if it fails before the cluster is up (a bad scheduler)
    created = first_missing(folder)
    fresh = [p for p in (runs_dir, failed_dir, folder / "manifest.json", folder / "study.yaml", folder / LOCK)
             if not p.exists()]
    outcome = StudyOutcome(folder=folder, total=len(study.runs))
    backend_up = False
    try:
        try:
            runs_dir.mkdir(parents=True, exist_ok=True)
            failed_dir.mkdir(exist_ok=True)
        except OSError as exc:
            raise UserError(f"{folder}: cannot create the study folder ({exc.strerror})") from None
        with _locked(folder):
            _clean_leftovers(folder)
            write_manifest(study, folder)
            todo: list[RunSpec] = []
            for spec in runs:
                record = failed_dir / f"{spec.run_id}.json"
                run_dir = runs_dir / spec.run_id
                complete = is_complete(run_dir)
                if complete and run_folder_problem(run_dir) is not None:  # a damaged file: never counts as done
                    set_aside_corrupt(run_dir)  # kept beside as <id>.corrupt; recomputed below
                    outcome.corrupt += 1
                    complete = False
                stale = complete and is_stale(run_dir)
                if stale and recompute_stale:
                    set_aside(run_dir)  # kept beside as <id>.stale-<fingerprint>; the manifest no longer names it
                    outcome.recomputed_stale += 1
                    todo.append(spec)
                elif complete:
                    record.unlink(missing_ok=True)
                    outcome.skipped += 1
                    outcome.stale += stale
                elif spec.run_id in skip:
                    outcome.held += 1
                elif record.is_file() and not retry_failed:
                    outcome.failed += 1
                    outcome.failed_before += 1
                    outcome.failures[spec.run_id] = _read_error(record)
                else:
                    todo.append(spec)
            tasks = [{"run_id": s.run_id, "scenario": s.scenario, "runs_dir": str(runs_dir.resolve()),
                      "failed_dir": str(failed_dir.resolve()), "plugins": plugins.current()} for s in todo]
            with contextlib.ExitStack() as stack:
                if not tasks:
                    outcome.backend, results = "nothing to run", iter(())
                elif client is not None:
                    outcome.backend, results = "dask client", _on_client(client, tasks)
                elif scheduler:
                    c = stack.enter_context(remote_client(scheduler))
                    outcome.backend, results = f"dask scheduler {scheduler}", _on_client(c, tasks)
                elif workers == 0:
                    outcome.backend, results = IN_PROCESS, _serial(tasks)
                elif workers is None:  # the default: in process or a local cluster, by the measured break-even
                    def say(line: str) -> None:
                        outcome.choice = line
                        if on_backend is not None:
                            on_backend(line)

                    results = _auto(tasks, auto or AutoBackend(), folder / SCRATCH, outcome, say)
                else:
                    n = max(1, min(workers, len(tasks)))
                    c = stack.enter_context(local_client(n, folder / SCRATCH))
                    outcome.backend, results = f"dask local cluster, {n} worker{'s' * (n > 1)}", _on_client(c, tasks)
                backend_up = True
                if hasattr(results, "close"):  # close the generator (cancelling futures) before the client
                    stack.callback(results.close)
                update = stack.enter_context(_progress(study.name, outcome.total,
                                                       outcome.skipped + outcome.failed_before + outcome.held,
                                                       quiet))
                for result in results:
                    if result.get("output_error"):
                        raise UserError(f"{result['error']}: study {study.name} stopped after {outcome.succeeded} "
                                        f"new runs; free space (or fix permissions) and rerun to resume")
                    try:
                        record_time(folder, result, outcome.backend)
                    except OSError as exc:  # a full disk: the run is safe in its folder; only its time is lost
                        logging.getLogger("abm.study").warning("run_times.csv: %s", exc)
                    if result["status"] == "ok":
                        outcome.succeeded += 1
                    else:
                        outcome.failed += 1
                        outcome.failures[result["run_id"]] = result["error"]
                    update(result)
                    if on_result is not None:
                        on_result(result)
            if aggregate:
                aggregate_runs(folder)
    except BaseException:
        if not backend_up:  # refused before any run started: leave nothing behind
            _remove_fresh(created, fresh)
        raise
    outcome.wall_s = time.perf_counter() - started
    return outcome


def _remove_fresh(created: Path | None, fresh: list[Path]) -> None:
    """Remove the outermost folder this call created, or else the study files it added."""
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)
        return
    for path in fresh:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()


def _read_error(record: Path) -> str:
    try:
        return str(json.loads(record.read_text()).get("error", "unknown error"))
    except (OSError, ValueError):
        return "unreadable failure record"
