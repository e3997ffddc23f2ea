"""The razor builder: ``register_module()`` and ``build(dict(type="Name", ...))`` over the one registry.

Components live in :mod:`slimkit.core.registry`'s component table next to the smash algorithms (a component
name never equals an algorithm name or alias). ``build`` builds the outer type, as MMEngine does: nested
configs reach the component as dicts and each component builds the ones it takes, so
``dict(type="SingleTeacherDistill", architecture=dict(type="ZooModel", name="digits_cnn"), ...)`` builds the
algorithm, which builds its architecture, teacher and losses, while a ``norm_cfg=dict(type='BN')`` stays the
dict its connector reads.

Keyword arguments to ``build`` replace fields of the config first: ``build(cfg.model, architecture=student,
teacher=teacher)`` puts your own modules where an MMRazor config names models of other MMEngine-based packages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from torch import nn

from slimkit.core import registry
from slimkit.errors import ConfigError
from slimkit.zoo import build as zoo_build
from slimkit.zoo import load as zoo_load

T = TypeVar("T", bound=Callable[..., Any])
log = logging.getLogger(__name__)


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


def _is_remote_or_pickle(path: Any) -> bool:
    text = str(path)
    return "://" in text or text.endswith((".pth", ".pt", ".bin", ".ckpt", ".pkl"))


def with_overrides(cfg: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` with ``overrides`` put in (a copy; the config itself is not changed).

    ``teacher=`` fills a data-free config's single entry of ``teachers``. When you pass ``teacher=`` and the
    config's ``teacher_ckpt`` is a URL or a pickle checkpoint (``.pth``), that checkpoint is dropped with a
    logged note: slimkit downloads nothing and reads no pickle, and your teacher comes with its weights (pass
    ``teacher_ckpt=`` a ``.safetensors`` file or a saved folder to load others).
    """
    out = dict(cfg)
    overrides = dict(overrides)
    if "teacher" in overrides and "teachers" in out and "teacher" not in out:
        names = list(out["teachers"]) if isinstance(out["teachers"], Mapping) else []
        if len(names) != 1:
            raise ConfigError(f"This config has teachers {names}; pass teachers=dict(name=module, ...) for each "
                              "instead of teacher=.")
        out["teachers"] = {names[0]: overrides.pop("teacher")}
    if "teacher" in overrides and "teacher_ckpt" not in overrides and _is_remote_or_pickle(out.get("teacher_ckpt")):
        log.info("teacher_ckpt=%r is not read (slimkit downloads nothing and reads no pickle): the teacher you "
                 "passed is used with its own weights.", out.pop("teacher_ckpt"))
    out.update(overrides)
    return out


def build(cfg: Mapping[str, Any], **overrides: Any) -> Any:
    """Build a component from ``dict(type="Name", **fields)``; ``overrides`` replace fields first.

    ``build(cfg.model, architecture=student, teacher=teacher)`` builds an MMRazor config's algorithm around your
    modules (see :func:`with_overrides`). Unknown types list the closest registered names; a field the component
    does not take names the component, the field and the fields it takes.
    """
    if not isinstance(cfg, Mapping) or "type" not in cfg:
        raise ConfigError(f"build() needs a dict with a 'type' key, e.g. dict(type='KLDivergence', tau=4); got "
                          f"{cfg!r}. Registered types: {', '.join(registry.component_names())}.")
    return registry.build_component(with_overrides(cfg, overrides) if overrides else cfg)


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
