"""Which code computed a result.

A run folder is reused when its configuration is identical, so its ``summary.json`` also
records ``code_fingerprint``: a hash of this project's source (every ``.py`` file of the
``abm`` and ``policies`` packages) and of the versions of the libraries that shape results.
A complete folder whose recorded fingerprint differs from the running code is *stale*: the
same configuration would not necessarily give the same numbers. ``abm run`` recomputes a stale
run and keeps the old folder beside it (``<name>.stale-<old fingerprint>``); a study keeps its
stale runs (resuming a long study must not silently redo it) but says how many there are, and
``abm study --recompute-stale`` redoes them the same way. Folders written before fingerprints
existed carry none; they are reported as of unknown code, never treated as stale.

Plugins (``abm.registry``: a user's ``module:Class`` policy or ``package.module`` family, or an
installed package's entry point) are code too: the fingerprint of a run that uses one is
``<12 hex digits>+<module>=<8 hex digits>`` per plugin module, the digits hashing the *code* of
the plugin's source files (every ``.py`` file of its top-level package, or its one module file;
for a class defined where there is no file, e.g. a notebook, its source): the syntax tree
without docstrings (``code_text``), so comments, docstrings, blank lines and layout do not
count, and a user editing only those reuses the runs; a file that does not parse counts by its
bytes. The project's own part hashes bytes: parsing its hundred files would cost every process
about a second, and its code changes only with a new version. The recorded string names the
modules, so whether a recorded fingerprint differs from the running code is decided from the
string alone (``differs``), by any process that can find the plugin's files. An edited plugin
therefore recomputes instead of silently reusing a run folder; a plugin that cannot be found
any more counts as other code. A plugin's hash is taken once per process, when first asked for:
the code that process runs (an edit after a module was imported does not change what runs).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import inspect
import json
import os
import sys
import textwrap
from importlib import metadata
from pathlib import Path

PACKAGES = ("abm", "policies")
LIBRARIES = ("numpy", "scipy", "pandas", "scikit-learn", "torch", "mesa", "simpy", "gymnasium",
             "stable-baselines3")


@functools.lru_cache(maxsize=1)
def _project_fingerprint() -> str:
    """12 hex digits naming this source tree and its result-shaping library versions."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        root = Path(importlib.import_module(package).__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root.parent).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    for name in LIBRARIES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{name}=={version}\0".encode())
    return digest.hexdigest()[:12]


def code_fingerprint(scenario=None) -> str:
    """This source tree's fingerprint; for ``scenario``, with its plugins' (``+module=hash``)."""
    base = _project_fingerprint()
    if scenario is None:
        return base
    from abm import registry

    modules = registry.plugin_modules(scenario.policy.name, scenario.family, scenario.objective)
    return base + "".join(f"+{m}={plugin_hash(m)}" for m in modules if not _is_project_module(m))


code_fingerprint.cache_clear = _project_fingerprint.cache_clear  # the old lru_cache's handle


def _is_project_module(module: str) -> bool:
    return module.split(".")[0] in PACKAGES


def _top_spec(module: str):
    top = module.split(".")[0]
    loaded = sys.modules.get(top)
    if loaded is not None:
        return getattr(loaded, "__spec__", None), loaded
    from abm import plugins

    return plugins.find(top), None  # where it would be imported from: sys.path, or a folder the user allowed


def plugin_files(module: str) -> list[Path]:
    """The source files a plugin module's hash covers: its top-level package's ``.py`` files, or
    the top-level module's file (none when it has no file or cannot be found)."""
    from abm import plugins

    spec, loaded = _top_spec(module)
    roots = plugins.module_roots(spec)
    if not roots and getattr(loaded, "__file__", None):  # loaded without a spec that has a location
        roots = [Path(os.path.abspath(loaded.__file__))]
    files = []
    for root in roots:
        files += [root] if root.is_file() else [p for p in root.rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(set(files))


def code_text(source: str | bytes) -> bytes:
    """What counts as code in a Python source: its syntax tree without string statements
    (docstrings, which do nothing when the code runs), dumped without line numbers; comments and
    layout are not in the tree. A source that does not parse counts by its bytes."""
    raw = source.encode() if isinstance(source, str) else source
    try:
        tree = ast.parse(raw)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return raw
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and any(_is_string_statement(s) for s in stmts):
                setattr(node, field, [s for s in stmts if not _is_string_statement(s)] or [ast.Pass()])
    try:
        return ast.dump(tree).encode()
    except RecursionError:
        return raw


def _is_string_statement(stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


_PLUGIN_HASHES: dict[str, str] = {}


def plugin_hash(module: str) -> str:
    """8 hex digits of a plugin module's sources ('unknown' when none can be found)."""
    if module in _PLUGIN_HASHES:
        return _PLUGIN_HASHES[module]
    digest, found = hashlib.sha256(), False
    for path in plugin_files(module):
        found = True
        digest.update(path.name.encode() + b"\0" + code_text(path.read_bytes()) + b"\0")
    if not found:  # e.g. a class defined in a notebook: hash the source of what was registered
        from abm import registry

        for cls in registry.registered_classes(module):
            try:
                digest.update(code_text(textwrap.dedent(inspect.getsource(cls))) + b"\0")
                found = True
            except (OSError, TypeError):
                pass
    if not found:
        return "unknown"  # not remembered: the module may become findable (a folder the user allows later)
    _PLUGIN_HASHES[module] = value = digest.hexdigest()[:8]
    return value


def differs(recorded: str | None, scenario=None) -> bool:
    """A recorded fingerprint names other code (None, from before fingerprints, never does): the
    project's differs, or one of the plugins it names hashes differently now (or cannot be found).
    With ``scenario``, also when the run's plugins are not the ones recorded."""
    if recorded is None:
        return False
    base, *plugins = recorded.split("+")
    if base != _project_fingerprint():
        return True
    for part in plugins:
        module, _, digest = part.partition("=")
        now = plugin_hash(module)
        if now == "unknown" or now != digest:
            return True
    return scenario is not None and recorded != code_fingerprint(scenario)


def recorded_fingerprint(folder: Path) -> str | None:
    """The fingerprint a complete run folder recorded (None: none recorded, or unreadable)."""
    try:
        return json.loads((Path(folder) / "summary.json").read_text()).get("code_fingerprint")
    except (OSError, ValueError, AttributeError):
        return None


def is_stale(folder: Path) -> bool:
    return differs(recorded_fingerprint(folder))


def set_aside(folder: Path) -> Path:
    """Rename a stale run folder to ``<name>.stale-<its fingerprint>[-k]``; return the new path."""
    folder = Path(folder)
    stem = f"{folder.name}.stale-{recorded_fingerprint(folder) or 'unknown'}"
    target, k = folder.with_name(stem), 1
    while target.exists():
        k += 1
        target = folder.with_name(f"{stem}-{k}")
    os.replace(folder, target)
    return target
