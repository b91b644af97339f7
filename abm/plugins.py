"""The plugin seam: the one loader of names a user wrote (policies, families, objectives), and
the one place that decides where their code may come from.

Code runs only where the user said so. A plugin module is imported when it lies

- in an installed package (an entry point's module; anything on ``sys.path`` but the working
  directory: site-packages, ``PYTHONPATH``, a folder a program appended), or
- in a folder the user trusts for this command: ``--plugins DIR`` (``allow(folders=...)``), or
- in the working directory, when the user typed the name: on the command line (``--policy
  mymod:Cls``, ``--objective``, ``--set policy.name=…``/``family=…``/``objective=…``) or in
  code (the Python API's ``policy=``, ``objective=``, ``overrides``); ``allow(names=...)``.

A name read from a file (a scenario, a study, a run folder's ``scenario.yaml``) is imported from
those places only: the working directory is never searched for it, even where Python put it on
``sys.path`` (``python -m``, ``python -c``, a notebook), unless ``PYTHONPATH`` or ``--plugins``
names it; a module found there is refused in one line that says how to consent. Commands that
only read (``abm inspect``, ``abm report``, ``abm dashboard FOLDER``) import no plugin at all
(``forbid``). The consent in force (``current``) travels with each task of a study to its Dask
workers, which apply it (``allowed``).

An import is guarded: any failure inside the module, ``SystemExit`` and ``KeyboardInterrupt``
included (a real Ctrl+C stays an interruption), is a one-line ``UserError`` naming what was
asked for, the module and its file (exit 2); an import still running after
``ABM_PLUGIN_IMPORT_WARN_S`` seconds (default 10) prints a warning naming the module, so a
plugin that hangs at import never hangs abm without a word. ``resolve`` turns ``module:Attr``
(or an entry point's name) into the object it names. The registry (policies, families) and
``abm.objectives`` (objectives) check what it returns. Nothing here knows a policy, a family or
an objective.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import os
import re
import signal
import sys
import threading
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator

from abm.errors import UserError

ENTRY_POINT_GROUPS = {"policy": "abm.policies", "family": "abm.families", "objective": "abm.objectives"}
# the extra that installs a missing third-party module a built-in policy or family needs
EXTRAS = {"torch": "rl", "stable_baselines3": "rl", "gymnasium": "rl", "nevergrad": "rl", "solara": "dashboard"}
PROJECT = ("abm", "policies")  # our own packages: never plugins
SLOW_IMPORT_ENV = "ABM_PLUGIN_IMPORT_WARN_S"
SLOW_IMPORT_S = 10.0  # a plugin still importing after this long is named on stderr
HOW_TO_CONSENT = "to trust it, give --plugins DIR or type the name on the command line or in code"
_MODULE_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class Consent:
    """Where plugin code may come from beyond the installed packages (picklable: it travels
    with a study's tasks to Dask workers)."""

    folders: tuple[str, ...] = ()  # any plugin module from these folders (--plugins DIR)
    named: tuple[tuple[str, str], ...] = ()  # (folder, top-level module) the user named: the working directory
    forbid: str | None = None  # a command that imports no plugin at all (abm report, ...)


_CONSENT = Consent()
_ADDED: list[str] = []  # sys.path entries appended for consented folders


def current() -> Consent:
    return _CONSENT


def _folder(path: str | os.PathLike) -> str:
    return str(Path(os.path.abspath(path)).resolve())


def module_of(name: str) -> str | None:
    """The top-level module a plugin name refers to (``mymod:Cls`` and ``pkg.mod`` -> ``mymod``,
    ``pkg``); None for a name that is not one (a built-in name, ``outcome:rawlsian`` is one)."""
    if not isinstance(name, str):
        return None
    module, sep, attr = name.partition(":")
    if not _MODULE_PATH.fullmatch(module) or not (sep and attr or "." in module):
        return None
    return module.split(".")[0]


def typed_names(values: Iterable[Any], sets: Iterable[str] = ()) -> list[str]:
    """The plugin names among what the user typed: ``values`` (``--policy``, ``--objective``) and
    the values of ``--set`` overrides of the fields that name plugins."""
    names = [v for v in values if isinstance(v, str)]
    for text in sets:
        key, sep, value = str(text).partition("=")
        if sep and key.strip().split(".")[-1] in ("name", "family", "objective", "policy", "policies", "objectives"):
            names += re.findall(r"[A-Za-z_][\w.]*(?::[A-Za-z_][\w.]*)?", value)
    return names


def check_folders(folders: Iterable[str | os.PathLike], flag: str = "--plugins") -> list[str]:
    """The folders a user named to import plugins from, each an existing folder (else one line)."""
    checked = []
    for folder in folders:
        path = Path(folder)
        if not path.exists():
            raise UserError(f"{flag} {folder}: no such folder")
        if not path.is_dir():
            raise UserError(f"{flag} {folder}: not a folder (give the folder that holds the plugin module)")
        checked.append(_folder(path))
    return checked


def allow(folders: Iterable[str | os.PathLike] = (), names: Iterable[str] = ()) -> None:
    """Consent for the rest of this session (a CLI command: ``session``; the Python API: the
    process): plugin modules from ``folders``, and the modules of ``names`` (plugin names the
    user typed) from the working directory."""
    global _CONSENT
    cwd = _folder(os.getcwd())
    extra_named = tuple((cwd, top) for top in (module_of(n) for n in names) if top is not None)
    _CONSENT = replace(_CONSENT, folders=tuple(dict.fromkeys((*_CONSENT.folders, *check_folders(folders)))),
                       named=tuple(dict.fromkeys((*_CONSENT.named, *extra_named))))


@contextlib.contextmanager
def allowed(consent: Consent) -> Iterator[None]:
    """Within: ``consent`` (what ``current`` returned elsewhere: a study's worker) added to this one."""
    global _CONSENT
    before = _CONSENT
    _CONSENT = Consent(tuple(dict.fromkeys((*before.folders, *consent.folders))),
                       tuple(dict.fromkeys((*before.named, *consent.named))), before.forbid or consent.forbid)
    try:
        yield
    finally:
        _CONSENT = before


def forbid(command: str) -> None:
    """This session's command imports no plugin (it only reads files)."""
    global _CONSENT
    _CONSENT = replace(_CONSENT, forbid=command)


@contextlib.contextmanager
def session() -> Iterator[None]:
    """One CLI command: the consent it gives (``allow``, ``forbid``) and the folders it put on
    ``sys.path`` end with it."""
    global _CONSENT
    before, added = _CONSENT, len(_ADDED)
    try:
        yield
    finally:
        _CONSENT = before
        for entry in _ADDED[added:]:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)
        del _ADDED[added:]


# -- where a module lies -----------------------------------------------------------------------
def _spec(top: str):
    loaded = sys.modules.get(top)
    try:
        return loaded.__spec__ if loaded is not None else importlib.util.find_spec(top)
    except (ImportError, ValueError, AttributeError):
        return None


def _folders_of(spec) -> set[str]:
    """The folders that hold a top-level module found as ``spec`` (not resolving the module's own
    link: a link in the working directory lies in the working directory)."""
    if spec is None:
        return set()
    locations = list(spec.submodule_search_locations or ())
    if locations:
        return {_folder(Path(os.path.abspath(p)).parent) for p in locations}
    if spec.has_location and spec.origin:
        return {_folder(Path(os.path.abspath(spec.origin)).parent)}
    return set()


def _consented_folders(top: str) -> tuple[str, ...]:
    """The folders the user allowed ``top`` to come from: every ``--plugins`` folder, and the
    folders where they typed its name."""
    return (*_CONSENT.folders, *(f for f, t in _CONSENT.named if t == top))


def _in_folder(folder: str, top: str) -> bool:
    return (Path(folder) / f"{top}.py").is_file() or (Path(folder) / top).is_dir()


def _cwd_trusted(cwd: str, top: str) -> bool:
    """The working directory is trusted for ``top``: the user named the module, or the folder
    (``--plugins``, ``PYTHONPATH``, or a ``sys.path`` entry of a program's own, not the one Python
    put first)."""
    if (cwd, top) in _CONSENT.named or cwd in _CONSENT.folders:
        return True
    explicit = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    explicit += [p for p in sys.path[1:] if p not in ("", ".") and p not in _ADDED]  # not ours (``allow``)
    return any(_folder(p) == cwd for p in explicit)


def find(top: str):
    """Where a plugin's top-level module would be imported from, without importing it: its spec
    on ``sys.path``, else in a consented folder (None: nowhere the user allowed). For the code
    fingerprint (``abm.provenance``)."""
    spec = _spec(top)
    if spec is not None:
        return spec
    for folder in _consented_folders(top):
        for candidate in (Path(folder) / top / "__init__.py", Path(folder) / f"{top}.py"):
            if candidate.is_file():
                locations = [str(candidate.parent)] if candidate.name == "__init__.py" else None
                return importlib.util.spec_from_file_location(top, candidate, submodule_search_locations=locations)
    return None


def _admit(module_name: str, what: str) -> None:
    """Refuse a plugin module that lies where the user did not allow code to come from; put a
    consented folder that holds it on ``sys.path``."""
    top = module_name.split(".")[0]
    if top == "__main__":
        return
    cwd = _folder(os.getcwd())
    where = _folders_of(_spec(top))
    refusal = (f"{what}: module {module_name!r} was not imported: it lies in the working directory {cwd}, and "
               f"a name read from a file is imported only from an installed package or PYTHONPATH ({HOW_TO_CONSENT})")
    if where:
        if cwd in where and not _cwd_trusted(cwd, top):
            raise UserError(refusal)
        return
    for folder in _consented_folders(top):
        if _in_folder(folder, top):
            if folder not in sys.path:
                sys.path.append(folder)  # appended: never shadows an installed package
                _ADDED.append(folder)
            importlib.invalidate_caches()
            return
    if _in_folder(cwd, top):
        raise UserError(refusal)


# -- importing -----------------------------------------------------------------------------------
def one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split()) or 'no message'}"


def import_builtin(module_name: str, what: str):
    """A built-in module; a missing optional dependency names the extra that installs it."""
    from abm import pip_install

    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top in EXTRAS:
            raise UserError(f"{what} needs the [{EXTRAS[top]}] extra: {pip_install(EXTRAS[top])} "
                            f"(no module named {top!r})") from None
        raise


def slow_import_s() -> float:
    """The bound after which a plugin still importing is named on stderr (``ABM_PLUGIN_IMPORT_WARN_S``)."""
    raw = os.environ.get(SLOW_IMPORT_ENV, "").strip()
    if not raw:
        return SLOW_IMPORT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"{SLOW_IMPORT_ENV}: expected a number of seconds > 0, got {raw!r}")
    return value


@contextlib.contextmanager
def _noting_signals(seen: list[int]) -> Iterator[None]:
    """Within (main thread): a SIGINT or SIGTERM is noted in ``seen`` before its handler runs, so
    a real Ctrl+C during an import is told from a module that raises KeyboardInterrupt itself."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if callable(handler):
            def noting(number, frame, handler=handler):
                seen.append(number)
                handler(number, frame)
            previous[signum] = handler
            signal.signal(signum, noting)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def module_roots(spec) -> list[Path]:
    """A found module's own files: its package folder(s), or its one file (absolute paths)."""
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(os.path.abspath(p)) for p in spec.submodule_search_locations]
    return [Path(os.path.abspath(spec.origin))] if spec.has_location and spec.origin else []


def _file_of(exc: BaseException, top: str) -> str | None:
    """The user's file a failed import points at: a SyntaxError's file, else the deepest frame in
    the plugin's own files, else the plugin's file."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}, line {exc.lineno}" if exc.lineno else exc.filename
    roots = module_roots(_spec(top))
    found, tb = None, exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        path = Path(os.path.abspath(name))
        if not name.startswith("<") and any(path == r or r in path.parents for r in roots):
            found = f"{name}, line {tb.tb_lineno}"
        tb = tb.tb_next
    if found is None and len(roots) == 1:
        found = str(roots[0] / "__init__.py" if roots[0].is_dir() else roots[0])
    return found


def import_plugin(module_name: str, what: str, *, installed: bool = False):
    """Import a plugin's module where the user allowed it (``installed``: an entry point's module,
    from an installed package); on any failure a one-line UserError beginning with ``what``."""
    if not module_name or not _MODULE_PATH.fullmatch(module_name):
        raise UserError(f"{what}: {module_name!r} is not a module path")
    if _CONSENT.forbid:
        raise UserError(f"{what}: not imported ({_CONSENT.forbid} imports no plugin code)")
    top = module_name.split(".")[0]
    if top not in PROJECT and not installed:
        _admit(module_name, what)
    bound = slow_import_s()
    timer = threading.Timer(bound, lambda: print(
        f"warning: still importing plugin module {module_name!r} after {bound:g} s ({SLOW_IMPORT_ENV}); a plugin "
        f"that hangs at import hangs abm (Ctrl+C stops it)", file=sys.stderr, flush=True))
    timer.daemon = True
    seen: list[int] = []
    try:
        with _noting_signals(seen):
            timer.start()
            try:
                return importlib.import_module(module_name)
            finally:
                timer.cancel()
    except UserError:
        raise
    except BaseException as exc:  # noqa: BLE001  anything a user's module does at import is theirs to fix
        if isinstance(exc, KeyboardInterrupt) and seen:
            raise  # a real Ctrl+C (or SIGTERM) while importing: an interruption, not a refusal
        file = _file_of(exc, top)
        where = f"; file {file}" if file else ""
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            raise UserError(f"{what}: module {module_name!r} raised {type(exc).__name__} while being imported "
                            f"({one_line(exc)}); a plugin module must not stop the program at import{where}") from None
        if isinstance(exc, ModuleNotFoundError) and exc.name is not None and \
                module_name.split(".")[:len(exc.name.split("."))] == exc.name.split("."):
            where = f"; it must be installed, on PYTHONPATH, or in a folder given with --plugins DIR{where}"
        raise UserError(f"{what}: cannot import module {module_name!r} ({one_line(exc)}){where}") from None


def resolve(kind: str, name: str, what: str) -> tuple[Any, str]:
    """The object a plugin name refers to, and its ``module:Attr`` target: the name itself, or
    the value of the entry point of that name in ``kind``'s group. Every refusal is one
    ``UserError`` beginning with ``what`` (then ": why")."""
    eps = entry_points(kind)
    installed = ":" not in name and name in eps
    target = eps[name].value if installed else name
    module_name, sep, attr = target.partition(":")
    if not sep or not attr:
        raise UserError(f"{what}: expected module:Class, got {target!r}")
    module = import_plugin(module_name, what, installed=installed)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise UserError(f"{what}: module {module_name!r} has no {attr!r}")
    return obj, target


@lru_cache(maxsize=None)
def _entry_points(group: str) -> dict[str, Any]:
    from importlib.metadata import entry_points as found

    return {ep.name: ep for ep in found(group=group)}


def entry_points(kind: str) -> dict[str, Any]:
    """Installed packages' entry points of ``kind`` ('policy', 'family' or 'objective'), by name
    (built-in names win over an entry point of the same name)."""
    return _entry_points(ENTRY_POINT_GROUPS[kind])
