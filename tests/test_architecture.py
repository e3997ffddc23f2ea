"""The import rule (docs/architecture.md): packages import only downward, and no module cycle exists.

Every ``import`` in every module counts, at module level or inside a function (an import placed in a function
to dodge a cycle is still a cycle); only imports under ``if TYPE_CHECKING:`` are left out (they never run).
"""

from __future__ import annotations

import ast
import importlib.util
from collections import defaultdict
from pathlib import Path

import slimkit

ROOT = Path(slimkit.__file__).parent

#: Top to bottom. A package may import its own layer's packages or any lower layer, never a higher one.
LAYERS: list[tuple[str, ...]] = [
    ("slimkit", "slimkit.__main__", "slimkit.cli", "slimkit.demo", "slimkit.razor", "slimkit.compression"),
    ("slimkit.faces", "slimkit.serve"),
    ("slimkit.experiment",),
    ("slimkit.engine",),
    ("slimkit.config", "slimkit.formats"),
    ("slimkit.algorithms",),
    ("slimkit.engines",),
    ("slimkit.training",),
    ("slimkit.evaluation",),
    ("slimkit.data", "slimkit.zoo"),
    ("slimkit.core", "slimkit.errors", "slimkit.utils"),
]
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}
def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def _imports(path: Path, type_only: bool = False) -> set[str]:
    """What ``path`` imports; ``type_only`` counts the imports under ``if TYPE_CHECKING:`` too."""
    module = _module_name(path)
    tree = ast.parse(path.read_text())
    skipped = set() if type_only else _type_checking_nodes(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from slimkit import zoo` imports the module slimkit.zoo
                candidate = f"{target}.{alias.name}"
                found.add(candidate if candidate in MODULES or _is_module(candidate) else target)
    return {f for f in found if f == "slimkit" or f.startswith("slimkit.")}


FILES = sorted(ROOT.rglob("*.py"))
MODULES = {_module_name(p) for p in FILES}
GRAPH = {_module_name(p): _imports(p) for p in FILES}
#: with the type-only imports: a circle there is still two modules that need each other to be understood
TYPED_GRAPH = {_module_name(p): _imports(p, type_only=True) for p in FILES}


def _package(module: str) -> str:
    for depth in (2, 1):
        name = ".".join(module.split(".")[:depth])
        if name in LAYER_OF:
            return name
    raise AssertionError(f"{module} belongs to no layer: add its package to LAYERS in tests/test_architecture.py")


def _layer(module: str) -> int:
    return LAYER_OF[_package(module)]


def test_every_package_has_a_layer():
    assert {_package(m) for m in MODULES} <= set(LAYER_OF)


def test_imports_run_downward():
    upward = []
    for module, targets in GRAPH.items():
        for target in targets:
            if target == "slimkit" and module != "slimkit":  # importing the root package = a public face
                upward.append(f"{module} -> slimkit (import the submodule itself)")
                continue
            if _layer(target) < _layer(module):
                upward.append(f"{module} -> {target}")
    assert not upward, "imports that run upward:\n" + "\n".join(sorted(upward))


def _cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    graph = defaultdict(set)
    for module, targets in imports.items():
        for target in targets:
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            package_init = target == module.rsplit(".", 1)[0]  # a module importing its own package's __init__
            if target in MODULES and target != module and not package_init:
                graph[module].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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
                found.append(sorted(component))

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_cycles_through_type_only_imports():
    """A type annotation that needs the importer back wants a Protocol in the lower module (speedup's Tracer)."""
    cycles = _cycles(TYPED_GRAPH)
    assert not cycles, "cycles through `if TYPE_CHECKING:` imports:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _all_names(tree: ast.Module) -> set[str]:
    return {elt.value for node in tree.body if isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        for elt in getattr(node.value, "elts", []) if isinstance(elt, ast.Constant)}


def _public_classes() -> dict[str, list[str]]:
    """Public class name -> the modules defining it.

    Counted: module-level classes of public modules, and classes of private modules (``_compressor``) that a
    module imports and lists in its ``__all__``.
    """
    trees = {_module_name(p): ast.parse(p.read_text()) for p in FILES}
    exported = {(node.module, alias.name) for tree in trees.values() for node in tree.body
                if isinstance(node, ast.ImportFrom) and node.module for alias in node.names
                if alias.name in _all_names(tree)}
    defined: dict[str, list[str]] = defaultdict(list)
    for module, tree in trees.items():
        public_module = not any(part.startswith("_") for part in module.split(".") if part != "__main__")
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and (
                    public_module or (module, node.name) in exported):
                defined[node.name].append(module)
    return defined


def test_public_class_names_are_defined_once():
    twice = {name: modules for name, modules in _public_classes().items() if len(modules) > 1}
    assert not twice, "public class names defined in more than one module (give the engine its own name):\n" + \
        "\n".join(f"{name}: {', '.join(sorted(modules))}" for name, modules in sorted(twice.items()))


def test_the_duplicate_check_sees_classes_of_public_modules_and_exported_ones():
    defined = _public_classes()
    assert defined["LevelPruner"] == ["slimkit.faces.nni.v2.basic"]  # NNI 1.x's is the engine, LevelEngine
    assert defined["LevelEngine"] == ["slimkit.engines.pruning.one_shot"]
    assert "slimkit.engines._compressor" not in defined["Compressor"]  # the engines' base: private, unexported
    assert "_NormPruner" not in defined
