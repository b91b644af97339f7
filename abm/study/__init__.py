"""Population studies: a study file expanded into seeded runs, run on Dask (or serially), aggregated.

    spec       the study-file schema; ``load_study`` / ``study_from_dict`` -> ``Study`` of ``RunSpec``s
               with stable ids and seeds (``derive_seed``)
    execute    ``run_study``: skip finished runs, run the rest (local cluster, a scheduler, a client
               or in process; by default ``AutoBackend``: in process below a local cluster's
               measured break-even), record failures, resume after a kill; the folder's manifest
    aggregate  ``study.parquet``, ``summary.parquet``, ``runs.csv`` (``aggregate``, ``read_manifest``)
    bench      ``study_speedup_benchmark``: one study on 1 and 2 local workers and in a plain loop

Reports on a study folder live in ``abm.reports`` (which imports this package; nothing here
imports ``abm.reports``): ``abm study --report`` is ``run_study`` then ``abm.reports.render_report``.
Dask and ``distributed`` are imported only when a study runs on them.
"""

from abm.study.aggregate import aggregate, config_label, load_summary, read_manifest
from abm.study.bench import bench_study, study_speedup_benchmark
from abm.study.execute import AutoBackend, StudyOutcome, local_client, remote_client, run_study, write_manifest
from abm.study.spec import MAX_RUNS, RunSpec, Study, StudyFile, configuration_id, derive_seed, expand, load_study, \
    policy_label, study_from_dict

__all__ = ["MAX_RUNS", "AutoBackend", "RunSpec", "Study", "StudyFile", "StudyOutcome", "aggregate", "bench_study", "config_label",
           "configuration_id", "derive_seed", "expand", "load_study", "load_summary", "local_client", "policy_label",
           "read_manifest", "remote_client", "run_study", "study_from_dict", "study_speedup_benchmark",
           "write_manifest"]
