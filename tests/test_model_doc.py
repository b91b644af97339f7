"""The docs must match what they describe.

docs/MODEL.md quotes the default population's numbers: they are parsed from the doc (the "Default
population" line of the Loanly section and the approval model of its table) and recomputed the way
the quoted commands do (``abm population scenarios/eutopia.yaml``: the run's population stream of
seed 0; the world's initial approval model), to the decimals the doc shows. MODEL.md is the
model's specification: no issue numbers, sittings or commit hashes, and under 1,800 lines.

docs/results/*.md hold the results, one file per paper table or figure, each opening with the
command that regenerates it and the study file or ledger it reads; the seed-002 results quote
their ledgers (``docs/results/table*.csv``) row for row.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "docs" / "MODEL.md"
RESULTS = ROOT / "docs" / "results"
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


LEDGERS = sorted(RESULTS.glob("table*.csv"))
# each ledger's results doc and the section of it that reads the ledger
LEDGER_SECTIONS = {
    "table1": ("seed002-table1.md", "## Table 1 at 10 seeds"),
    "table2": ("seed002-table2.md", "## Table 2 at 10 seeds"),
    "table5": ("seed002-table5.md", "## Table 5 at 10 seeds"),
    "table5-elbert-alpha": ("seed002-table5.md", "## Table 5-elbert-alpha at 10 seeds"),
}


def _section(text: str, title: str) -> str:
    """The part of ``text`` from the heading that starts with ``title`` to the next heading of its level."""
    level = title.split(" ", 1)[0]
    found = re.search("^" + re.escape(title) + ".*$", text, flags=re.MULTILINE)
    assert found, f"no section {title!r}"
    rest = text[found.end():]
    following = re.search("^" + re.escape(level) + " ", rest, flags=re.MULTILINE)
    return rest[:following.start()] if following else rest


def test_every_ledger_has_its_results_section():
    assert {p.stem for p in LEDGERS} == set(LEDGER_SECTIONS), (
        "a ledger in docs/results without a results section (or a section without its ledger): update LEDGER_SECTIONS")


@pytest.mark.parametrize("ledger_path", LEDGERS, ids=[p.stem for p in LEDGERS])
def test_ten_seed_tables_quote_their_ledgers(ledger_path):
    """The 10-seed rows of a results doc's "Table N at 10 seeds" section are what ``study_ledger.py
    tables docs/results/tableN.csv`` prints (the ledger is the record of the runs; the doc must
    not drift from it), and the section says how many of the study's runs the ledger holds."""
    import pandas as pd

    from abm.reports.seed002 import tables_markdown
    from abm.study import load_study

    ledger = pd.read_csv(ledger_path)
    rows = [line for line in tables_markdown(ledger).splitlines()
            if line.startswith("| ") and not line.startswith("| Method")]
    assert len(rows) >= 1
    doc_name, title = LEDGER_SECTIONS[ledger_path.stem]
    section = _section((RESULTS / doc_name).read_text(encoding="utf-8"), title)
    missing = [row for row in rows if row not in section]
    assert not missing, f"docs/results/{doc_name}, {title[3:]}: not as the ledger gives it: {missing[0]}"
    runs = {r.run_id for r in load_study(ROOT / "scenarios" / "studies" / f"{ledger_path.stem}.yaml").runs}
    assert f"{len(ledger)} of {len(runs)} runs" in section
    assert set(ledger["run_id"]) <= runs


RESULT_DOCS = sorted(RESULTS.glob("*.md"))


@pytest.mark.parametrize("path", RESULT_DOCS, ids=[p.stem for p in RESULT_DOCS])
def test_results_docs_open_with_their_command_and_source(path):
    """A results doc opens (before its first section) with a fenced command and names what it reads;
    every study file and ledger it names exists."""
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# "), f"{path.name}: no title"
    opening = text.split("\n## ", 1)[0]
    assert "```" in opening, f"{path.name}: the opening has no command block"
    assert "Reads " in opening, f"{path.name}: the opening does not say what it reads"
    for named in re.findall(r"(scenarios/(?:studies/)?[\w.-]+\.yaml|docs/results/[\w.-]+\.csv)", text):
        assert (ROOT / named).exists(), f"{path.name} names {named}, which does not exist"


def test_model_doc_is_a_specification(doc):
    """MODEL.md says what the model is: no issue numbers, sittings or commit hashes (history lives
    in git, results in docs/results), and it stays short enough to read."""
    assert not re.search(r"issue", doc, flags=re.IGNORECASE), "docs/MODEL.md mentions an issue"
    assert not re.search(r"sitting", doc, flags=re.IGNORECASE), "docs/MODEL.md mentions a sitting"
    hashes = re.findall(r"(?<![0-9A-Za-z])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![0-9A-Za-z])", doc)
    assert not hashes, f"docs/MODEL.md quotes what looks like a commit hash: {hashes[0]}"
    assert doc.count("\n") < 1800, f"docs/MODEL.md has {doc.count(chr(10))} lines"
    for name in re.findall(r"docs/results/([\w.-]+\.md)", doc):
        assert (RESULTS / name).exists(), f"docs/MODEL.md points to docs/results/{name}, which does not exist"
