"""Progress display: a rich bar on a terminal, one quiet line otherwise."""

from __future__ import annotations

import contextlib
import sys
import time


@contextlib.contextmanager
def episode_progress(total: int, label: str, quiet: bool = False):
    """Yields ``advance(row)`` to call once per episode."""
    if quiet or not sys.stderr.isatty():
        started = time.perf_counter()
        yield lambda row=None: None
        if not quiet:
            print(f"{label}: {total} episodes in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), transient=False) as bar:
        task = bar.add_task(label, total=total)
        yield lambda row=None: bar.advance(task)
