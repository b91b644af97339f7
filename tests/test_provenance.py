"""The code fingerprint (abm.provenance) counts code, not comments, docstrings or layout: a plugin
edited only in those keeps its hash and its runs are reused (no ``.stale-`` copy); an edit of
code changes it and recomputes; a file with a syntax error still hashes, by its bytes."""

from __future__ import annotations

import json
import textwrap

from abm import provenance
from conftest import SCENARIOS, abm_cli, run_folder

PLUGIN = '''\
import numpy as np
from pydantic import Field

from policies.base import NoParams, Policy


class Params(NoParams):
    p: float = Field(0.7, ge=0, le=1, description="Approval probability.")


class CoinLender(Policy):
    """Approve each application with probability p."""

    Params = Params

    def _decide(self, obs, info):
        return np.full(len(obs), self.params.p)
'''

# the same code: comments, docstrings (module, class, function, attribute), blank lines, layout
COMMENTED = '''\
"""A coin-flipping lender: a module docstring added."""
# a comment line, which shifts every line number below
import numpy as np
from pydantic import Field

from policies.base import NoParams, Policy  # a trailing comment


class Params(NoParams):
    """Parameters (a class docstring added)."""

    p: float = Field(0.7, ge=0, le=1,
                     description="Approval probability.")
    """The attribute's docstring."""


class CoinLender(Policy):
    """Approve each application with probability p -- reworded."""

    Params = Params

    def _decide(self, obs, info):
        """Same decision (a function docstring added)."""
        # approve with probability p
        return np.full(len(obs), self.params.p)
'''

TINY = ["--set", "population.size=50", "--set", "episodes.count=1", "--set", "episodes.horizon=20", "--quiet"]


def digest(source) -> bytes:
    return provenance.code_text(source)


def test_comments_docstrings_and_layout_do_not_count_code_does():
    assert digest(COMMENTED) == digest(PLUGIN)
    assert digest(PLUGIN.replace("0.7", "0.4")) != digest(PLUGIN)
    assert digest(PLUGIN.replace("len(obs)", "len(obs) // 2")) != digest(PLUGIN)
    assert digest(PLUGIN.replace("_decide(self, obs, info)", "_decide(self, o, info)")) != digest(PLUGIN)  # a name
    # a string that is a value, not a statement, is code (a docstring-looking default included)
    assert digest('x = "a"\n') != digest('x = "b"\n')
    assert digest('def f(x="""a"""):\n    return x\n') != digest('def f(x="""b"""):\n    return x\n')
    assert digest("async def f():\n    'doc'\n    return 1\n") == digest("async def f():\n    return 1\n")
    assert digest("def f():\n    'only a docstring'\n") == digest("def f():\n    pass\n")
    assert digest("x = 1.0\n") != digest("x = 1\n") and digest("x = True\n") != digest("x = 1\n")


def test_a_syntax_error_still_hashes_by_its_bytes():
    broken = PLUGIN.replace("def _decide(self, obs, info):", "def _decide(self, obs, info)")
    assert digest(broken) == broken.encode() != digest(PLUGIN)
    assert digest(broken + "# a comment\n") != digest(broken)  # bytes: everything counts


def _run(tmp_path):
    res = abm_cli("run", str(SCENARIOS / "lending-credit.yaml"), "--policy", "coin_prov:CoinLender",
                  "--out", str(tmp_path / "out"), *TINY, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    return res


def _stale(folder):
    return sorted(p.name for p in folder.parent.iterdir() if ".stale-" in p.name)


def test_a_comment_only_edit_of_a_plugin_reuses_its_runs_an_edit_of_code_recomputes(tmp_path):
    path = tmp_path / "coin_prov.py"
    path.write_text(PLUGIN)
    folder = run_folder(_run(tmp_path).stdout)
    first = json.loads((folder / "summary.json").read_text())["code_fingerprint"]
    assert "+coin_prov=" in first

    path.write_text(COMMENTED)  # comments and docstrings only: the same code, reused
    res = _run(tmp_path)
    assert "reused, nothing recomputed" in res.stdout and "other code" not in res.stderr
    assert _stale(folder) == [] and json.loads((folder / "summary.json").read_text())["code_fingerprint"] == first

    path.write_text(COMMENTED.replace("self.params.p)", "1.0 - self.params.p)"))  # code: recomputed, kept aside
    res = _run(tmp_path)
    assert "computed by other code" in res.stderr and "reused" not in res.stdout
    fresh = json.loads((folder / "summary.json").read_text())["code_fingerprint"]
    assert fresh.split("+")[1] != first.split("+")[1]  # the plugin's part moved
    assert _stale(folder) == [f"{folder.name}.stale-{first}"]


def test_a_notebook_class_hashes_its_source_without_comments(monkeypatch):
    """A class with no file (a notebook cell): its dedented source, without comments, is hashed."""
    from abm import registry

    namespace: dict = {}
    source = textwrap.indent("class Lender:\n    # a comment\n    x = 1\n", "    ")
    monkeypatch.setattr(registry, "registered_classes", lambda module: [namespace["Lender"]])
    monkeypatch.setattr(provenance, "plugin_files", lambda module: [])
    monkeypatch.setattr(provenance, "_PLUGIN_HASHES", {})
    monkeypatch.setattr(provenance.inspect, "getsource", lambda cls: source)
    exec(textwrap.dedent(source), namespace)
    first = provenance.plugin_hash("cell_module")
    provenance._PLUGIN_HASHES.clear()
    source = source.replace("# a comment", "# another comment")
    assert provenance.plugin_hash("cell_module") == first != "unknown"
    provenance._PLUGIN_HASHES.clear()
    source = source.replace("x = 1", "x = 2")
    assert provenance.plugin_hash("cell_module") != first
