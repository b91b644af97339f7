"""The code fingerprint (abm.provenance) counts code, not comments, docstrings or layout: a plugin
edited only in those keeps its hash and its runs are reused (no ``.stale-`` copy); an edit of
code changes it and recomputes; a file with a syntax error still hashes, by its bytes. Each
file's tree hash is remembered across processes by the hash of its bytes, and folders recorded
by the first scheme (raw bytes) still count as the same code while the bytes are the same."""

from __future__ import annotations

import hashlib
import json
import textwrap

import pytest

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


@pytest.fixture
def memo(tmp_path, monkeypatch):
    """A fresh, empty memo file for this test (in-process and for subprocesses)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(provenance, "_MEMO", None)
    monkeypatch.setattr(provenance, "_NEW", {})
    return tmp_path / "cache"


def test_comments_docstrings_and_layout_do_not_count_code_does():
    digest = provenance._code_digest
    assert digest(COMMENTED.encode()) == digest(PLUGIN.encode())
    assert digest(PLUGIN.replace("0.7", "0.4").encode()) != digest(PLUGIN.encode())
    assert digest(PLUGIN.replace("len(obs)", "len(obs) // 2").encode()) != digest(PLUGIN.encode())
    assert digest(PLUGIN.replace("_decide(self, obs, info)", "_decide(self, o, info)").encode()) \
        != digest(PLUGIN.encode())  # a name is code
    # a string that is a value, not a statement, is code (a docstring-looking default included)
    assert digest(b'x = "a"\n') != digest(b'x = "b"\n')
    assert digest(b'def f(x="""a"""):\n    return x\n') != digest(b'def f(x="""b"""):\n    return x\n')
    assert digest(b"async def f():\n    'doc'\n    return 1\n") == digest(b"async def f():\n    return 1\n")
    assert digest(b"x = 1.0\n") != digest(b"x = 1\n") and digest(b"x = True\n") != digest(b"x = 1\n")


def test_a_syntax_error_still_hashes_by_its_bytes():
    broken = PLUGIN.replace("def _decide(self, obs, info):", "def _decide(self, obs, info)")
    digest = provenance._code_digest(broken.encode())
    assert len(digest) == 32 and digest == provenance._code_digest(broken.encode())
    assert digest != provenance._code_digest(PLUGIN.encode())
    assert provenance._code_digest((broken + "# a comment\n").encode()) != digest  # bytes: everything counts
    deep = ("x = " + " + ".join(["1"] * 3000) + "\n").encode()  # too deep for ast.parse: its bytes too
    assert provenance._code_digest(deep) == provenance._code_digest(deep)


def test_a_digest_is_remembered_across_processes_by_the_bytes(memo, monkeypatch):
    data = PLUGIN.encode()
    expected = provenance._code_digest(data)
    assert provenance.source_digest(data) == expected
    provenance._save_memo()
    files = list((memo / "abm").iterdir())
    assert len(files) == 1 and files[0].name.startswith(f"source-digests-{provenance.SCHEME}-")
    assert list(json.loads(files[0].read_text()).values()) == [expected]

    parse = provenance.ast.parse
    monkeypatch.setattr(provenance, "_MEMO", None)  # as a new process: read from the memo, no parse
    monkeypatch.setattr(provenance.ast, "parse", lambda *a, **k: pytest.fail("parsed again"))
    assert provenance.source_digest(data) == expected
    monkeypatch.setattr(provenance.ast, "parse", parse)

    files[0].write_text("{not json")  # a broken memo is ignored (and rewritten)
    monkeypatch.setattr(provenance, "_MEMO", None)
    assert provenance.source_digest(data) == expected
    provenance._save_memo()
    assert list(json.loads(files[0].read_text()).values()) == [expected]


def test_the_memo_keeps_the_newest_entries(memo, monkeypatch):
    monkeypatch.setattr(provenance, "MEMO_LIMIT", 3)
    for k in range(5):
        provenance.source_digest(f"x = {k}\n".encode())
        provenance._save_memo()
    kept = json.loads(next((memo / "abm").iterdir()).read_text())
    assert list(kept.values()) == [provenance._code_digest(f"x = {k}\n".encode()) for k in (2, 3, 4)]


def test_the_first_schemes_fingerprint_still_names_the_same_code():
    current, by_bytes = provenance._project_fingerprints()
    assert provenance._project_fingerprint() == current
    assert not provenance.differs(current) and not provenance.differs(by_bytes)
    assert provenance.differs("0123456789ab") and not provenance.differs(None)


def _run(tmp_path):
    res = abm_cli("run", str(SCENARIOS / "lending-credit.yaml"), "--policy", "coin_prov:CoinLender",
                  "--out", str(tmp_path / "out"), *TINY, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    return res


def _stale(folder):
    return sorted(p.name for p in folder.parent.iterdir() if ".stale-" in p.name)


def test_a_comment_only_edit_of_a_plugin_reuses_its_runs_an_edit_of_code_recomputes(tmp_path, memo):
    path = tmp_path / "coin_prov.py"
    path.write_text(PLUGIN)
    folder = run_folder(_run(tmp_path).stdout)
    first = json.loads((folder / "summary.json").read_text())["code_fingerprint"]
    assert "+coin_prov=" in first and list((memo / "abm").iterdir())  # the memo was written

    path.write_text(COMMENTED)  # comments and docstrings only: the same code, reused
    res = _run(tmp_path)
    assert "reused, nothing recomputed" in res.stdout and "other code" not in res.stderr
    assert _stale(folder) == [] and json.loads((folder / "summary.json").read_text())["code_fingerprint"] == first

    summary = json.loads((folder / "summary.json").read_text())  # as recorded by the first scheme (bytes)
    provenance._project_fingerprints.cache_clear()  # the tree as the subprocess just saw it
    _, by_bytes = provenance._project_fingerprints()
    plugin_by_bytes = hashlib.sha256(b"coin_prov.py\0" + COMMENTED.encode() + b"\0").hexdigest()[:8]
    summary["code_fingerprint"] = f"{by_bytes}+coin_prov={plugin_by_bytes}"
    (folder / "summary.json").write_text(json.dumps(summary))
    res = _run(tmp_path)
    assert "reused, nothing recomputed" in res.stdout and _stale(folder) == []
    summary["code_fingerprint"] = first
    (folder / "summary.json").write_text(json.dumps(summary))

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
