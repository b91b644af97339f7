"""The layers run one way: every import among the project's modules points down the declared
order (docs/ARCHITECTURE.md), and no modules import each other in a circle.

Every import counts, wherever it stands: module level, inside a function, under
``TYPE_CHECKING``. Names loaded from strings at run time (the registry's "module:Class") are the
plugin seam, not imports, and are not counted.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

from conftest import ROOT

# lowest first; a module may import its own layer (without circles) and the layers below it
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("abm", "abm.errors", "abm.progress", "abm.provenance", "abm.data", "abm.hawkes", "abm.registry",
              "abm.world", "abm.objectives", "abm.safe_yaml")),
    ("core", ("abm.eventlog", "abm.agents", "abm.engine", "abm.config", "abm.build")),
    ("families", ("abm.families", "abm.families.*")),
    ("adapters", ("abm.gym", "abm.vector")),
    ("policies", ("policies", "policies.*")),
    ("assembly", ("abm.runner", "abm.population")),
    ("applications", ("abm.study", "abm.study.*", "abm.reports", "abm.reports.*", "abm.inspect", "abm.bench",
                      "abm.dashboard", "abm.dashboard.*", "abm.cli", "abm.api",
                      "abm.reference")),
)
PACKAGES = ("abm", "policies")


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
            if target and target != module:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    mods = project_modules()
    known = set(mods)
    return {m: imports_of(m, p, known) for m, p in mods.items()}


def test_every_module_has_a_layer():
    for module in project_modules():
        layer_of(module)


def test_no_import_points_up_the_layers():
    upward = []
    for module, targets in import_graph().items():
        for target in targets:
            if target != "abm" and layer_of(target) > layer_of(module):
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
    ("from abm import __version__", {"abm"}),
    ("def f():\n    from .lp import solve\n", {"policies.fair_mdp.lp"}),
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
