"""``@slimkit.aup_args``: a script's main function takes the job config's fields as arguments (Auptimizer's shape).

Instead of reading the job config itself, a compression script may write::

    @slimkit.aup_args
    def main(compression_type, compression_framework, compressor, config_list, folder_name=None, save_model=False):
        config = locals()                       # enough for create_compressor(model, config)
        ...

    if __name__ == "__main__":
        main(sys.argv[1])                       # the path of the job config slimkit run passes

Each parameter is filled from the job config key of the same name (the runner's keys and ``runtime_args``);
``**kwargs`` receives every key. ``aup_save_model(compressor.export_model, model_path=...)`` registers the
export: it runs into the job's ``folder_name`` only when the experiment sets ``resource_args.save_model``.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from slimkit.errors import ConfigError
from slimkit.experiment.basic_config import BasicConfig

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
        return func(**values)

    return wrapper  # type: ignore[return-value]


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
