"""The calls a config may make, for :mod:`slimkit.faces.mmrazor.pyeval`: allowed functions, methods and modules."""

from __future__ import annotations

import ast
import copy
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slimkit.errors import ConfigError

#: modules a config file may import (``import math``, ``from copy import deepcopy``); nothing else
ALLOWED_IMPORTS: dict[str, Any] = {"math": math, "copy": copy}
MAX_SIZE = 1_000_000  # longest sequence an expression may build (guards '"a" * 10**12')


def check_name(ev: Any, name: str, node: ast.AST) -> None:
    """ConfigError for dunder attribute names (``__class__``, ``__globals__``...)."""
    if name.startswith("__"):
        raise ev.error(node, f"attribute {name!r} is not allowed in a config.")


class CallsMixin:
    """Calls, comprehensions and module attributes of :class:`~slimkit.faces.mmrazor.pyeval.ConfigEvaluator`."""

    names: dict[str, Any]
    functions: dict[str, Callable[..., Any]]
    where: Path
    attr_get: Callable[[Any, Any], Any]
    make_dict: Callable[..., dict]

    def error(self, node: ast.AST | None, text: str) -> ConfigError:  # implemented by the evaluator
        """A ConfigError naming the file and line of ``node``."""
        raise NotImplementedError

    def expr(self, node: ast.expr) -> Any:  # implemented by the evaluator
        """The value of one expression."""
        raise NotImplementedError

    def assign(self, target: ast.expr, value: Any) -> None:  # implemented by the evaluator
        """Bind ``value`` to ``target``."""
        raise NotImplementedError

    def _items(self, nodes: list[ast.expr]) -> list[Any]:  # implemented by the evaluator
        raise NotImplementedError

    def _call(self, node: ast.Call) -> Any:
        args = self._items(node.args)
        kwargs: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg is None:
                kwargs.update(self.expr(kw.value))
            else:
                kwargs[kw.arg] = self.expr(kw.value)
        func = node.func
        if isinstance(func, ast.Name) and func.id in self.functions and func.id not in self.names:
            return self.functions[func.id](*args, **kwargs)
        if isinstance(func, ast.Name) and callable(self.names.get(func.id)) and _allowed_function(self.names[func.id]):
            return self.names[func.id](*args, **kwargs)
        if isinstance(func, ast.Attribute):
            check_name(self, func.attr, func)
            owner = self.expr(func.value)
            if isinstance(owner, type(math)):
                return self._module_attr(owner, func.attr, func)(*args, **kwargs)
            method = _method(owner, func.attr)
            if method is not None:
                return method(*args, **kwargs)
            value = self.attr_get(owner, func.attr)
            if getattr(value, "slimkit_placeholder", False):
                return value  # a call on a value of a skipped base stays a placeholder
        raise self.error(node, f"calling {ast.unparse(func)!r} is not allowed in a config; configs may call "
                               f"{', '.join(sorted(self.functions))}, math/copy functions and the methods "
                               f"{', '.join(sorted(METHODS))} of dicts, lists and strings.")

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> Any:
        saved = dict(self.names)
        results: list[Any] = []

        def loop(generators: list[ast.comprehension]) -> None:
            if not generators:
                results.append((self.expr(node.key), self.expr(node.value)) if isinstance(node, ast.DictComp)
                               else self.expr(node.elt))
                return
            first = generators[0]
            for item in self.expr(first.iter):
                self.assign(first.target, item)
                if all(self.expr(cond) for cond in first.ifs):
                    loop(generators[1:])
                if len(results) > MAX_SIZE:
                    raise self.error(node, "a comprehension this long is not a config value.")

        try:
            loop(node.generators)
        finally:
            self.names.clear()
            self.names.update(saved)
        if isinstance(node, ast.DictComp):
            return self.make_dict(results)
        return set(results) if isinstance(node, ast.SetComp) else list(results)

    def _module_attr(self, module: Any, name: str, node: ast.AST) -> Any:
        if name.startswith("_") or not hasattr(module, name):
            raise self.error(node, f"{module.__name__}.{name} is not available in a config.")
        value = getattr(module, name)
        if module is copy and name not in ("copy", "deepcopy"):
            raise self.error(node, f"copy.{name} is not available in a config (copy, deepcopy are).")
        return value

    def _hasattr(self, obj: Any, name: str) -> bool:
        try:
            self.attr_get(obj, name)
        except (ConfigError, AttributeError, KeyError):
            return False
        return True

    def _getattr(self, obj: Any, name: str, *default: Any) -> Any:
        try:
            value = self.attr_get(obj, name)
        except (ConfigError, AttributeError, KeyError):
            if default:
                return default[0]
            raise
        # what a skipped base holds is unknown: getattr(_base_, 'custom_hooks', []) takes the config's default
        return default[0] if default and getattr(value, "slimkit_placeholder", False) else value



#: method names a config may call, by the type of the object they are called on
METHODS: dict[str, tuple[type, ...]] = {
    "get": (dict,), "update": (dict,), "copy": (dict, list), "keys": (dict,), "values": (dict,), "items": (dict,),
    "pop": (dict, list), "setdefault": (dict,), "append": (list,), "extend": (list,), "insert": (list,),
    "index": (list, tuple, str), "count": (list, tuple, str), "format": (str,), "join": (str,), "replace": (str,),
    "split": (str,), "strip": (str,), "lower": (str,), "upper": (str,), "startswith": (str,), "endswith": (str,)}


def _method(owner: Any, name: str) -> Callable[..., Any] | None:
    kinds = METHODS.get(name)
    if kinds is None or not isinstance(owner, kinds):
        return None
    return getattr(owner, name)


def _allowed_function(func: Any) -> bool:
    return func in (copy.copy, copy.deepcopy) or getattr(func, "__module__", None) == "math" or (
        getattr(func, "__self__", None) is math)


