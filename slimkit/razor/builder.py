"""The razor builder: ``register_module()`` and ``build(dict(type="Name", ...))`` over the one registry.

Components live in :mod:`slimkit.core.registry`'s component table next to the smash algorithms (a component
name never equals an algorithm name or alias). ``build`` is recursive: nested dicts with a ``type`` are built
first, so ``dict(type="SingleTeacherDistill", architecture=dict(type="ZooModel", name="digits_cnn"), ...)``
builds the architecture, the teacher and the losses, then the algorithm.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from torch import nn

from slimkit.core import registry
from slimkit.errors import ConfigError
from slimkit.zoo import build as zoo_build
from slimkit.zoo import load as zoo_load

T = TypeVar("T", bound=Callable[..., Any])


def register_module(name: str | None = None, kind: str = "model") -> Callable[[T], T]:
    """Class (or factory) decorator: make it buildable as ``dict(type=name or its class name, ...)``.

    ``kind`` groups components in listings (``"model"``, ``"loss"``, ``"recorder"``, ``"connector"``...).
    A name already used by another component or by a smash algorithm raises RegistryError.
    """
    if callable(name):
        raise ConfigError("register_module takes arguments: write @register_module() with the parentheses.")

    def decorate(obj: T) -> T:
        registry.register_component(obj, kind, name)
        return obj

    return decorate


def build(cfg: Mapping[str, Any]) -> Any:
    """Build a component from ``dict(type="Name", **fields)`` (nested configs first).

    Unknown types list the closest registered names; a field the component does not take names the component,
    the field and the fields it takes.
    """
    if not isinstance(cfg, Mapping) or "type" not in cfg:
        raise ConfigError(f"build() needs a dict with a 'type' key, e.g. dict(type='KLDivergence', tau=4); got "
                          f"{cfg!r}. Registered types: {', '.join(registry.component_names())}.")
    return registry.build_component(cfg)


def build_module(spec: Any, what: str) -> nn.Module:
    """``spec`` as an ``nn.Module``: a module is returned as is, a config dict is built."""
    return registry.build_module(spec, what)


def zoo_model(name: str, pretrained: bool = True, **kwargs: Any) -> nn.Module:
    """A slimkit zoo model as an architecture: ``dict(type="ZooModel", name="digits_cnn")``.

    ``pretrained=False`` builds the architecture without loading or training weights; ``kwargs`` are the zoo
    entry's architecture keywords (e.g. ``num_hidden_layers=4``).
    """
    return zoo_load(name, **kwargs).model if pretrained else zoo_build(name, **kwargs)


registry.register_component(zoo_model, "architecture", "ZooModel")
