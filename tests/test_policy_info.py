"""A policy reads its ``info`` (``abm.engine.Batch``) by name, as a read-only mapping, on any
family: ``info["group"]`` (indices), ``info["group_name"]`` (names), ``info.get``, ``in``,
``list(info)``; an unknown name is a one-line error naming the known ones (exit 2 from the CLI)."""

from __future__ import annotations

import numpy as np
import pytest

from abm.config import load_scenario
from abm.engine import Batch
from abm.errors import UserError
from abm.runner import execute
from conftest import SCENARIOS, SMALL_SCORE_FAMILIES, abm_cli

PROBE = '''
import numpy as np

from policies.base import Policy

SEEN = []


class Probe(Policy):
    """Approve half; remember what info said (a plugin reading info by name)."""

    def _decide(self, obs, info):
        SEEN.append((np.asarray(info["group"]).copy(), np.asarray(info["group_name"]).copy(),
                     tuple(info["group_names"]), info.get("episode"), info.get("no_such_key", "dflt"),
                     "group" in info, "colour" in info, list(info), info["privileged"], info.group_names))
        return np.full(len(obs), 0.5)


class BadKey(Policy):
    """Reads a key the info does not have."""

    def _decide(self, obs, info):
        return np.full(len(obs), 0.5 if info["grup"] is None else 0.4)
'''


@pytest.fixture
def probe(tmp_path, monkeypatch):
    (tmp_path / "info_probe.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    import info_probe

    importlib.reload(info_probe)
    info_probe.SEEN.clear()
    return info_probe


def _check(seen, names):
    assert seen, "the policy was never asked"
    for group, group_name, group_names, episode, dflt, has_group, has_colour, keys, privileged, attr in seen:
        assert group_names == tuple(names) == attr
        assert group.dtype.kind in "iu" and len(group) == len(group_name)
        assert list(group_name) == [names[g] for g in group]
        assert isinstance(episode, int) and dflt == "dflt" and has_group and not has_colour
        assert keys == list(Batch.KEYS) and privileged == {}


@pytest.mark.parametrize("family", ["credit_score", "eutopia"])
def test_a_plugin_policy_reads_info_by_name(probe, family):
    if family == "eutopia":
        sc = load_scenario(SCENARIOS / "eutopia.yaml", ["population.n_male=150", "population.n_female=150",
                                                         "episodes.count=2", "policy.name=info_probe:Probe"])
        names = ["M", "F"]
    else:
        path, overrides = SMALL_SCORE_FAMILIES[family]
        sc = load_scenario(SCENARIOS / path, [*overrides, "policy.name=info_probe:Probe"])
        names = ["G1", "G2"]
    execute(sc)
    _check(probe.SEEN, names)
    seen_groups = {n for row in probe.SEEN for n in row[1]}
    assert seen_groups == set(names)


def test_the_mapping_and_its_one_line_error():
    info = Batch(np.arange(3), np.array([1, 0, 1]), 2.5, 4, {"default": np.zeros(3)}, ("A", "B"))
    assert info["group"] is info.group and list(info["group_name"]) == ["B", "A", "B"]
    assert info["time"] == 2.5 and info["episode"] == 4 and "default" in info["privileged"]
    assert dict(info)["group_names"] == ("A", "B") and len(info) == len(Batch.KEYS)
    assert info.get("grup") is None and "grup" not in info
    with pytest.raises(KeyError) as exc:
        info["grup"]
    assert isinstance(exc.value, UserError)
    message = str(exc.value)
    assert "\n" not in message and "'grup'" in message and all(k in message for k in Batch.KEYS)
    # a Batch built without names (e.g. by an older caller) still names each group
    assert list(Batch(np.arange(2), np.array([0, 1]), 0.0, 0)["group_name"]) == ["0", "1"]


def test_a_bad_key_in_a_plugin_is_one_line_exit_2(tmp_path):
    (tmp_path / "info_bad.py").write_text(PROBE)
    path, overrides = SMALL_SCORE_FAMILIES["credit_score"]
    sets = [a for o in overrides for a in ("--set", o)]
    res = abm_cli("run", str(SCENARIOS / path), "--policy", "info_bad:BadKey", *sets, "--quiet",
                  "--out", str(tmp_path / "out"), pythonpath=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "'grup'" in lines[0] and "group_name" in lines[0], res.stderr
