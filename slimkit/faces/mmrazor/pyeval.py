"""A safe evaluator for MMEngine-style ``.py`` config files: the file is read, never run.

MMEngine executes a config file as Python. slimkit does not: it parses the file with :mod:`ast` and walks a
small, closed subset of the language, the subset config files are written in:

* statements: assignments (to names, to ``a.b.c`` keys, to ``a[k]`` items, tuple unpacking, ``+=``), bare
  expressions (docstrings, ``x.update(...)``), ``if`` / ``else``, ``assert``, ``pass``, and ``import`` /
  ``from ... import`` of :data:`~slimkit.faces.mmrazor.pycalls.ALLOWED_IMPORTS` only;
* expressions: literals, names, ``dict(...)``, lists, tuples, sets and dicts (with ``*`` / ``**`` unpacking),
  arithmetic, comparisons, ``and`` / ``or`` / ``not``, ``x if c else y``, f-strings, subscripts and slices,
  comprehensions, calls of :data:`FUNCTIONS` and of the few methods of dicts, lists and strings in
  :data:`~slimkit.faces.mmrazor.pycalls.METHODS`, and ``math`` / ``copy`` functions once imported.

Everything else -- ``def``, ``lambda``, ``class``, loops, ``with``, ``try``, attribute names that start with an
underscore (``__class__``...), calls of anything not listed, imports of any other module -- is refused with a
ConfigError naming the file and line. Reading a config therefore runs no code from it and imports nothing,
which is stricter than MMEngine's own loader (it executes the file).
"""

from __future__ import annotations

import ast
import copy
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.pycalls import ALLOWED_IMPORTS, MAX_SIZE, CallsMixin, check_name


class ConfigEvaluator(CallsMixin):
    """Evaluates one parsed config module into ``namespace``.

    ``attr_get(obj, name, node)`` / ``attr_set(obj, name, value)`` are the config's attribute rules (a dict's
    keys read and write as attributes, like MMEngine's ConfigDict); ``make_dict`` builds the dicts the file
    writes; ``where`` names the file in messages.
    """

    def __init__(self, namespace: dict[str, Any], where: Path, attr_get: Callable[[Any, str], Any],
                 attr_set: Callable[[Any, str, Any], None], make_dict: Callable[..., dict]) -> None:
        self.names, self.where = namespace, where
        self.attr_get, self.attr_set, self.make_dict = attr_get, attr_set, make_dict
        self.functions: dict[str, Callable[..., Any]] = {
            "dict": make_dict, "list": list, "tuple": tuple, "set": set, "int": int, "float": float, "str": str,
            "bool": bool, "round": round, "min": min, "max": max, "abs": abs, "len": len, "range": range,
            "sum": sum, "sorted": sorted, "zip": zip, "enumerate": enumerate, "reversed": reversed,
            "isinstance": isinstance, "hasattr": self._hasattr, "getattr": self._getattr}

    # ------------------------------------------------------------------ errors
    def error(self, node: ast.AST | None, text: str) -> ConfigError:
        """A ConfigError naming the file and line of ``node``."""
        line = f":{node.lineno}" if node is not None and hasattr(node, "lineno") else ""
        return ConfigError(f"{self.where}{line}: {text}")

    # ------------------------------------------------------------------ statements
    def run(self, body: list[ast.stmt]) -> None:
        """Evaluate the statements in order."""
        for stmt in body:
            self.stmt(stmt)

    def stmt(self, node: ast.stmt) -> None:
        """Evaluate one statement (see the module doc for what is allowed)."""
        if isinstance(node, ast.Assign):
            value = self.expr(node.value)
            for target in node.targets:
                self.assign(target, value)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self.assign(node.target, self.expr(node.value))
        elif isinstance(node, ast.AugAssign):
            self.assign(node.target, self.binop(node.op, self.expr(_load(node.target)), self.expr(node.value), node))
        elif isinstance(node, ast.Expr):
            self.expr(node.value)
        elif isinstance(node, ast.If):
            self.run(node.body if self.expr(node.test) else node.orelse)
        elif isinstance(node, ast.Assert):
            if not self.expr(node.test):
                message = self.expr(node.msg) if node.msg is not None else ast.unparse(node.test)
                raise self.error(node, f"the config's assertion failed: {message}")
        elif isinstance(node, ast.Pass):
            return
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.imports(node)
        elif isinstance(node, ast.With):
            raise self.error(node, "'with' blocks (MMEngine's new-style read_base() configs) are not read by "
                                   "slimkit; write the config with _base_ = [...] instead.")
        else:
            raise self.error(node, f"a config may not contain a {type(node).__name__} statement "
                                   f"({ast.unparse(node).splitlines()[0][:60]!r}); slimkit reads configs without "
                                   "running them (assignments, if, assert and allowed imports only).")

    def imports(self, node: ast.Import | ast.ImportFrom) -> None:
        """Bind an allowed module (or names from it); refuse every other import."""
        module = node.module if isinstance(node, ast.ImportFrom) else None
        for alias in node.names:
            name = module or alias.name
            if name not in ALLOWED_IMPORTS or (isinstance(node, ast.ImportFrom) and node.level):
                raise self.error(node, f"the config imports {name!r}; slimkit reads config files without running "
                                       f"them and allows only: {', '.join(sorted(ALLOWED_IMPORTS))}.")
            if module is None:
                self.names[alias.asname or alias.name] = ALLOWED_IMPORTS[name]
            else:
                if alias.name == "*" or alias.name.startswith("_"):
                    raise self.error(node, f"'from {module} import {alias.name}' is not allowed; import names.")
                self.names[alias.asname or alias.name] = self._module_attr(ALLOWED_IMPORTS[name], alias.name, node)

    def assign(self, target: ast.expr, value: Any) -> None:
        """Bind ``value`` to a name, a ``a.b`` key, an ``a[k]`` item or a tuple of targets."""
        if isinstance(target, ast.Name):
            self.names[target.id] = value
        elif isinstance(target, ast.Attribute):
            check_name(self, target.attr, target)
            self.attr_set(self.expr(target.value), target.attr, value)
        elif isinstance(target, ast.Subscript):
            owner = self.expr(target.value)
            if getattr(owner, "slimkit_placeholder", False):
                return  # an item of a value from a skipped base: nothing to set
            if not isinstance(owner, (dict, list)):
                raise self.error(target, f"cannot assign an item of a {type(owner).__name__}.")
            owner[self.expr(target.slice)] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = list(value)
            if len(values) != len(target.elts):
                raise self.error(target, f"cannot unpack {len(values)} values into {len(target.elts)} names.")
            for elt, item in zip(target.elts, values, strict=True):
                self.assign(elt, item)
        else:
            raise self.error(target, f"cannot assign to {ast.unparse(target)!r}.")

    # ------------------------------------------------------------------ expressions
    def expr(self, node: ast.expr) -> Any:  # noqa: C901 (one dispatch over the allowed node types)
        """The value of one expression."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in self.names:
                return self.names[node.id]
            if node.id in self.functions:
                return self.functions[node.id]
            raise self.error(node, f"name {node.id!r} is not defined (configs see their own names, _base_ and "
                                   f"the functions {', '.join(sorted(self.functions))}).")
        if isinstance(node, ast.Attribute):
            check_name(self, node.attr, node)
            owner = self.expr(node.value)
            if isinstance(owner, type(math)):
                return self._module_attr(owner, node.attr, node)
            return self.attr_get(owner, node.attr)
        if isinstance(node, ast.Subscript):
            return self._subscript(self.expr(node.value), self.expr(node.slice), node)
        if isinstance(node, ast.Slice):
            return slice(*(None if p is None else self.expr(p) for p in (node.lower, node.upper, node.step)))
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = self._items(node.elts)
            return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
        if isinstance(node, ast.Dict):
            out = self.make_dict()
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:
                    out.update(self.expr(value))
                else:
                    out[self.expr(key)] = self.expr(value)
            return out
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.UnaryOp):
            value = self.expr(node.operand)
            ops = {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v, ast.Not: lambda v: not v}
            if type(node.op) not in ops:
                raise self.error(node, f"operator {type(node.op).__name__} is not allowed in a config.")
            return ops[type(node.op)](value)
        if isinstance(node, ast.BoolOp):
            result = None
            for value_node in node.values:
                result = self.expr(value_node)
                if isinstance(node.op, ast.And) and not result or isinstance(node.op, ast.Or) and result:
                    return result
            return result
        if isinstance(node, ast.Compare):
            return self._compare(node)
        if isinstance(node, ast.IfExp):
            return self.expr(node.body) if self.expr(node.test) else self.expr(node.orelse)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.JoinedStr):
            return "".join(str(self.expr(v)) if not isinstance(v, ast.FormattedValue) else
                           format(self.expr(v.value), self.expr(v.format_spec) if v.format_spec else "")
                           for v in node.values)
        if isinstance(node, ast.FormattedValue):
            return format(self.expr(node.value), "")
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return self._comprehension(node)
        raise self.error(node, f"a config may not contain {type(node).__name__} expressions "
                               f"({ast.unparse(node)[:60]!r}); slimkit reads configs without running them.")

    def binop(self, op: ast.operator, left: Any, right: Any, node: ast.AST) -> Any:
        """``left <op> right`` for arithmetic and sequence concatenation, with size guards."""
        if isinstance(op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 1000:
            raise self.error(node, f"exponent {right} is too large for a config value.")
        if isinstance(op, ast.Mult) and any(isinstance(v, (str, list, tuple)) for v in (left, right)):
            count = right if isinstance(left, (str, list, tuple)) else left
            seq = left if isinstance(left, (str, list, tuple)) else right
            if isinstance(count, int) and len(seq) * max(count, 0) > MAX_SIZE:
                raise self.error(node, "a repeated sequence this long is not a config value.")
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
               ast.Pow: lambda a, b: a**b}
        if type(op) not in ops:
            raise self.error(node, f"operator {type(op).__name__} is not allowed in a config.")
        try:
            return ops[type(op)](left, right)
        except (TypeError, ZeroDivisionError, OverflowError) as exc:
            raise self.error(node, f"{ast.unparse(node) if isinstance(node, ast.expr) else 'expression'}: {exc}.") \
                from exc

    # ------------------------------------------------------------------ helpers
    def _items(self, nodes: list[ast.expr]) -> list[Any]:
        out: list[Any] = []
        for elt in nodes:
            if isinstance(elt, ast.Starred):
                out.extend(self.expr(elt.value))
            else:
                out.append(self.expr(elt))
        return out

    def _subscript(self, owner: Any, key: Any, node: ast.AST) -> Any:
        if not isinstance(owner, (dict, list, tuple, str, range)):
            return self.attr_get(owner, key) if isinstance(key, str) else _raise(self.error(
                node, f"cannot index a {type(owner).__name__}."))
        try:
            return owner[key]
        except (KeyError, IndexError, TypeError) as exc:
            raise self.error(node, f"{ast.unparse(node) if isinstance(node, ast.expr) else 'item'}: no item {key!r} "
                                   f"({type(exc).__name__}).") from exc

    def _compare(self, node: ast.Compare) -> bool:
        ops = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
               ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
               ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b, ast.Is: lambda a, b: a is b,
               ast.IsNot: lambda a, b: a is not b}
        left = self.expr(node.left)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.expr(right_node)
            if not ops[type(op)](left, right):
                return False
            left = right
        return True

def _load(target: ast.expr) -> ast.expr:
    """The same target as a load expression (for ``x += 1``)."""
    node = copy.deepcopy(target)
    for sub in ast.walk(node):
        if hasattr(sub, "ctx"):
            sub.ctx = ast.Load()
    return node


def _raise(exc: Exception) -> Any:
    raise exc


def literal_bases(tree: ast.Module, where: Path) -> tuple[list[str], list[ast.stmt]]:
    """The ``_base_`` list (a string or a list of strings) and the module body without that assignment."""
    bases: list[str] = []
    body: list[ast.stmt] = []
    for stmt in tree.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id == "_base_"):
            try:
                value = ast.literal_eval(stmt.value)
            except ValueError as exc:
                raise ConfigError(f"{where}:{stmt.lineno}: _base_ must be a string or a list of strings (file "
                                  "paths), written literally.") from exc
            value = [value] if isinstance(value, str) else value
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}:{stmt.lineno}: _base_ must be a string or a list of strings, got "
                                  f"{value!r}.")
            bases.extend(value)
        else:
            body.append(stmt)
    return bases, body
