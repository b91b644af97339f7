"""A study's policy entry replaces the base scenario's policy whole; an entry that names the base's
policy but leaves out some of its non-default parameters runs at the defaults for those, which
table2.yaml's ``{name: classifier}`` once did silently (burn-in as long as the run). The study
says so: ``Study.notices``, one ``warning:`` line on stderr from ``abm validate`` / ``abm study``,
a ``UserWarning`` from ``abm.study``. The run itself is unchanged (a warning, not a refusal)."""

import copy
from pathlib import Path

import pytest
import yaml

import abm
from abm.study import study_from_dict

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "scenarios" / "studies" / "smoke.yaml"


def _study(entries, base_policy=None, groups=None):
    raw = yaml.safe_load(SMOKE.read_text())
    raw["base"] = str(ROOT / "scenarios" / "eutopia.yaml")
    raw["grid"] = {}
    raw["study"]["seeds"] = 1
    raw["study"]["episodes"] = 2
    raw["overrides"] = {"population.n_male": 60, "population.n_female": 60}
    base = yaml.safe_load((ROOT / "scenarios" / "eutopia.yaml").read_text())
    base["policy"] = base_policy or {"name": "random", "p": 0.3}
    raw["base"] = base
    raw["policies"] = entries
    if groups is not None:
        raw["groups"] = groups
    return raw


def test_an_entry_that_drops_the_base_policys_parameters_is_named_with_what_it_drops():
    study = study_from_dict(_study([{"name": "random"}, {"name": "approve_all"}]), "s.yaml")
    assert len(study.notices) == 1
    notice = study.notices[0]
    assert notice.startswith("s.yaml: policies: random replaces the base scenario's policy whole")
    assert "p: 0.3" in notice and "approve_all" not in notice
    # the run is what the entry says: random at its default p, not the base's 0.3
    (run,) = [r for r in study.runs if r.scenario["policy"]["name"] == "random"]
    assert run.scenario["policy"] == {"name": "random"}


@pytest.mark.parametrize("entries", [
    [{"name": "random", "p": 0.3}],            # repeats the base's parameter
    [{"name": "random", "p": 0.7}],            # sets it otherwise, on purpose
    [{"name": "approve_all"}],                 # another policy: nothing of the base is lost
])
def test_entries_that_keep_or_set_the_parameters_are_not_warned_about(entries):
    assert study_from_dict(_study(entries), "s.yaml").notices == []


def test_a_base_policy_at_its_defaults_gives_no_warning():
    study = study_from_dict(_study([{"name": "random"}], base_policy={"name": "random", "p": 0.5}), "s.yaml")
    assert study.notices == []


def test_entries_of_groups_are_read_too_and_each_entry_is_named_once():
    groups = {"a": {"policies": [{"name": "random"}]}, "b": {"policies": [{"name": "random"}],
                                                          "overrides": {"arrivals.base_slope": 0.02}}}
    study = study_from_dict(_study([{"name": "approve_all"}], groups=groups), "s.yaml")
    assert len(study.notices) == 1 and "p: 0.3" in study.notices[0]


def test_the_cli_warns_on_stderr_and_still_validates(cli, tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(_study([{"name": "random"}])))
    done = cli("validate", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{path}: ok"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"warning: {path}: policies: random replaces")
    clean = tmp_path / "clean.yaml"
    clean.write_text(yaml.safe_dump(_study([{"name": "random", "p": 0.3}])))
    done = cli("validate", str(clean))
    assert done.returncode == 0 and done.stderr == ""


def test_the_shipped_study_files_give_no_warning(cli):
    files = sorted(str(p) for p in (ROOT / "scenarios" / "studies").glob("*.yaml"))
    done = cli("validate", *files)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr


def test_the_python_api_warns_and_runs_the_entry_as_written(tmp_path):
    raw = _study([{"name": "random"}])
    with pytest.warns(UserWarning, match=r"random replaces the base scenario's policy whole.*p: 0\.3"):
        result = abm.study(copy.deepcopy(raw), out=tmp_path / "s")
    assert result.outcome.failed == 0 and result.outcome.succeeded == 1
