"""NNI 3.0's ``fuse_names``: a conv or linear layer and the BatchNorm after it become one layer before quantizing.

``{"op_names": ["conv1"], "fuse_names": [("conv1", "batchnorm1")], ...}`` in a quantizer's ``config_list``:
the BatchNorm's affine transform and running statistics are folded into the layer's weight and bias
(``w * gamma / sqrt(var + eps)``, ``(b - mean) * gamma / sqrt(var + eps) + beta``, torch's
``fuse_conv_bn_weights`` / ``fuse_linear_bn_weights``), in place, so an optimizer built on the model keeps
training the layer, and the BatchNorm is replaced by ``nn.Identity``, so the
quantizer sees, trains and exports the weight the deployed (fused) layer really uses. The statistics are those
of the model when the quantizer is built: fold after pre-training, as one does for integer deployment; the
quantization-aware training that follows trains the fused weight (NNI 3.0 keeps updating the statistics during
training instead).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_weights, fuse_linear_bn_weights

from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.errors import closest

__all__ = ["fuse_modules", "fuse_pairs"]

_FIRST = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)
_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def fuse_pairs(model: nn.Module, config_list: Any) -> list[tuple[str, str]]:
    """The ``(layer, norm)`` pairs the entries' ``fuse_names`` ask for, checked against ``model``."""
    if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence):
        return []  # the config translation names what is wrong with the list
    modules = dict(model.named_modules())
    pairs: list[tuple[str, str]] = []
    for index, entry in enumerate(config_list):
        if not isinstance(entry, Mapping) or "fuse_names" not in entry:
            continue
        where = f"config_list[{index}]['fuse_names']"
        given = entry["fuse_names"]
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
            raise QuantizationConfigError(f"{where} must be a list of name tuples like [('conv1', 'bn1')], got "
                                          f"{given!r}.")
        for group in given:
            if isinstance(group, (str, bytes)) or not isinstance(group, Sequence) or len(group) != 2:
                raise QuantizationConfigError(f"{where}: each group names a layer and the BatchNorm after it, e.g. "
                                              f"('conv1', 'bn1'); got {group!r} (slimkit fuses conv/linear + "
                                              "BatchNorm pairs).")
            first, norm = (str(n) for n in group)
            for name in (first, norm):
                if name not in modules:
                    raise QuantizationConfigError(f"{where}: {name!r} is no layer of the model."
                                                  f"{closest(name, [n for n in modules if n])}")
            if not isinstance(modules[first], _FIRST) or not isinstance(modules[norm], _NORMS):
                raise QuantizationConfigError(f"{where}: ({first!r}, {norm!r}) is a {type(modules[first]).__name__} "
                                              f"and a {type(modules[norm]).__name__}; slimkit fuses a Conv/Linear "
                                              "with the BatchNorm that follows it.")
            if first not in entry.get("op_names", []):
                raise QuantizationConfigError(f"{where}: the fused layer {first!r} must be one of the entry's "
                                              f"op_names ({entry.get('op_names', [])!r}), as in NNI.")
            pairs.append((first, norm))
    return pairs


def fuse_modules(model: nn.Module, pairs: Sequence[tuple[str, str]]) -> list[nn.Parameter]:
    """Fold each pair's BatchNorm into its layer, in place (the norm becomes ``nn.Identity``).

    Returns the parameters fusion created (the bias of a layer that had none), which the optimizer must learn too.
    """
    created: list[nn.Parameter] = []
    for first, norm in pairs:
        layer, bn = model.get_submodule(first), model.get_submodule(norm)
        if isinstance(bn, nn.Identity):
            continue  # already fused
        channels = layer.out_features if isinstance(layer, nn.Linear) else layer.out_channels
        if bn.num_features != channels:
            raise QuantizationConfigError(f"fuse_names ({first!r}, {norm!r}): {norm} normalises {bn.num_features} "
                                          f"channels but {first} produces {channels}; fuse a layer with the "
                                          "BatchNorm right after it.")
        if not bn.track_running_stats or bn.running_mean is None or bn.running_var is None:
            raise QuantizationConfigError(f"fuse_names ({first!r}, {norm!r}): {norm} keeps no running statistics "
                                          "(track_running_stats=False); there is nothing to fold.")
        if int(bn.num_batches_tracked) == 0:
            warnings.warn(f"fuse_names ({first!r}, {norm!r}): {norm} has seen no batch; folding its initial "
                          "statistics (mean 0, variance 1). Fuse after training the model.", UserWarning, stacklevel=3)
        gamma = bn.weight if bn.affine else torch.ones_like(bn.running_var)
        beta = bn.bias if bn.affine else torch.zeros_like(bn.running_mean)
        with torch.no_grad():
            if isinstance(layer, nn.Linear):
                weight, bias = fuse_linear_bn_weights(layer.weight, layer.bias, bn.running_mean, bn.running_var,
                                                      bn.eps, gamma, beta)
            else:
                weight, bias = fuse_conv_bn_weights(layer.weight, layer.bias, bn.running_mean, bn.running_var,
                                                    bn.eps, gamma, beta, transpose=False)
            layer.weight.copy_(weight)
            if layer.bias is None:
                layer.bias = nn.Parameter(bias.detach().clone())
                created.append(layer.bias)
            else:
                layer.bias.copy_(bias)
        _replace(model, norm, nn.Identity())
    return created


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)
