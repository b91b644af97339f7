"""docs/MODEL.md quotes the default population's numbers; they must match the code.

The numbers are parsed from the doc (the "Default population" line of the Loanly section and
the approval model of its table) and recomputed the way the quoted commands do
(``abm population scenarios/eutopia.yaml``: the run's population stream of seed 0; the world's
initial approval model), to the decimals the doc shows.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "docs" / "MODEL.md"
NUMBER = r"(-?\d+(?:\.\d+)?)"


def _close(quoted: str, value: float) -> bool:
    """``value`` rounds to the quoted text (half a unit of its last decimal)."""
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    return abs(float(quoted) - value) <= 0.5 * 10.0 ** -decimals + 1e-12


@pytest.fixture(scope="module")
def doc() -> str:
    return MODEL.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def default_world():
    from abm.build import simulation
    from abm.config import load_scenario

    return simulation(load_scenario(ROOT / "scenarios" / "eutopia.yaml")).world


def test_default_population_line_matches_the_code(doc):
    from abm.config import load_scenario
    from abm.population import generate_population

    pattern = (r"Default population \(seed 0[^)]*\): group M mean wealth " + NUMBER + r" \(\$K\), label rate "
               + NUMBER + r"; group F mean wealth " + NUMBER + r", label rate " + NUMBER)
    found = re.search(pattern, doc)
    assert found, "docs/MODEL.md: the 'Default population (seed 0 ...): group M mean wealth ...' line is missing"
    frame = generate_population(load_scenario(ROOT / "scenarios" / "eutopia.yaml"))
    by_group = frame.groupby("group_name", observed=True)
    code = [by_group["wealth"].mean()["M"], by_group["label"].mean()["M"],
            by_group["wealth"].mean()["F"], by_group["label"].mean()["F"]]
    for quoted, value, what in zip(found.groups(), code, ("M wealth", "M label rate", "F wealth", "F label rate")):
        assert _close(quoted, float(value)), f"MODEL.md quotes {what} {quoted}, the code gives {value:.4f}"


def test_default_approval_model_matches_the_code(doc, default_world):
    pattern = (r"on the default population theta_x = " + NUMBER + r", theta_g = " + NUMBER + r", b = " + NUMBER)
    found = re.search(pattern, doc)
    assert found, "docs/MODEL.md: 'on the default population theta_x = ..., theta_g = ..., b = ...' is missing"
    approval = default_world.approval
    for quoted, value, what in zip(found.groups(), (approval.theta_x, approval.theta_g, approval.bias),
                                   ("theta_x", "theta_g", "b")):
        assert _close(quoted, value), f"MODEL.md quotes {what} = {quoted}, the code gives {value:.4f}"


def test_effective_branching_ratio_matches_the_code(doc, default_world):
    """The quoted effective branching ratio under approve-all at the start: (alpha / beta) x the
    group's mean application weight 1 + lambda_sel sigma_i (approval share 1)."""
    pattern = r"effective ratio at the start under approve-all " + NUMBER + r" \(M\), " + NUMBER + r" \(F\)"
    found = re.search(pattern, doc)
    assert found, "docs/MODEL.md: the effective branching ratio under approve-all is not quoted"
    arr = default_world.arr
    ratio = arr.excitation / arr.decay * default_world.weight_sum / default_world.sizes
    for quoted, value in zip(found.groups(), ratio):
        assert _close(quoted, float(value)), (quoted, value)


LEDGERS = sorted((ROOT / "docs" / "results").glob("table*.csv"))


@pytest.mark.parametrize("ledger_path", LEDGERS, ids=[p.stem for p in LEDGERS])
def test_ten_seed_tables_quote_their_ledgers(doc, ledger_path):
    """The 10-seed rows of MODEL.md's "Table N at 10 seeds" section are what ``study_ledger.py
    tables docs/results/tableN.csv`` prints (the ledger is the record of the runs; the doc must
    not drift from it), and the section says how many of the study's runs the ledger holds."""
    import pandas as pd

    from abm.reports.seed002 import tables_markdown
    from abm.study import load_study

    ledger = pd.read_csv(ledger_path)
    rows = [line for line in tables_markdown(ledger).splitlines()
            if line.startswith("| ") and not line.startswith("| Method")]
    assert len(rows) >= 1
    title = f"#### Table {ledger_path.stem.removeprefix('table')} at 10 seeds"
    assert title in doc, f"docs/MODEL.md has no section {title!r} for {ledger_path.name}"
    section = doc.split(title, 1)[1].split("\n#### ", 1)[0]
    missing = [row for row in rows if row not in section]
    assert not missing, f"docs/MODEL.md, {title[5:]}: not as the ledger gives it: {missing[0]}"
    total = len(load_study(ROOT / "scenarios" / "studies" / f"{ledger_path.stem}.yaml").runs)
    assert f"{len(ledger)} of {total} runs" in section
    assert set(ledger["run_id"]) <= {r.run_id for r in load_study(ROOT / "scenarios" / "studies" /
                                                                   f"{ledger_path.stem}.yaml").runs}
