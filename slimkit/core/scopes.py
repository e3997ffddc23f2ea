"""MMEngine package scopes in configs: ``_scope_='mmcls'``, ``type='mmrazor.SPOS'``, and specs slimkit cannot build.

slimkit has one registry: MMRazor's types resolve there whatever their scope prefix, and a type of another
MMEngine-based package (a model, a dataset) is refused with a message that says what to pass instead.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

#: MMEngine-based package scopes a config may name (``_scope_='mmcls'``, ``type='mmrazor.SPOS'``)
MM_SCOPES: dict[str, str] = {
    "mmrazor": "MMRazor", "mmengine": "MMEngine", "mmcv": "MMCV", "mmcls": "MMClassification",
    "mmpretrain": "MMPretrain", "mmdet": "MMDetection", "mmdet3d": "MMDetection3D", "mmseg": "MMSegmentation",
    "mmpose": "MMPose", "mmyolo": "MMYOLO", "mmocr": "MMOCR", "mmaction": "MMAction2", "mmagic": "MMagic"}


def split_scope(name: Any, scope: Any = None) -> tuple[Any, str | None]:
    """(type name, scope) of ``'mmrazor.SPOS'`` -> ``('SPOS', 'mmrazor')``; other names keep ``scope``."""
    if isinstance(name, str) and "." in name and name.split(".", 1)[0] in MM_SCOPES:
        prefix, rest = name.split(".", 1)
        return rest, prefix
    return name, scope if isinstance(scope, str) else None


def external_reason(spec: Any, what: str, registered: Container[str]) -> str | None:
    """Why ``spec`` cannot be built here (a model of another package, a value of a skipped base), else None."""
    fix = f"Pass your own nn.Module: slimkit.razor.build(cfg, {what}=your_model)."
    if getattr(spec, "slimkit_placeholder", False):
        return (f"{what} is {spec!r}: it comes from a base config of another MMEngine-based package, which slimkit "
                f"does not read. {fix}")
    if isinstance(spec, Mapping) and "cfg_path" in spec and "type" not in spec:
        return (f"{what}=dict(cfg_path={spec['cfg_path']!r}) names a model config of another MMEngine-based package, "
                f"which slimkit does not read. {fix}")
    if isinstance(spec, Mapping) and "type" in spec and not callable(spec["type"]):
        name, scope = split_scope(spec["type"], spec.get("_scope_"))
        if scope not in (None, "mmrazor") and name not in registered:
            return (f"{what}=dict(type={spec['type']!r}, ...) is a model of {MM_SCOPES.get(scope, scope)} "
                    f"({scope}), which slimkit does not build. {fix}")
    return None
