"""Import layering of the pruning and quantization engines: imports run one way, nothing hides a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import slimkit

ROOT = Path(slimkit.__file__).parent / "engines"
CHECKED = ("pruning", "quantization")  # quantization/lowbit is owned elsewhere and left out


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> list[tuple[str, ast.AST, bool]]:
    """(imported slimkit.engines module, node, imported at module level outside TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("slimkit.engines"):
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                found.append((target if target in MODULES else node.module, node, id(node) in top))
    return found


def _checked(name: str) -> bool:
    parts = name.split(".")
    return len(parts) > 3 and parts[2] in CHECKED and "lowbit" not in parts


CHECKED_MODULES = sorted(n for n in MODULES if _checked(n))


def test_the_engines_are_found():
    """The parametrized check below must have modules to check (a moved folder once left it with none)."""
    assert len(CHECKED_MODULES) > 40, CHECKED_MODULES


@pytest.mark.parametrize("name", CHECKED_MODULES)
def test_no_hidden_imports(name):
    hidden = [(t, n.lineno) for t, n, at_top in _imports(MODULES[name]) if not at_top]
    assert not hidden, f"{name} imports {hidden} inside a function or TYPE_CHECKING block; import at the top."


def test_no_import_cycles_and_quantization_does_not_import_pruning():
    graph = {
        name: {t for t, _, _ in _imports(path) if t in MODULES and not MODULES[t].name == "__init__.py"}
        for name, path in MODULES.items() if _checked(name) or name.count(".") == 2
    }
    for name, deps in graph.items():
        if ".quantization." in name:
            assert not [d for d in deps if ".pruning" in d], f"{name} imports pruning: {deps}"
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph.get(name, ())):
            assert state.get(dep) != 1, "import cycle: " + " -> ".join([*path, name, dep])
            if dep not in state:
                visit(dep, [*path, name])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
