"""The zoo's registry: entry names, keyword validation, and the ``load``/``build`` front doors.

Each entry is one module in this package that defines ``TASK``, ``ARCH_DEFAULTS`` (keywords that shape the
architecture, recorded on the model so ``build`` can rebuild it), ``INPUT_DEFAULTS`` (keywords that only
shape the example inputs), ``build(**arch)`` and ``load(**arch_and_input_kwargs) -> ZooModel``.
Entry modules are imported lazily, so ``import slimkit.zoo`` stays cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from slimkit.errors import ConfigError, closest

if TYPE_CHECKING:  # annotations only: `slimkit zoo` lists the names without importing torch
    import torch

# name -> module (file) inside slimkit.zoo
_ENTRIES: dict[str, str] = {
    "minilm": "minilm",
    "smollm2-135m": "smollm2",
    "mobilenet_v2": "mobilenet_v2",
    "digits_cnn": "digits_cnn",
    "mlp": "mlp",
    "resnet_tiny": "resnet_tiny",
    "tiny_llama": "tiny_llama",
    "tiny_gpt2": "tiny_gpt2",
    "tiny_bert": "tiny_bert",
    "tiny_vit": "tiny_vit",
}


@dataclass
class ZooModel:
    """A zoo model with example inputs that it accepts (see ``slimkit.utils.run_model``).

    Unpacks as ``model, inputs = load("mlp")``.
    """

    model: torch.nn.Module
    example_inputs: Any
    name: str
    tokenizer: Any | None = None
    task: str = ""
    meta: dict = field(default_factory=dict)
    #: the offline ``slimkit.data`` id this model trains / calibrates on (``None`` when it has none)
    data: str | None = None

    def __iter__(self) -> Iterator[Any]:
        """Yield the model, then its example inputs."""
        yield self.model
        yield self.example_inputs


def names() -> list[str]:
    """Names accepted by ``load`` and ``build``, sorted."""
    return sorted(_ENTRIES)


def _entry(name: Any) -> ModuleType:
    if not isinstance(name, str) or name not in _ENTRIES:
        hint = closest(name, _ENTRIES) if isinstance(name, str) else ""
        raise ConfigError(
            f"Unknown zoo model {name!r}. Valid names: {', '.join(names())}.{hint} "
            "Pass one of these to slimkit.zoo.load()/build()."
        )
    return importlib.import_module(f"{__package__}.{_ENTRIES[name]}")


_WANTED = {bool: "a bool", int: "a positive int", float: "a non-negative number"}


def _check_value(name: str, key: str, value: Any, default: Any) -> None:
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= (0 if key == "seed" else 1)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
    else:
        ok = isinstance(value, type(default))
    if not ok:
        want = "an int >= 0" if key == "seed" else _WANTED.get(type(default), type(default).__name__)
        raise ConfigError(f"zoo model {name!r}: {key}={value!r} is invalid; it must be {want} (default {default!r}).")


def _split_kwargs(name: str, module: ModuleType, kwargs: dict[str, Any]) -> tuple[dict, dict]:
    """Validate ``kwargs`` and return (architecture kwargs, input kwargs), both with defaults filled."""
    arch_defaults: dict[str, Any] = module.ARCH_DEFAULTS
    input_defaults: dict[str, Any] = module.INPUT_DEFAULTS
    allowed = {**arch_defaults, **input_defaults}
    unknown = sorted(k for k in kwargs if k not in allowed)
    if unknown:
        listing = ", ".join(f"{k}={v!r}" for k, v in allowed.items()) or "none"
        hint = closest(unknown[0], allowed)
        raise ConfigError(
            f"zoo model {name!r} got unknown keyword argument(s) {', '.join(map(repr, unknown))}. "
            f"Allowed (with defaults): {listing}.{hint}"
        )
    for key, value in kwargs.items():
        _check_value(name, key, value, allowed[key])
    arch = {k: kwargs.get(k, v) for k, v in arch_defaults.items()}
    inputs = {k: kwargs.get(k, v) for k, v in input_defaults.items()}
    return arch, inputs


def _tag(model: torch.nn.Module, name: str, arch: dict[str, Any]) -> torch.nn.Module:
    model.slimkit_zoo_name = name
    model.slimkit_zoo_kwargs = dict(arch)
    return model.eval()


def load(name: str, **kwargs: Any) -> ZooModel:
    """Load zoo model ``name`` (real weights where the entry has them) in eval mode, with example inputs.

    ``kwargs`` are the entry's architecture and example-input keywords; unknown ones raise ConfigError.
    The model carries ``slimkit_zoo_name`` and ``slimkit_zoo_kwargs`` so ``build`` can rebuild it.
    """
    module = _entry(name)
    arch, inputs = _split_kwargs(name, module, kwargs)
    zoo_model: ZooModel = module.load(**arch, **inputs)
    zoo_model.name = name
    zoo_model.task = zoo_model.task or module.TASK
    zoo_model.data = zoo_model.data or getattr(module, "DATA", None)
    _tag(zoo_model.model, name, arch)
    return zoo_model


def build(name: str, **kwargs: Any) -> torch.nn.Module:
    """Build zoo model ``name``'s architecture without loading or training weights (fast, offline).

    Real-weight entries come back randomly initialised; tiny builders come back identical to ``load``
    (they are seeded). Example-input keywords are accepted and ignored, so ``build(n, **load_kwargs)`` works.
    """
    module = _entry(name)
    arch, _ = _split_kwargs(name, module, kwargs)
    return _tag(module.build(**arch), name, arch)
