"""A family's own event kinds, declared on its Scenario (``event_kinds``) or registered by its
module (``abm.registry.register_event_kinds``): the core's ``EventKind`` carries no family's words,
a family's kinds get codes from ``kind_code`` and land in its event log by name; bad or clashing
names are refused in one line, before anything is registered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Literal

import pandas as pd
import pytest

from abm import eventlog, registry
from abm.errors import UserError
from abm.families import admissions
from conftest import ROOT, SCENARIOS

FAMILY = '''\
from typing import Literal

import numpy as np

from abm import registry
from abm.eventlog import kind_code
from abm.families import credit_score

registry.register_event_kinds(__name__, ("audit",))  # before asking for its code
AUDIT = kind_code("audit")


class Scenario(credit_score.Scenario):
    family: Literal["{name}"] = "{name}"


class World(credit_score.World):
    """Credit-score lending whose bank logs an audit of every rejection."""

    family = "{name}"

    def apply_decisions(self, idx, approved, probs, obs):
        super().apply_decisions(idx, approved, probs, obs)
        rejected = np.asarray(idx)[~np.asarray(approved, bool)]
        log = self.model.log
        if log.enabled:
            log.extend(self.env.now, self.model.episode, rejected, self.cols["group"][rejected], AUDIT)
        else:
            log.skip(len(rejected))
'''


@pytest.fixture
def restore_vocabulary():
    kinds, names = dict(registry.FAMILY_EVENT_KINDS), list(eventlog.KIND_NAMES)
    yield
    registry.FAMILY_EVENT_KINDS.clear()
    registry.FAMILY_EVENT_KINDS.update(kinds)
    eventlog.KIND_NAMES[:] = names


def test_a_declared_kind_is_registered_when_the_scenario_class_is_defined(restore_vocabulary):
    assert registry.FAMILY_EVENT_KINDS["admissions"] == admissions.Scenario.event_kinds
    assert eventlog.kind_code("leave") == eventlog.KIND_NAMES.index("leave") == admissions.LEAVE

    class Scenario(admissions.Scenario):  # a family built on admissions: its kinds stay admissions'
        family: Literal["fam_decl.lending"] = "fam_decl.lending"
        event_kinds = ("appeal",)

    assert registry.FAMILY_EVENT_KINDS["fam_decl.lending"] == ("appeal",)
    assert eventlog.KIND_NAMES[-1] == "appeal" and registry.FAMILY_EVENT_KINDS["admissions"] == ("admit", "manipulate",
                                                                                                "leave")
    with pytest.raises(UserError, match="'admit' is already family 'admissions''s"):
        class Clash(admissions.Scenario):
            family: Literal["fam_clash.lending"] = "fam_clash.lending"
            event_kinds = ("admit",)


def test_the_core_kinds_carry_no_family_words():
    assert [k.name.lower() for k in eventlog.EventKind] == list(registry.CORE_EVENT_KINDS)
    family_words = {k for kinds in registry.FAMILY_EVENT_KINDS.values() for k in kinds}
    assert not family_words & set(registry.CORE_EVENT_KINDS)
    assert eventlog.KIND_NAMES[:len(eventlog.EventKind)] == list(registry.CORE_EVENT_KINDS)


def test_a_plugin_family_logs_its_own_kinds(tmp_path):
    package = tmp_path / "fam_events"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "lending.py").write_text(FAMILY.format(name="fam_events.lending"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tmp_path)
    res = subprocess.run([sys.executable, "-c", "from abm.cli import main; main()", "run",
                          str(SCENARIOS / "lending-credit.yaml"), "--set", "family=fam_events.lending",
                          "--set", "population.size=200", "--set", "episodes.horizon=100", "--episodes", "2",
                          "--policy", "random", "--out", str(tmp_path / "out"), "--quiet"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    folder = Path(next(line for line in res.stdout.splitlines() if line.startswith("run folder: ")).split(": ", 1)[1])
    events = pd.read_parquet(folder / "events.parquet")
    kinds = events["kind"].astype(str)
    assert (kinds == "audit").sum() == (kinds == "reject").sum() > 0
    audits, rejects = events[kinds == "audit"], events[kinds == "reject"]
    assert sorted(audits["agent_id"]) == sorted(rejects["agent_id"])
    assert "audit" in list(events["kind"].cat.categories)
    assert json.loads((folder / "summary.json").read_text())["family"] == "fam_events.lending"


def test_registering_extends_the_vocabulary_in_place(restore_vocabulary):
    before = list(eventlog.KIND_NAMES)
    admit = eventlog.kind_code("admit")
    registry.register_event_kinds("fam_x.lending", ("audit", "appeal"))
    assert eventlog.KIND_NAMES == [*before, "audit", "appeal"]
    assert eventlog.kind_code("audit") == len(before) and eventlog.kind_code("admit") == admit  # old codes kept
    registry.register_event_kinds("fam_x.lending", ("audit",))  # a re-imported module: nothing changes
    assert eventlog.KIND_NAMES == [*before, "audit", "appeal"]
    assert registry.FAMILY_EVENT_KINDS["fam_x.lending"] == ("audit", "appeal")
    log = eventlog.EventLog()
    log.add(0.1, 0, 1, 0, eventlog.kind_code("appeal"))
    assert list(log.to_frame()["kind"].astype(str)) == ["appeal"]


@pytest.mark.parametrize("kinds, message", [
    (("apply",), "'apply' is a core event kind"),
    (("admit",), "'admit' is already family 'admissions''s"),
    (("Audit",), "'Audit' is not a lower-case identifier"),
    (("an audit",), "is not a lower-case identifier"),
    (("audit", "audit"), "a kind is listed twice"),
])
def test_bad_kinds_are_refused_before_anything_is_registered(restore_vocabulary, kinds, message):
    before, names = dict(registry.FAMILY_EVENT_KINDS), list(eventlog.KIND_NAMES)
    with pytest.raises(UserError) as err:
        registry.register_event_kinds("fam_y.lending", kinds)
    assert message in str(err.value) and "fam_y.lending" in str(err.value)
    assert "\n" not in str(err.value)
    assert registry.FAMILY_EVENT_KINDS == before and eventlog.KIND_NAMES == names


def test_a_family_that_asks_for_an_unregistered_kind_is_refused_in_one_line(tmp_path):
    package = tmp_path / "fam_unreg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "lending.py").write_text(textwrap.dedent('''\
        from abm.eventlog import kind_code
        from abm.families.credit_score import Scenario, World

        AUDIT = kind_code("audit")
        '''))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tmp_path)
    res = subprocess.run([sys.executable, "-c", "from abm.cli import main; main()", "validate",
                          str(SCENARIOS / "lending-credit.yaml"), "--set", "family=fam_unreg.lending"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot import module 'fam_unreg.lending'" in lines[0] and "audit" in lines[0], lines
