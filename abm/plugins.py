"""The plugin seam: the one loader of names a user wrote (policies, families, objectives).

A plugin module is imported as any module is (``sys.path``: PYTHONPATH, an installed package);
when it is not found there, the working directory is tried (appended, so it never shadows an
installed package), as ``python -c`` would. ``resolve`` turns ``module:Attr`` (or an entry point's
name) into the object it names; every failure is a one-line ``UserError`` beginning with what
was asked for (exit 2). The registry (policies, families) and ``abm.objectives`` (objectives)
check what it returns. Nothing here knows a policy, a family or an objective.
"""

from __future__ import annotations

import importlib
import os
import sys
from functools import lru_cache
from typing import Any

from abm.errors import UserError

ENTRY_POINT_GROUPS = {"policy": "abm.policies", "family": "abm.families", "objective": "abm.objectives"}
# the extra that installs a missing third-party module a built-in policy or family needs
EXTRAS = {"torch": "rl", "stable_baselines3": "rl", "gymnasium": "rl", "nevergrad": "rl", "solara": "dashboard"}


@lru_cache(maxsize=None)
def _entry_points(group: str) -> dict[str, Any]:
    from importlib.metadata import entry_points as found

    return {ep.name: ep for ep in found(group=group)}


def entry_points(kind: str) -> dict[str, Any]:
    """Installed packages' entry points of ``kind`` ('policy', 'family' or 'objective'), by name
    (built-in names win over an entry point of the same name)."""
    return _entry_points(ENTRY_POINT_GROUPS[kind])


def one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split()) or 'no message'}"


def import_builtin(module_name: str, what: str):
    """A built-in module; a missing optional dependency names the extra that installs it."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top in EXTRAS:
            raise UserError(f"{what} needs the [{EXTRAS[top]}] extra: pip install 'abm[{EXTRAS[top]}]' "
                            f"(no module named {top!r})") from None
        raise


def import_plugin(module_name: str, what: str):
    """Import a plugin's module; on failure a one-line UserError naming ``what`` and the module."""
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        raise UserError(f"{what}: {module_name!r} is not a module path")
    try:
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            cwd = os.getcwd()
            missing_self = exc.name is not None and module_name.split(".")[0] == exc.name.split(".")[0]
            if not missing_self or cwd in sys.path or "" in sys.path:
                raise
            sys.path.append(cwd)  # as `python -c` would see it; appended: never shadows a package
            importlib.invalidate_caches()
            return importlib.import_module(module_name)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001  any failure inside a user's module is theirs to fix
        raise UserError(f"{what}: cannot import module {module_name!r} ({one_line(exc)}); it must be importable "
                        f"(on PYTHONPATH, in the working directory or installed)") from None


def resolve(kind: str, name: str, what: str) -> tuple[Any, str]:
    """The object a plugin name refers to, and its ``module:Attr`` target: the name itself, or
    the value of the entry point of that name in ``kind``'s group. Every refusal is one
    ``UserError`` beginning with ``what`` (then ": why")."""
    eps = entry_points(kind)
    target = eps[name].value if ":" not in name and name in eps else name
    module_name, sep, attr = target.partition(":")
    if not sep or not attr:
        raise UserError(f"{what}: expected module:Class, got {target!r}")
    module = import_plugin(module_name, what)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise UserError(f"{what}: module {module_name!r} has no {attr!r}")
    return obj, target

