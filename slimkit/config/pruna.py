"""Pruna's SmashConfig calls that slimkit's config answers too: ``add(...)``, ``cfg["device"]``, alias defaults.

``cfg.add("hqq")``, ``cfg.add(["torch_compile", "hqq"])``, ``cfg.add({"hqq": {"weight_bits": 4}})``,
``cfg.add({"torch_compile_mode": "max-autotune"})`` (prefixed hyperparameters) and
``cfg.add("torch_compile", {"mode": "max-autotune"})`` all work as in Pruna; ``cfg["device"]`` reads and sets
the device. An alias that carries settings of its own (``text_to_text_lora`` = ``finetune`` with LoRA) applies
them when it activates the algorithm, unless the config already sets them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slimkit.core import registry
from slimkit.errors import ConfigError

__all__ = ["PrunaConfigFace"]


class PrunaConfigFace:
    """Mixin of :class:`~slimkit.config.SmashConfig` with Pruna's ``add`` and the alias defaults.

    It uses the config's own ``activate`` and item assignment.
    """

    _hyperparameters: dict[str, Any]

    def _alias_defaults(self, name: str) -> None:
        """Set the hyperparameters the alias ``name`` implies (those the config does not set already)."""
        cls = registry.get(name)
        for hp_name, value in cls.alias_defaults.get(name, {}).items():
            key = f"{cls.algorithm_name}_{hp_name}"
            if key not in self._hyperparameters:
                self[key] = value

    def add(self, request: str | list[str] | tuple[str, ...] | Mapping[str, Any],
            hyperparameters: Mapping[str, Any] | None = None) -> None:
        """Pruna's ``add``: activate algorithms and/or set hyperparameters (see the module docstring)."""
        if isinstance(request, str):
            self.activate(request)  # type: ignore[attr-defined]
            for key, value in (hyperparameters or {}).items():
                self[f"{request}_{key}"] = value  # type: ignore[index]
            return
        if hyperparameters is not None:
            raise ConfigError("add(name, hyperparameters): give one algorithm name with its hyperparameters, e.g. "
                              "add('hqq', {'weight_bits': 4}); for several use add({'hqq': {...}, ...}).")
        if isinstance(request, (list, tuple)):
            for name in request:
                if not isinstance(name, str):
                    raise ConfigError(f"add([...]) takes algorithm names; got {name!r}.")
                self.activate(name)  # type: ignore[attr-defined]
            return
        if not isinstance(request, Mapping):
            raise ConfigError("add() takes an algorithm name, a list of names or a dict; got "
                              f"{type(request).__name__}.")
        for key, value in request.items():
            if isinstance(value, Mapping):  # {"hqq": {"weight_bits": 4}}
                self.add(key, value)
            else:  # {"torch_compile_mode": "max-autotune"}: a prefixed hyperparameter
                self[key] = value  # type: ignore[index]
