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
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
from importlib import metadata
from pathlib import Path

PACKAGES = ("abm", "policies")
LIBRARIES = ("numpy", "scipy", "pandas", "scikit-learn", "torch", "mesa", "simpy", "gymnasium",
             "stable-baselines3")


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
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


def recorded_fingerprint(folder: Path) -> str | None:
    """The fingerprint a complete run folder recorded (None: none recorded, or unreadable)."""
    try:
        return json.loads((Path(folder) / "summary.json").read_text()).get("code_fingerprint")
    except (OSError, ValueError, AttributeError):
        return None


def differs(recorded: str | None) -> bool:
    """A recorded fingerprint names other code (None, from before fingerprints, never does)."""
    return recorded is not None and recorded != code_fingerprint()


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
