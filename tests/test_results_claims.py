"""Every claim in a results doc names the test that decided it and a p value or an interval.

A claim is a table row whose verdict cell says holds / does not hold / partial / cannot tell
(bold or not, "holds in direction" included), or a paragraph or bullet with such a bolded verdict.
It passes when it names a test (Welch, Holm, TOST, paired t, sign, binomial, KS, exact, bootstrap,
...) and a p value (``p = 0.03``, ``p < 0.001``) or an interval (``[0.1, 0.3]``, a CI). A fact
that is a count states ``exact (deterministic)``.

Every doc in docs/results/ is held to it.
"""

import re
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"

SCOPE = sorted(p.name for p in RESULTS.glob("*.md"))  # every results doc

VERDICT = r"(?:holds|does not hold|partial|cannot tell)"
BOLD_VERDICT = re.compile(r"\*\*" + VERDICT + r"\b[^*]*\*\*", re.IGNORECASE)
CELL_VERDICT = re.compile(r"^\**" + VERDICT + r"\b", re.IGNORECASE)
TEST = re.compile(r"Welch|Holm|TOST|paired t|\bt-test|one-sample t|Student|\bsign test|binomial|\bKS\b|"
                  r"Kolmogorov|\bexact\b|bootstrap|Fisher|Mann-Whitney|permutation|chi-square|non-inferiority",
                  re.IGNORECASE)
P_OR_INTERVAL = re.compile(r"\bp\s*(?:=|<|>|≤|≥)\s*[0-9.]|\bCIs?\b|\[[-−]?[0-9.]+, ?[-−]?[0-9.]+\]|"
                           r"exact \((?:deterministic|constant samples)\)|\bexact\b", re.IGNORECASE)


def claim_blocks(text: str) -> list[str]:
    """The doc's claims: table rows with a verdict cell, paragraphs and bullets with a bold verdict."""
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    claims = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if any(CELL_VERDICT.match(c) for c in cells):
                claims.append(line)
    blocks, current = [], []
    for line in text.splitlines():
        starts = line.startswith("- ") or not line.strip() or line.startswith(("#", "|"))
        if starts and current:
            blocks.append(" ".join(current))
            current = []
        if line.strip() and not line.startswith(("#", "|")):
            current.append(line.strip())
    if current:
        blocks.append(" ".join(current))
    return claims + [b for b in blocks if BOLD_VERDICT.search(b)]


def problems(text: str) -> list[str]:
    out = []
    for claim in claim_blocks(text):
        if not TEST.search(claim):
            out.append(f"names no test: {claim[:160]}")
        elif not P_OR_INTERVAL.search(claim):
            out.append(f"gives no p value or interval: {claim[:160]}")
    return out


@pytest.mark.parametrize("name", SCOPE)
def test_every_claim_names_its_test_and_a_p_value(name):
    found = problems((RESULTS / name).read_text(encoding="utf-8"))
    assert not found, f"docs/results/{name}: {len(found)} claims without a test and p: {found[0]}"


def test_the_check_tells_a_claim_with_its_test_from_one_without():
    assert problems("- The gap narrows: **holds** (Welch p = 0.003).\n") == []
    assert problems("- The gap narrows: **holds**, 0.2 vs 0.4.\n")[0].startswith("names no test")
    assert problems("- The gap narrows: **holds** by Welch.\n")[0].startswith("gives no p value")
    assert problems("| T1 | narrows | Welch + Holm p < 0.001 | **holds** |\n") == []
    assert problems("| T1 | narrows | 0.2 vs 0.4 | holds in direction |\n")
    assert problems("- 7 of 10 seeds lend to everyone: **holds**, exact (deterministic).\n") == []
    assert problems("A paragraph, no verdict, p = 0.2.\n") == []
    assert problems("| Method | Return |\n|---|---|\n| ppo | 3 |\n") == []


def test_the_scope_names_docs_that_exist():
    assert all((RESULTS / name).is_file() for name in SCOPE)
