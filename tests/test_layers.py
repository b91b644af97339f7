"""The layers run one way: every import among the project's modules points down the declared
order (docs/ARCHITECTURE.md), and no modules import each other in a circle.

Every import counts, wherever it stands: module level, inside a function, under
``TYPE_CHECKING``, and so does ``importlib.import_module("...")`` or ``__import__("...")`` of a
project module named by a literal string (an import written another way). Names the plugin seam
loads from data at run time (``abm.plugins``: the registry's "module:Class", a family's module
path) are not imports.

The root package ``abm`` (its ``__init__``) is in no layer: Python runs it before any ``abm.*``
module, so everything depends on it, and its PEP 562 ``__getattr__`` imports the Python API
(``abm.api``, ``abm.study``) when ``abm.run`` and the like are first asked for. Its imports and
imports of it are not counted.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

from conftest import ROOT

# lowest first; a module may import its own layer (without circles) and the layers below it
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("abm.errors", "abm.progress", "abm.provenance", "abm.data", "abm.hawkes", "abm.registry",
              "abm.plugins", "abm.world", "abm.objectives", "abm.safe_yaml", "abm.strict",
              "policies", "policies.base")),  # the Policy protocol, beside abm.world's (docs/ARCHITECTURE.md)
    ("core", ("abm.eventlog", "abm.agents", "abm.engine", "abm.config", "abm.build")),
    ("families", ("abm.families", "abm.families.*")),
    ("adapters", ("abm.gym", "abm.vector")),
    ("policies", ("policies.*",)),
    ("assembly", ("abm.runner", "abm.population")),
    ("applications", ("abm.study", "abm.study.*", "abm.reports", "abm.reports.*", "abm.inspect", "abm.bench",
                      "abm.dashboard", "abm.dashboard.*", "abm.cli", "abm.api",
                      "abm.reference")),
)
PACKAGES = ("abm", "policies")
ROOT_PACKAGE = "abm"  # in no layer (see above)


def project_modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def layer_of(module: str) -> int:
    for k, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(module, p) for p in patterns):
            return k
    raise AssertionError(f"module {module} is in no layer: add it to LAYERS (and to docs/ARCHITECTURE.md)")


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """Project modules imported anywhere in ``path`` (relative imports resolved)."""
    is_pkg = path.name == "__init__.py"
    package = module if is_pkg else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif _imports_by_name(node):
            targets = [node.args[0].value]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import abm.families.eutopia` -> the module itself
                target = target.rpartition(".")[0]
            if target and target not in (module, ROOT_PACKAGE):
                found.add(target)
    return found


def _imports_by_name(node: ast.AST) -> bool:
    """``importlib.import_module("x")``, ``import_module("x")`` or ``__import__("x")``: a literal name."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in ("import_module", "__import__")


def import_graph() -> dict[str, set[str]]:
    mods = project_modules()
    known = set(mods)
    return {m: imports_of(m, p, known) for m, p in mods.items() if m != ROOT_PACKAGE}


def test_every_module_has_a_layer():
    for module in import_graph():
        layer_of(module)


def test_no_import_points_up_the_layers():
    upward = []
    for module, targets in import_graph().items():
        for target in targets:
            if layer_of(target) > layer_of(module):
                upward.append(f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} "
                              f"({LAYERS[layer_of(target)][0]})")
    assert upward == []


def test_no_import_circles():
    graph = import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []


@pytest.mark.parametrize("source, expected", [
    ("import abm.families.eutopia", {"abm.families.eutopia"}),
    ("from abm import registry", {"abm.registry"}),
    ("from abm import __version__", set()),  # the root package: in no layer
    ("def f():\n    from .lp import solve\n", {"policies.fair_mdp.lp"}),
    ("import importlib\nbase = importlib.import_module('abm.config').ScenarioBase", {"abm.config"}),
    ("def f():\n    return __import__('policies.base')", {"policies.base"}),
    ("import importlib\nname = 'abm.config'\nmod = importlib.import_module(name)", set()),  # data: the plugin seam
])
def test_the_checker_sees_every_form_of_import(tmp_path, source, expected):
    path = tmp_path / "mod.py"
    path.write_text(source)
    known = set(project_modules())
    assert imports_of("policies.fair_mdp.policies", path, known) == expected


def test_the_checker_catches_an_upward_import_and_a_circle(monkeypatch):
    real = import_graph()
    monkeypatch.setattr(__import__(__name__), "import_graph",
                        lambda: {**real, "abm.engine": real["abm.engine"] | {"abm.runner"},
                                 "abm.runner": real["abm.runner"] | {"abm.engine"}})
    with pytest.raises(AssertionError, match="abm.engine .core. imports abm.runner"):
        test_no_import_points_up_the_layers()
    with pytest.raises(AssertionError):
        test_no_import_circles()
