"""docs/reports.md runs as written: its study file validates and its Python blocks run in order
(a small study, its report in three formats, the tidy frame)."""

from __future__ import annotations

import re

import yaml

from conftest import ROOT, SCENARIOS

DOC = ROOT / "docs" / "reports.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_reports_page_runs_as_written(tmp_path, monkeypatch):
    from abm.study import study_from_dict

    [study_file] = blocks("yaml")
    study = study_from_dict(yaml.safe_load(study_file), SCENARIOS / "studies" / "labels.yaml")  # base: ../eutopia.yaml
    assert {r.columns["label"] for r in study.runs} == {"Coin flip", "Everyone"}
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for code in blocks("python"):
        exec(compile(code, str(DOC), "exec"), namespace)  # noqa: S102  our own page
    assert set(namespace["tidy"]["group"].dropna()) == {"M", "F"}
