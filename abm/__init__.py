"""abm: an agent-based, discrete-event engine for the long-run fairness of lending policies.

Applicants, groups and the bank are Mesa agents on one SimPy clock; scenario families
(``abm.families``) say how a population is generated, how applications arrive, what an
observation is and what a decision does. Policies live in the top-level ``policies`` package.

The Python API (``abm.api``), re-exported here lazily so ``import abm`` stays cheap::

    import abm
    run = abm.run("scenarios/eutopia.yaml", policy="random", episodes=20)
    run.episodes, run.events, run.agents, run.tidy(), run.history(17)
    abm.load_run("outputs/<run folder>"); abm.study("scenarios/studies/smoke.yaml", workers=2)

``abm.Policy`` is the base class of a decision module (``policies.base.Policy``).

The distribution (what ``pip install`` names) is ``abm-lending`` (``DISTRIBUTION``): the package
index's ``abm`` is an unrelated project. The import name and the ``abm`` command stay ``abm``.
"""

import importlib
import importlib.util
import sys
import types
from pathlib import Path

__version__ = "0.1.0"
# the name pip installs this project by (setup.cfg's ``name``; a test checks the built wheel's)
DISTRIBUTION = "abm-lending"

_API = ("run", "load_run", "study", "init", "Run", "StudyResult", "bundled_scenarios")
_BASE = {"Policy": "policies.base", "NoParams": "policies.base", "PolicyContext": "abm.world",
         "UserError": "abm.errors"}
__all__ = ["__version__", "DISTRIBUTION", "pip_install", *_API, *_BASE]


def pip_install(extra: str | None = None) -> str:
    """The command that installs this project, with ``extra`` (``"rl"``, ``"dashboard"``, ...):
    ``pip install 'abm-lending[rl]'``, as the missing-extra messages print it."""
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"


def _bind_policies() -> None:
    """Make ``policies`` name this installation's package, whatever the working directory holds.

    ``policies`` is a top-level package (the project's layout). A ``policies/`` folder in a user's
    working directory (first on ``sys.path`` for ``python -c``, notebooks and scripts run there)
    would otherwise shadow it, and every ``policies.*`` import of abm would fail. Binding the
    package found beside ``abm`` before anything imports ``policies`` keeps abm's imports
    working (the user's own folder is then not importable as ``policies`` in that process:
    name it otherwise). Imports only the package's ``__init__`` (a docstring)."""
    ours = Path(__file__).resolve().parent.parent / "policies"
    present = sys.modules.get("policies")
    if present is not None:
        where = getattr(present, "__file__", None)
        if where is not None and Path(where).resolve().parent != ours and (ours / "__init__.py").is_file():
            import warnings

            warnings.warn(f"another top-level package 'policies' ({where}) was imported before abm; abm's "
                          f"policies live in {ours}: rename yours, or import abm first", stacklevel=3)
        return
    init = ours / "__init__.py"
    if not init.is_file():  # an unusual install: leave the import system to it
        return
    spec = importlib.util.spec_from_file_location("policies", init, submodule_search_locations=[str(ours)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["policies"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["policies"]
        raise


_bind_policies()


class _StudyPackage(types.ModuleType):
    """The package ``abm.study`` is also the API's ``abm.study(...)`` (``abm.api.study``): the
    import system binds the subpackage to the name ``abm.study``, so the package is made
    callable instead of shadowing (or being shadowed by) the function."""

    def __call__(self, *args, **kwargs):
        return importlib.import_module("abm.api").study(*args, **kwargs)


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        if name == "study" and type(value) is types.ModuleType:  # the subpackage, as it is bound
            value.__class__ = _StudyPackage
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
if "abm.study" in sys.modules:  # imported before (a reload of this module): bind it again
    setattr(sys.modules[__name__], "study", sys.modules["abm.study"])


def __getattr__(name: str):
    """PEP 562: the API is imported on first use (``abm.run`` imports pandas, mesa, ...)."""
    if name == "study":  # the package, callable as the API's function (_StudyPackage)
        return importlib.import_module("abm.study")
    if name in _API:
        return getattr(importlib.import_module("abm.api"), name)
    if name in _BASE:
        return getattr(importlib.import_module(_BASE[name]), name)
    raise AttributeError(f"module 'abm' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
