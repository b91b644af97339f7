"""Scenario schema: bad files and bad overrides exit 2 with one line naming the field."""

import sys

import pytest

from abm import cli
from abm.config import apply_overrides, load_scenario, parse_override
from abm.errors import UserError

GOOD = "scenarios/eutopia.yaml"


def run_main(monkeypatch, capsys, *args):
    monkeypatch.setattr(sys, "argv", ["abm", *args])
    with pytest.raises(SystemExit) as exc:
        cli.main()
        raise SystemExit(0)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


BAD_FILES = [
    # (yaml text, text that must appear in the message)
    ("population: [1, 2\n", "invalid YAML"),
    ("- a\n- b\n", "top level must be a mapping"),
    ("family: eutopia\nbogus: 1\n", "bogus"),
    ("population:\n  n_male: -5\n", "population.n_male"),
    ("population:\n  n_female: 0\n", "population.n_female"),
    ("population:\n  n_male: lots\n", "population.n_male"),
    ("arrivals:\n  decay: -2\n", "arrivals.decay"),
    ("arrivals:\n  excitation: 3.0\n", "branching ratio"),
    ("arrivals:\n  base_slope: .nan\n", "arrivals.base_slope"),
    ("arrivals:\n  base_intercept: .inf\n", "arrivals.base_intercept"),
    ("population:\n  regime: custom\n  default_range: [0.3, 1.5]\n", "default_range"),
    ("population:\n  regime: weird\n", "population.regime"),
    ("population:\n  tau_interest: -0.1\n", "population.tau_interest"),
    ("episodes:\n  horizon: 10\n  decision_interval: 0.3\n", "whole number"),
    ("episodes:\n  count: 0\n", "episodes.count"),
    ("policy:\n  name: nope\n", "unknown policy 'nope'"),
    ("policy:\n  name: random\n  p: 1.5\n", "policy.p"),
    ("policy:\n  name: random\n  q: 0.5\n", "policy.q"),
    ("family: martian\n", "unknown family 'martian'"),
    ("objective: 'outcome:nonsense'\n", "objective"),
    ("seed: -1\n", "seed"),
    ("population:\n  bogus_key: 3\n", "population.bogus_key"),
]


@pytest.mark.parametrize("text,needle", BAD_FILES)
def test_bad_scenario_files(tmp_path, monkeypatch, capsys, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = run_main(monkeypatch, capsys, "validate", str(path))
    assert code == 2
    assert needle in err
    assert "Traceback" not in err
    assert str(path) in err or "invalid YAML" in err or "top level" in err
    assert all(line.startswith("error: ") for line in err.strip().splitlines())


def test_non_utf8_and_missing(tmp_path, monkeypatch, capsys):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"name: \xff\xfe\n")
    code, _, err = run_main(monkeypatch, capsys, "validate", str(path))
    assert code == 2 and "not UTF-8" in err
    code, _, err = run_main(monkeypatch, capsys, "validate", str(tmp_path / "absent.yaml"))
    assert code == 2 and "no such file" in err and err.count("\n") == 1
    code, _, err = run_main(monkeypatch, capsys, "validate", str(tmp_path))  # as `abm run FOLDER` says it
    assert code == 2 and err == f"error: {tmp_path}: a folder without scenario.yaml: give a scenario file or a run folder\n"


BAD_OVERRIDES = [
    ("noequals", "expected dotted.path=value"),
    ("population..n_male=3", "empty field name"),
    ("population.n_male=abc", "population.n_male"),
    ("population.n_male.x=3", "population.n_male"),
    ("arrivals.nothing=1", "arrivals.nothing"),
    ("episodes.count=-3", "episodes.count"),
]


@pytest.mark.parametrize("override,needle", BAD_OVERRIDES)
def test_bad_overrides(monkeypatch, capsys, override, needle):
    code, _, err = run_main(monkeypatch, capsys, "validate", GOOD, "--set", override)
    assert code == 2 and needle in err and "Traceback" not in err


def test_both_scenarios_validate(monkeypatch, capsys):
    code, out, _ = run_main(monkeypatch, capsys, "validate", GOOD, "scenarios/eutopia-eval.yaml")
    assert code == 0 and out.count(": ok") == 2


def test_overrides_coerce_types():
    sc = load_scenario(GOOD, ["population.n_male=123", "arrivals.excite_on=applications",
                              "population.regime=custom", "population.default_range=[0.1, 0.2]",
                              "policy.name=random", "policy.p=0.25"])
    assert sc.population.n_male == 123
    assert sc.arrivals.excite_on == "applications"
    assert sc.population.p_default == pytest.approx(0.15)
    assert sc.policy.name == "random" and sc.policy.params == {"p": 0.25}
    assert parse_override("a.b=0.1") == (["a", "b"], 0.1)
    assert apply_overrides({"a": {"b": 1}}, ["a.c=true"]) == {"a": {"b": 1, "c": True}}


def test_frozen_config():
    sc = load_scenario(GOOD)
    with pytest.raises(Exception):
        sc.population.n_male = 5  # type: ignore[misc]


def test_regime_contradiction():
    with pytest.raises(UserError, match="contradicts regime"):
        load_scenario(GOOD, ["population.default_range=[0.1, 0.2]"])


CREDIT = "scenarios/lending-credit.yaml"
MISSPELLED = [  # (file, override, the one line must say) -- exit 2, and a suggestion where one is close
    (GOOD, "population.n_mal=3", "population.n_mal: unknown field (did you mean 'n_male'?)"),
    (GOOD, "populaton.size=3", "populaton: unknown field (did you mean 'population'?)"),
    (GOOD, "arrivals.zzzz=1", "arrivals.zzzz: unknown field (got 1)"),  # nothing close: no guess
    (CREDIT, "family=credit_scor", "unknown family 'credit_scor' (did you mean 'credit_score'?)"),
    (GOOD, "policy.name=randm", "unknown policy 'randm' (did you mean 'random'?)"),
    (GOOD, ("policy.name=random", "policy.pp=0.3"), "policy.pp: unknown parameter of policy 'random' (did you mean 'p'?)"),
    (CREDIT, "population.groups=[{name: A, initial_distributon: [0.5, 0.5]}]",
     "population.groups[0].initial_distributon: unknown field (did you mean 'initial_distribution'?)"),
    # a bad entry is named by its index (0-based, as the path's list indices)
    (CREDIT, "population.groups=[{name: A, initial_distribution: [0.5, -0.1, 0.6]}]",
     "population.groups[0].initial_distribution: entry [1] is negative (-0.1)"),
    (CREDIT, "population.groups=[{name: A, initial_distribution: [0.5, 0.6]}]", "must sum to 1, got sum 1.1"),
]


@pytest.mark.parametrize("path,override,needle", MISSPELLED)
def test_a_misspelled_name_gets_a_did_you_mean_and_a_bad_entry_its_index(monkeypatch, capsys, path, override, needle):
    sets = [a for o in ([override] if isinstance(override, str) else override) for a in ("--set", o)]
    code, _, err = run_main(monkeypatch, capsys, "validate", path, *sets)
    assert code == 2 and needle in err and all(line.startswith("error: ") for line in err.splitlines()), err
