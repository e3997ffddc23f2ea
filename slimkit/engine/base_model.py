"""Describe the model a smash started from, and rebuild that architecture on load without pickle."""

from __future__ import annotations

from typing import Any

import torch

from slimkit.errors import SaveLoadError


def _float_dtype(model: torch.nn.Module) -> str | None:
    for p in model.parameters():
        if p.is_floating_point():
            return str(p.dtype).split(".")[-1]
    return None


def describe_base(model: torch.nn.Module) -> dict[str, Any]:
    """JSON-able recipe for rebuilding ``model``'s architecture: a zoo entry, a Hugging Face config, or user code."""
    cls_path = f"{type(model).__module__}.{type(model).__qualname__}"
    spec: dict[str, Any] = {"dtype": _float_dtype(model), "class": cls_path}
    zoo_name = getattr(model, "slimkit_zoo_name", None)
    if zoo_name:
        return {**spec, "kind": "zoo", "name": zoo_name, "kwargs": dict(getattr(model, "slimkit_zoo_kwargs", {}) or {})}
    try:
        import transformers
    except ImportError:  # pragma: no cover - transformers is a dependency
        transformers = None
    if transformers is not None and isinstance(model, transformers.PreTrainedModel):
        return {**spec, "kind": "hf", "hf_class": type(model).__name__, "config": model.config.to_dict()}
    return {**spec, "kind": "user"}


def rebuild_base(spec: dict[str, Any], model: Any = None) -> torch.nn.Module:
    """Build a fresh base model from ``spec``; ``model`` (an instance or a factory) overrides the recipe."""
    if model is not None:
        built = model if isinstance(model, torch.nn.Module) else model()
        if not isinstance(built, torch.nn.Module):
            raise SaveLoadError(f"model= must be an nn.Module or a callable returning one, got {type(built).__name__}.")
        return built
    kind = spec.get("kind")
    if kind == "zoo":
        from slimkit import zoo

        built = zoo.build(spec["name"], **spec.get("kwargs", {}))
    elif kind == "hf":
        import transformers

        cls = getattr(transformers, spec["hf_class"], None)
        if cls is None:
            raise SaveLoadError(
                f"transformers has no class {spec['hf_class']!r} (saved with another version?). "
                "Pass model=<an instance of the original architecture> to from_pretrained."
            )
        built = cls(cls.config_class.from_dict(spec["config"]))
    else:
        raise SaveLoadError(
            f"This model was built by your own code ({spec.get('class')}), so slimkit cannot rebuild it alone. "
            "Pass model=<a fresh instance> or model=<a function returning one> to from_pretrained."
        )
    if spec.get("dtype"):
        built = built.to(getattr(torch, spec["dtype"]))
    return built.eval()
