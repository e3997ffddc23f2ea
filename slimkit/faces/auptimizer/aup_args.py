"""``@slimkit.aup_args``: a script's main function takes the job config's fields as arguments (Auptimizer's shape).

Instead of reading the job config itself, a compression script may write::

    @slimkit.aup_args
    def main(compression_type, compression_framework, compressor, config_list, folder_name=None, save_model=False):
        config = locals()                       # enough for create_compressor(model, config)
        ...

    if __name__ == "__main__":
        main(sys.argv[1])                       # the path of the job config slimkit run passes

Each parameter is filled from the job config key of the same name (the runner's keys and ``runtime_args``);
``**kwargs`` receives every key. When the function returns a number (or a list of numbers, one per objective),
it is reported with :func:`~slimkit.faces.auptimizer.result.print_result`, as Auptimizer does.
``aup_save_model(compressor.export_model, model_path=...)`` registers the export: it runs into the job's
``folder_name`` only when the experiment sets ``resource_args.save_model``.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch

from slimkit.errors import ConfigError
from slimkit.faces.auptimizer.basic_config import BasicConfig
from slimkit.faces.auptimizer.result import print_result

F = TypeVar("F", bound=Callable[..., Any])
_CURRENT: dict[str, BasicConfig] = {}


def _config(source: Any) -> BasicConfig:
    if isinstance(source, Mapping):
        return BasicConfig(source)
    if isinstance(source, (str, os.PathLike)):
        return BasicConfig().load(source)
    raise ConfigError(f"An @aup_args function is called with the job config's path (main(sys.argv[1])) or a dict; "
                      f"got {type(source).__name__}.")


def aup_args(func: F) -> F:
    """Call ``func(config_path_or_dict)`` as ``func(**fields)``: each parameter gets the job config's value."""
    signature = inspect.signature(func)
    takes_all = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())

    @functools.wraps(func)
    def wrapper(config: Any, **overrides: Any) -> Any:
        fields = _config(config)
        _CURRENT["config"] = fields
        if takes_all:
            values = {**fields, **overrides}
        else:
            values = {name: fields[name] for name in signature.parameters if name in fields}
            values.update(overrides)
        missing = [name for name, p in signature.parameters.items()
                   if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                   and name not in values]
        if missing:
            raise ConfigError(f"{func.__name__}() needs {', '.join(missing)} but the job config has no such key; "
                              f"its keys: {', '.join(sorted(fields))}. Add it to the experiment's runtime_args, "
                              "give the parameter a default, or rename it to a job config key.")
        result = func(**values)
        if _is_metric(result):  # Auptimizer reports the function's value itself
            print_result(result)
        return result

    return wrapper  # type: ignore[return-value]


def _is_metric(value: Any) -> bool:
    """A number (or numpy/tensor scalar), or a non-empty list/tuple of them: what print_result reports."""
    def number(v: Any) -> bool:
        if isinstance(v, torch.Tensor):
            return v.numel() == 1 and v.is_floating_point()
        return isinstance(v, numbers.Real) and not isinstance(v, bool)  # numpy scalars are numbers.Real too

    if isinstance(value, (list, tuple)):
        return bool(value) and all(number(v) for v in value)
    return number(value)


def aup_save_model(save: Callable[..., Any], **kwargs: Any) -> Any:
    """Run ``save(folder_name=<the job's folder>, **kwargs)`` when the experiment saves models, else nothing.

    Call it inside an ``@aup_args`` function, e.g. ``aup_save_model(compressor.export_model,
    model_path="model.safetensors")``; with ``save_model`` the runner then keeps only the best (or Pareto) models.
    """
    config = _CURRENT.get("config")
    if config is None:
        raise ConfigError("aup_save_model is for a function decorated with @slimkit.aup_args (it reads that job's "
                          "save_model and folder_name); call the save function directly elsewhere.")
    if not config.get("save_model"):
        return None
    return save(**{"folder_name": config.get("folder_name", "."), **kwargs})
