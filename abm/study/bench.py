"""Study benchmark: one 16-run study on 1 and 2 local Dask workers and in a plain loop.

Reported numbers (``abm bench`` calls ``study_speedup_benchmark``):
  study_speedup_2_workers   wall(1 worker) / wall(2 workers)        (target >= 1.6 on 2 cores)
  dask_overhead_per_run_s   (wall(1 worker) - wall(plain loop)) / runs
Every wall time covers the same ``run_study`` call (skip checks, runs, atomic writes,
aggregation) on a fresh study folder; cluster start-up is timed separately
(``dask_cluster_start_s``) because a study pays it once, not per run. Workers and the plain
loop are warmed with one throw-away run first, so imports and the Adult data load are not
counted as per-run cost on either side.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from abm.config import validate_scenario_dict
from abm.runner import execute
from abm.study.execute import local_client, run_study
from abm.study.spec import Study, study_from_dict


def bench_study(n_runs: int = 16, episodes: int = 20, population: int = 1500) -> Study:
    """An inline 4-configuration Eutopia study with ``n_runs / 4`` seeds per configuration."""
    if n_runs < 4 or n_runs % 4:
        raise ValueError(f"n_runs must be a positive multiple of 4, got {n_runs}")
    doc = {
        "study": {"name": "bench", "seed": 7, "episodes": episodes, "seeds": n_runs // 4},
        "base": {"family": "eutopia", "name": "bench",
                 "population": {"n_male": population, "n_female": population}},
        "grid": {"arrivals.base_slope": [0.01, 0.03]},
        "policies": [{"name": "approve_all"}, {"name": "random", "p": 0.5}],
    }
    return study_from_dict(doc, "bench-study")


def _warm_up() -> bool:
    """Import the engine and load the population data in this process (one tiny run)."""
    execute(validate_scenario_dict({"family": "eutopia", "population": {"n_male": 50, "n_female": 50},
                                    "episodes": {"count": 1}, "outputs": {"events": False}}))
    return True


def study_speedup_benchmark(n_runs: int = 16, episodes: int = 20, population: int = 1500,
                            workdir: str | Path | None = None) -> dict[str, Any]:
    """Time the same study serially and on 1 and 2 local workers; return the ratios."""
    study = bench_study(n_runs, episodes, population)
    root = Path(tempfile.mkdtemp(prefix="abm-study-bench-", dir=workdir))
    walls: dict[str, float] = {}
    starts: list[float] = []
    try:
        _warm_up()
        t0 = time.perf_counter()
        serial = run_study(study, root / "loop", workers=0, quiet=True)
        walls["loop"] = time.perf_counter() - t0
        for n in (1, 2):
            t0 = time.perf_counter()
            with local_client(n, root / f"scratch-{n}") as client:
                client.run(_warm_up)
                starts.append(time.perf_counter() - t0)
                t1 = time.perf_counter()
                outcome = run_study(study, root / f"dask-{n}", client=client, quiet=True)
                walls[f"dask_{n}"] = time.perf_counter() - t1
            if outcome.succeeded != n_runs:
                raise RuntimeError(f"benchmark study on {n} workers: {outcome.failures}")
        if serial.succeeded != n_runs:
            raise RuntimeError(f"benchmark study in a loop: {serial.failures}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "study_speedup_2_workers": walls["dask_1"] / walls["dask_2"],
        "dask_overhead_per_run_s": (walls["dask_1"] - walls["loop"]) / n_runs,
        "study_runs": n_runs,
        "study_wall_loop_s": walls["loop"],
        "study_wall_1_worker_s": walls["dask_1"],
        "study_wall_2_workers_s": walls["dask_2"],
        "dask_cluster_start_s": max(starts),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }
