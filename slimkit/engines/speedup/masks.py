"""Reading pruning masks, as a dict or a mask file.

Entries are ``{layer: {"weight_mask": T, "bias_mask": T | None}}`` (NNI 2.x writes ``"weight"``/``"bias"``) or
``{layer: {"out_channels": i}}``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from slimkit.engines._masks_io import read_mask_file
from slimkit.errors import ConfigError, closest

from .experts import experts_spec
from .layers import out_dim

MaskDict = Mapping[str, Mapping[str, Any]]
WEIGHT_KEYS = ("weight_mask", "weight")  # "weight"/"bias" are NNI's exported mask-file keys
BIAS_KEYS = ("bias_mask", "bias")


@dataclass
class LayerMask:
    """One layer's mask: which output rows survive, and the element masks to apply before slicing.

    For an embedding the "rows" are its columns (the channels it produces); for a MoE experts module they
    are the hidden rows of ``down_proj`` and ``inner_keep`` (``[experts, intermediate]``) its intermediate
    channels.
    """

    rows_keep: np.ndarray
    weight_mask: torch.Tensor | None = None
    bias_mask: torch.Tensor | None = None
    inner_keep: np.ndarray | None = None


def _experts_mask(name: str, module: nn.Module, entry: Mapping[str, Any]) -> LayerMask:
    """``{"out_channels": hidden rows kept, "inner_channels": [kept intermediate channels of each expert]}``."""
    spec = experts_spec(module)
    rows = np.ones(spec.hidden, dtype=bool)
    if entry.get("out_channels") is not None:
        rows = _kept(name, "out_channels", entry["out_channels"], spec.hidden)
    inner = None
    if entry.get("inner_channels") is not None:
        given = entry["inner_channels"]
        if len(given) != spec.num_experts:
            raise ConfigError(f"inner_channels for {name!r} must list the kept channels of each of its "
                              f"{spec.num_experts} experts; got {len(given)} lists.")
        inner = np.stack([_kept(name, "inner_channels", idx, spec.intermediate) for idx in list(given)])
    if entry.get("out_channels") is None and inner is None:
        raise ConfigError(f"Mask for MoE experts {name!r} needs 'out_channels' (hidden rows) or 'inner_channels' "
                          f"(per expert); got keys {sorted(entry)}.")
    return LayerMask(rows, inner_keep=inner)


def _kept(name: str, key: str, value: Any, size: int) -> np.ndarray:
    """A bool mask over ``size`` channels, True at the kept indices ``value``."""
    idx = torch.as_tensor(value).long().reshape(-1)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= size):
        raise ConfigError(f"{key} for {name!r} must be indices in [0, {size}); got values from {int(idx.min())} to "
                          f"{int(idx.max())}.")
    keep = np.zeros(size, dtype=bool)
    keep[idx.cpu().numpy()] = True
    return keep


def load_masks(masks: MaskDict | str | os.PathLike) -> MaskDict:
    """Accept a mask dict or the path of a mask file.

    A file is slimkit's safetensors (``Pruner.export_model``) or NNI's ``torch.save``d dict (read with
    ``weights_only=True``, never unpickling code).
    """
    if isinstance(masks, (str, os.PathLike)):
        if not os.path.isfile(masks):
            raise ConfigError(f"Mask file {os.fspath(masks)!r} does not exist; pass a mask dict or an existing file.")
        masks = read_mask_file(masks)
    if not isinstance(masks, Mapping):
        raise ConfigError(
            f"masks must map layer names to {{'weight_mask': Tensor, 'bias_mask': Tensor | None}} or "
            f"{{'out_channels': LongTensor}}; got {type(masks).__name__}."
        )
    return masks


def _first(entry: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    return next((entry[k] for k in keys if entry.get(k) is not None), None)


def normalize_masks(model: nn.Module, masks: MaskDict | str | os.PathLike) -> dict[str, LayerMask]:
    """Validate ``masks`` against ``model`` and turn each entry into a :class:`LayerMask`."""
    masks = load_masks(masks)
    modules = dict(model.named_modules())
    out: dict[str, LayerMask] = {}
    for name, entry in masks.items():
        if name not in modules:
            raise ConfigError(
                f"Mask for layer {name!r}, which the model does not have.{closest(name, modules)} "
                f"Layer names are the model's named_modules(), e.g. {sorted(k for k in modules if k)[:5]}."
            )
        module = modules[name]
        if experts_spec(module) is not None and isinstance(entry, Mapping):
            out[name] = _experts_mask(name, module, entry)
            continue
        weight = getattr(module, "weight", None)
        if not isinstance(entry, Mapping) or not isinstance(weight, torch.Tensor):
            raise ConfigError(
                f"Mask for {name!r} ({type(module).__name__}) must be a dict with 'weight_mask' or 'out_channels' "
                f"for a layer with a weight; got {type(entry).__name__}."
            )
        channel_dim = 1 if isinstance(module, nn.Embedding) else out_dim(module)
        rows = weight.shape[channel_dim]
        weight_mask, bias_mask = _first(entry, WEIGHT_KEYS), _first(entry, BIAS_KEYS)
        if weight_mask is not None:
            weight_mask = torch.as_tensor(weight_mask)
            if tuple(weight_mask.shape) != tuple(weight.shape):
                raise ConfigError(
                    f"weight_mask for {name!r} has shape {tuple(weight_mask.shape)}; the layer's weight has shape "
                    f"{tuple(weight.shape)}. Pass a mask of the same shape as the weight."
                )
            keep = weight_mask.movedim(channel_dim, 0).reshape(rows, -1).ne(0).any(dim=1).cpu().numpy()
        elif entry.get("out_channels") is not None:
            keep = _kept(name, "out_channels", entry["out_channels"], rows)
        else:
            raise ConfigError(
                f"Mask for {name!r} has neither 'weight_mask' nor 'out_channels'; got keys {sorted(entry)}."
            )
        bias = getattr(module, "bias", None)
        if bias_mask is not None:
            bias_mask = torch.as_tensor(bias_mask)
            if not isinstance(bias, torch.Tensor) or bias_mask.shape != bias.shape:
                raise ConfigError(
                    f"bias_mask for {name!r} has shape {tuple(bias_mask.shape)}; the layer's bias is "
                    f"{None if bias is None else tuple(bias.shape)}. Pass None or a mask shaped like the bias."
                )
        out[name] = LayerMask(keep.astype(bool), weight_mask, bias_mask)
    return out
