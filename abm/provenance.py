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

What counts as code. A source file is hashed by its syntax tree (``ast``), not its bytes:
comments, blank lines, layout and every string that stands alone as a statement (the
docstrings of modules, classes and functions, and attribute docstrings) are left out, and so
are line and column numbers, which a comment or docstring line shifts but which cannot change
a result. A comment-only or docstring-only edit therefore keeps the fingerprint (its runs are
reused); any edit of code changes it. A file that does not parse is hashed by its bytes, so a
syntax error still changes the fingerprint. The tree is written out with named fields, empty
ones left out, so fields a newer Python adds (empty in code that does not use them) do not
change it; the memo below is kept per interpreter all the same. Parsing ~1 MB of
source takes about half a second, and every ``abm run``, study and Dask worker process needs
the fingerprint, so each file's tree hash is remembered by the hash of its bytes (a pure
function of the content: an edited file is parsed again) in
``$XDG_CACHE_HOME/abm/source-digests-*.json`` (``~/.cache`` by default); a process that
cannot read or write it simply parses. A folder recorded by the first scheme (the raw bytes
of the same files) still counts as the same code when the bytes are identical now.

Plugins (``abm.registry``: a user's ``module:Class`` policy or ``package.module`` family, or an
installed package's entry point) are code too: the fingerprint of a run that uses one is
``<12 hex digits>+<module>=<8 hex digits>`` per plugin module, the digits hashing the plugin's
source files the same way (every ``.py`` file of its top-level package, or its one module file;
for a class defined where there is no file, e.g. a notebook, its source). The recorded string
names the modules, so whether a recorded fingerprint differs from the running code is decided
from the string alone (``differs``), by any process that can find the plugin's files. An edited
plugin therefore recomputes instead of silently reusing a run folder; a plugin that cannot be
found any more counts as other code. A plugin's hash is taken once per process, when first
asked for: the code that process runs (an edit after a module was imported does not change
what runs).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import sys
import textwrap
import uuid
from importlib import metadata
from pathlib import Path

PACKAGES = ("abm", "policies")
LIBRARIES = ("numpy", "scipy", "pandas", "scikit-learn", "torch", "mesa", "simpy", "gymnasium",
             "stable-baselines3")
SCHEME = "ast1"  # how a source file is reduced to what counts as code (see the module docstring)
MEMO_LIMIT = 4096  # remembered files (newest kept): one entry per version of a file ever hashed


class _Text(str):
    """A piece of the canonical text (never a value from the tree)."""


_CLOSE, _CLOSE_LIST, _COMMA = _Text(")"), _Text("]"), _Text(",")
_STATEMENT_LISTS = ("body", "orelse", "finalbody")


@functools.lru_cache(maxsize=None)
def _shape(cls: type) -> tuple[str, tuple[tuple[str, _Text, bool], ...]]:
    """A node type's opening text and, last first, its fields: (name, label, holds statements)."""
    return "(" + cls.__name__, tuple((name, _Text(f" {name}="), name in _STATEMENT_LISTS)
                                     for name in reversed(cls._fields))


def _is_bare_string(stmt: ast.stmt) -> bool:
    return type(stmt) is ast.Expr and type(stmt.value) is ast.Constant and type(stmt.value.value) is str


def _canonical(tree: ast.AST) -> str:
    """The tree as text: node types, their non-empty fields by name, values by ``repr``; no line
    numbers (``_attributes`` are not fields), no string statements (docstrings: they cannot change
    a result). Iterative, so a deep tree cannot hit the recursion limit (which would depend on
    the caller's stack, not on the source)."""
    out: list[str] = []
    stack: list = [tree]
    append, push, pop = out.append, stack.append, stack.pop
    while stack:
        item = pop()
        kind = type(item)
        if kind is _Text:
            append(item)
        elif isinstance(item, ast.AST):
            head, fields = _shape(kind)
            append(head)
            push(_CLOSE)
            for name, label, statements in fields:
                value = getattr(item, name, None)
                if value is None or value == []:
                    continue
                if statements and type(value) is list:
                    value = [s for s in value if not _is_bare_string(s)]
                push(value)
                push(label)
        elif kind is list:
            append("[")
            push(_CLOSE_LIST)
            for value in reversed(item):
                push(value)
                push(_COMMA)
        else:
            append(repr(item))
    return "".join(out)


def _code_digest(data: bytes) -> str:
    """32 hex digits of what counts as code in a source file: its syntax tree without docstrings
    and line numbers, or its bytes when it does not parse."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, MemoryError, RecursionError):  # e.g. a syntax error: still code
        return hashlib.sha256(b"bytes\0" + data).hexdigest()[:32]
    text = _canonical(tree).encode("utf-8", "surrogatepass")
    return hashlib.sha256(f"{SCHEME}\0".encode() + text).hexdigest()[:32]


def _memo_path() -> Path | None:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    tag = sys.implementation.cache_tag
    if not os.path.isabs(base) or not tag:
        return None
    return Path(base) / "abm" / f"source-digests-{SCHEME}-{tag}.json"


def _read_memo(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str) and len(v) == 32}


_MEMO: dict[str, str] | None = None  # bytes hash -> code digest, from the memo file, then this process's
_NEW: dict[str, str] = {}  # computed by this process, not yet written


def source_digest(data: bytes) -> str:
    """``_code_digest(data)``, remembered by the hash of ``data`` (within and across processes)."""
    global _MEMO
    if _MEMO is None:
        _MEMO = _read_memo(_memo_path())
    key = hashlib.sha256(data).hexdigest()[:32]
    digest = _MEMO.get(key)
    if digest is None:
        _MEMO[key] = _NEW[key] = digest = _code_digest(data)
    return digest


def _save_memo() -> None:
    """Add this process's new digests to the memo file (merged with what other processes wrote
    meanwhile; the newest ``MEMO_LIMIT`` kept). Nothing is written when nothing is new; a cache
    that cannot be written is left alone."""
    path = _memo_path()
    if not _NEW or path is None:
        return
    merged = _read_memo(path)
    for key in _NEW:
        merged.pop(key, None)
    merged.update(_NEW)
    keep = dict(list(merged.items())[-MEMO_LIMIT:])
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(keep, separators=(",", ":")))
        os.replace(tmp, path)
        _NEW.clear()
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


@functools.lru_cache(maxsize=1)
def _project_fingerprints() -> tuple[str, str]:
    """(this scheme's, the first scheme's) 12 hex digits naming this source tree and its
    result-shaping library versions; the first scheme hashed the files' bytes."""
    digest, by_bytes = hashlib.sha256(f"{SCHEME}\0".encode()), hashlib.sha256()
    for package in PACKAGES:
        root = Path(importlib.import_module(package).__file__).parent
        for path in sorted(root.rglob("*.py")):
            name, data = path.relative_to(root.parent).as_posix().encode() + b"\0", path.read_bytes()
            digest.update(name + source_digest(data).encode() + b"\0")
            by_bytes.update(name)
            by_bytes.update(data + b"\0")
    for name in LIBRARIES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{name}=={version}\0".encode())
        by_bytes.update(f"{name}=={version}\0".encode())
    _save_memo()
    return digest.hexdigest()[:12], by_bytes.hexdigest()[:12]


def _project_fingerprint() -> str:
    """12 hex digits naming this source tree (its code, see above) and its result-shaping
    library versions."""
    return _project_fingerprints()[0]


_project_fingerprint.cache_clear = _project_fingerprints.cache_clear


def code_fingerprint(scenario=None) -> str:
    """This source tree's fingerprint; for ``scenario``, with its plugins' (``+module=hash``)."""
    base = _project_fingerprint()
    if scenario is None:
        return base
    from abm import registry

    modules = registry.plugin_modules(scenario.policy.name, scenario.family, scenario.objective)
    return base + "".join(f"+{m}={plugin_hash(m)}" for m in modules if not _is_project_module(m))


code_fingerprint.cache_clear = _project_fingerprints.cache_clear  # the old lru_cache's handle


def _is_project_module(module: str) -> bool:
    return module.split(".")[0] in PACKAGES


def _top_spec(module: str):
    top = module.split(".")[0]
    loaded = sys.modules.get(top)
    if loaded is not None:
        return getattr(loaded, "__spec__", None), loaded
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:  # where the registry's fallback would find it: the working directory
        for candidate in (Path.cwd() / top / "__init__.py", Path.cwd() / f"{top}.py"):
            if candidate.is_file():
                locations = [str(candidate.parent)] if candidate.name == "__init__.py" else None
                return importlib.util.spec_from_file_location(top, candidate,
                                                              submodule_search_locations=locations), None
    return spec, None


def plugin_files(module: str) -> list[Path]:
    """The source files a plugin module's hash covers: its top-level package's ``.py`` files, or
    the top-level module's file (none when it has no file or cannot be found)."""
    spec, loaded = _top_spec(module)
    if loaded is not None and getattr(loaded, "__path__", None) is not None:
        roots = [Path(p) for p in loaded.__path__]
    elif spec is not None and spec.submodule_search_locations:
        roots = [Path(p) for p in spec.submodule_search_locations]
    else:
        origin = getattr(loaded, "__file__", None) or (spec.origin if spec is not None else None)
        return [Path(origin)] if origin and Path(origin).is_file() else []
    files = []
    for root in roots:
        files += [p for p in root.rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(set(files))


_PLUGIN_HASHES: dict[str, tuple[str, str]] = {}


def _plugin_hashes(module: str) -> tuple[str, str] | None:
    """(this scheme's, the first scheme's) 8 hex digits of a plugin module's sources (None when
    none can be found: not remembered, the module may become findable, e.g. by the registry's
    working-directory fallback)."""
    if module in _PLUGIN_HASHES:
        return _PLUGIN_HASHES[module]
    digest, by_bytes, found = hashlib.sha256(f"{SCHEME}\0".encode()), hashlib.sha256(), False
    for path in plugin_files(module):
        found = True
        data = path.read_bytes()
        digest.update(path.name.encode() + b"\0" + source_digest(data).encode() + b"\0")
        by_bytes.update(path.name.encode() + b"\0" + data + b"\0")
    if not found:  # e.g. a class defined in a notebook: hash the source of what was registered
        from abm import registry

        for cls in registry.registered_classes(module):
            try:
                source = inspect.getsource(cls)
            except (OSError, TypeError):
                continue
            digest.update(source_digest(textwrap.dedent(source).encode()).encode() + b"\0")
            by_bytes.update(source.encode() + b"\0")
            found = True
    if not found:
        return None
    _save_memo()
    _PLUGIN_HASHES[module] = value = (digest.hexdigest()[:8], by_bytes.hexdigest()[:8])
    return value


def plugin_hash(module: str) -> str:
    """8 hex digits of a plugin module's code ('unknown' when no source can be found)."""
    hashes = _plugin_hashes(module)
    return "unknown" if hashes is None else hashes[0]


def differs(recorded: str | None, scenario=None) -> bool:
    """A recorded fingerprint names other code (None, from before fingerprints, never does): the
    project's differs, or one of the plugins it names hashes differently now (or cannot be found).
    With ``scenario``, also when the run's plugins are not the ones recorded. A part recorded by
    the first scheme (bytes) counts as the same code when the bytes are the same now."""
    if recorded is None:
        return False
    base, *plugins = recorded.split("+")
    if base not in _project_fingerprints():
        return True
    for part in plugins:
        module, _, digest = part.partition("=")
        now = _plugin_hashes(module)
        if now is None or digest not in now:
            return True
    if scenario is None:
        return False
    _, *expected = code_fingerprint(scenario).split("+")
    return [p.partition("=")[0] for p in plugins] != [p.partition("=")[0] for p in expected]


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
