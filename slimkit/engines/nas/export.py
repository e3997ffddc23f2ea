"""Export a subnet as a plain ``nn.Module``, save it without pickle, load it back; subnet files in JSON / YAML.

A saved subnet is a folder::

    subnet.json / subnet.yaml   the description {name: {"chosen": choice}}
    architecture.json           how to rebuild the supernet: its config dict(type=...) (when known) and the
                                exported model's module tree (class and shape per layer) for reading
    model.safetensors           the exported model's weights

:func:`load_subnet` rebuilds the supernet (from its config through the razor registry, or from the
``supernet`` you pass), fixes the subnet, exports it and loads the weights strictly: no pickle, no code run
from the folder.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from safetensors.torch import load_file
from torch import nn

from slimkit.core.io import atomic_directory, atomic_file, save_tensors_atomic, write_json_atomic
from slimkit.core.registry import build_module
from slimkit.engines.nas.dynamic_ops import DYNAMIC_OPS
from slimkit.engines.nas.mutables import BaseMutable
from slimkit.engines.nas.mutator import NasMutator, plain_choices, unwrap
from slimkit.errors import ConfigError, MissingPackageError, SaveLoadError

SUBNET_JSON, SUBNET_YAML = "subnet.json", "subnet.yaml"
ARCH_FILE, WEIGHTS_FILE = "architecture.json", "model.safetensors"
FORMAT = "slimkit.razor.subnet/1"


def _replace_mutables(module: nn.Module) -> nn.Module | None:
    if isinstance(module, BaseMutable):
        exported = module.export()
        return None if exported is None else _replace_mutables(exported)
    if isinstance(module, DYNAMIC_OPS):
        return module.export()  # a plain layer of the active width (before its width mutables go)
    for name, child in list(module._modules.items()):
        if child is None:
            continue
        new = _replace_mutables(child)
        if new is None:
            del module._modules[name]
        elif new is not child:
            module._modules[name] = new
    return module


def export_subnet(supernet: nn.Module, subnet: Mapping[str, Any] | None = None) -> nn.Module:
    """A standalone copy of ``supernet`` on ``subnet`` (default: the active choices) with no mutable left.

    Chosen candidates replace each :class:`OneShotMutableOP`, an ``nn.Sequential`` of the active blocks each
    :class:`MutableSequential`, and dynamic layers become plain ``nn.Conv2d`` / ``nn.Linear`` /
    ``nn.BatchNorm2d`` with copies of their active weight slices: the result computes exactly what the
    supernet computes on that subnet. The supernet itself is not changed (except that ``subnet`` is set).
    """
    supernet = unwrap(supernet)
    mutator = NasMutator(supernet)
    if subnet is not None:
        mutator.set_choices(subnet)
    exported = _replace_mutables(copy.deepcopy(supernet))
    left = [n for n, m in exported.named_modules() if isinstance(m, (BaseMutable, *DYNAMIC_OPS))]
    if left:
        raise ConfigError(f"Export left mutables at {', '.join(left)}; they sit where export cannot replace them.")
    return exported


def _yaml() -> Any:
    try:
        import yaml
    except ImportError as exc:
        raise MissingPackageError("YAML subnet files need PyYAML: pip install pyyaml (or write .json).") from exc
    return yaml


def write_subnet(subnet: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write ``subnet`` as ``{name: {"chosen": choice}}`` to a .json or .yaml file (atomically)."""
    path = Path(path)
    description = {n: {"chosen": c} for n, c in plain_choices(subnet).items()}
    if path.suffix == ".json":
        return write_json_atomic(path, description)
    if path.suffix not in (".yaml", ".yml"):
        raise ConfigError(f"A subnet file must end in .json, .yaml or .yml, got {path.name!r}.")
    text = _yaml().safe_dump(description, sort_keys=True)
    with atomic_file(path) as tmp:
        tmp.write_text(text)
    return path


def read_subnet(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Read a subnet description from a .json or .yaml file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"Subnet file {path} does not exist.")
    try:
        data = json.loads(path.read_text()) if path.suffix == ".json" else _yaml().safe_load(path.read_text())
    except Exception as exc:
        raise ConfigError(f"{path} is not a readable subnet file ({exc}).") from exc
    return {n: {"chosen": c} for n, c in plain_choices(data).items()}


def _structure(model: nn.Module) -> dict[str, str]:
    return {name or "<root>": (f"{type(m).__name__}({m.extra_repr()})" if m.extra_repr() else type(m).__name__)
            for name, m in model.named_modules()}


def save_subnet(supernet: nn.Module, folder: str | os.PathLike, subnet: Mapping[str, Any] | None = None,
                architecture: Mapping[str, Any] | None = None) -> nn.Module:
    """Export ``subnet`` of ``supernet`` and save it to ``folder`` (atomically); return the exported model in eval mode.

    ``architecture``: the supernet's config ``dict(type=...)`` so :func:`load_subnet` can rebuild it alone;
    default: the supernet's ``razor_config`` attribute (slimkit's :class:`SearchableCNN` sets it), else
    loading needs ``supernet=``.
    """
    arch = unwrap(supernet)
    exported = export_subnet(arch, subnet)
    description = NasMutator(arch).fix_subnet()
    config = dict(architecture) if architecture is not None else getattr(arch, "razor_config", None)
    try:
        json.dumps(config)
    except TypeError as exc:
        raise ConfigError(f"architecture must be a JSON-able config dict(type=...), got {config!r}.") from exc
    with atomic_directory(folder, replace=True) as tmp:
        write_subnet(description, tmp / SUBNET_JSON)
        write_subnet(description, tmp / SUBNET_YAML)
        write_json_atomic(tmp / ARCH_FILE, {"format": FORMAT, "architecture": config,
                                            "class": f"{type(exported).__module__}.{type(exported).__qualname__}",
                                            "modules": _structure(exported)})
        save_tensors_atomic(exported.state_dict(), tmp / WEIGHTS_FILE, fmt="pt")
    return exported.eval()


def load_subnet(folder: str | os.PathLike,
                supernet: nn.Module | Mapping[str, Any] | Callable[[], nn.Module] | None = None) -> nn.Module:
    """The exported model saved in ``folder`` by :func:`save_subnet`, weights loaded strictly.

    ``supernet``: a supernet module, config dict or factory to rebuild from; default: the config saved with
    it (a registered ``type``; nothing is imported from the folder).
    """
    folder = Path(folder)
    for name in (SUBNET_JSON, ARCH_FILE, WEIGHTS_FILE):
        if not (folder / name).is_file():
            raise SaveLoadError(f"{folder / name} is missing: {folder} is not a complete saved subnet.")
    try:
        meta = json.loads((folder / ARCH_FILE).read_text())
    except json.JSONDecodeError as exc:
        raise SaveLoadError(f"{folder / ARCH_FILE} is not valid JSON ({exc}).") from exc
    if meta.get("format") != FORMAT:
        raise SaveLoadError(f"{folder / ARCH_FILE} has format {meta.get('format')!r}; this slimkit reads {FORMAT}.")
    source = supernet if supernet is not None else meta.get("architecture")
    if source is None:
        raise SaveLoadError(f"{folder} was saved without the supernet's config; pass supernet= (the supernet "
                            "module, its config dict or a factory) to load it.")
    if callable(source) and not isinstance(source, nn.Module):
        source = source()
    model = export_subnet(build_module(source, "supernet"), read_subnet(folder / SUBNET_JSON))
    try:
        model.load_state_dict(load_file(str(folder / WEIGHTS_FILE)), strict=True)
    except RuntimeError as exc:
        raise SaveLoadError(f"The weights in {folder} do not fit the rebuilt subnet ({exc}); pass the supernet "
                            "it was exported from.") from exc
    return model.eval()
