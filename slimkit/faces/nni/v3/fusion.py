"""NNI 3.0's ``fuse_names``: a conv or linear layer and the BatchNorm after it quantized as one layer.

``{"op_names": ["conv1"], "fuse_names": [("conv1", "batchnorm1")], ...}`` in a quantizer's ``config_list``. While
the quantizer wraps the model, the quantizer's wrapper of the layer reads its weight as the folded one,
``w * gamma / sqrt(var + eps)`` (:func:`folded_weight`), and the layer's bias is parametrized as the folded one
(``torch.nn.utils.parametrize``), ``(b - mean) * gamma / sqrt(var + eps) + beta``, both computed from the
BatchNorm's current parameters and running statistics at every forward, so the quantizer sees,
trains and exports the weight the deployed (fused) layer really uses, and the BatchNorm's place in the model holds
an identity (:class:`FusedNorm`). As in NNI 3.0, a training forward first runs the layer's own (unfolded) output
through the BatchNorm without gradients, which updates its running statistics, and then folds them: the fused
layer follows the statistics as training moves them. The original parameters are still what the optimizer
trains (``w``, ``b``, ``gamma``, ``beta``; a layer without a bias gets a trainable zero bias).
:func:`unfuse_modules` puts the layer and its BatchNorm back as they were (NNI's ``unwrap_model``), with the trained
parameters and statistics; :func:`bake_modules` folds the current statistics for good (freezing, exporting).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.errors import closest

__all__ = ["FusedNorm", "bake_modules", "folded_weight", "fuse_modules", "fuse_pairs", "statistics_hook",
           "unfuse_modules"]

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
            if "weight" not in entry.get("target_names", []):
                raise QuantizationConfigError(f"{where}: fusing {first!r} with {norm!r} quantizes the folded weight; "
                                              "the entry's target_names must list 'weight', as in NNI.")
            if first not in entry.get("op_names", []):
                raise QuantizationConfigError(f"{where}: the fused layer {first!r} must be one of the entry's "
                                              f"op_names ({entry.get('op_names', [])!r}), as in NNI.")
            pairs.append((first, norm))
    return pairs


class _FoldBias(nn.Module):
    """Parametrization of a fused layer's bias: ``(b - mean) * gamma / sqrt(var + eps) + beta`` (current stats)."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, "norm", norm)  # a reference, not a submodule: FusedNorm owns the BatchNorm

    def forward(self, bias: torch.Tensor) -> torch.Tensor:
        norm = self.norm
        beta = norm.bias if norm.affine else torch.zeros_like(norm.running_mean)  # type: ignore[union-attr]
        return (bias - norm.running_mean) * _factor(norm) + beta  # type: ignore[arg-type, operator]


def _factor(norm: nn.Module) -> torch.Tensor:
    gamma = norm.weight if norm.affine else torch.ones_like(norm.running_var)
    return gamma * torch.rsqrt(norm.running_var + norm.eps)


def folded_weight(layer: nn.Module, norm: nn.Module) -> torch.Tensor:
    """``layer``'s weight with ``norm`` folded in while the pair is fused (``w * gamma / sqrt(var + eps)``)."""
    weight = layer.weight
    if not parametrize.is_parametrized(layer, "bias"):
        return weight  # not fused (or folded for good)
    return weight * _factor(norm).reshape(-1, *([1] * (weight.dim() - 1)))


class FusedNorm(nn.Identity):
    """What stands in a fused BatchNorm's place: an identity that keeps the BatchNorm (``norm``) and its state."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm


def _check_pair(layer: nn.Module, bn: nn.Module, first: str, norm: str) -> None:
    channels = layer.out_features if isinstance(layer, nn.Linear) else layer.out_channels
    if bn.num_features != channels:
        raise QuantizationConfigError(f"fuse_names ({first!r}, {norm!r}): {norm} normalises {bn.num_features} "
                                      f"channels but {first} produces {channels}; fuse a layer with the "
                                      "BatchNorm right after it.")
    if not bn.track_running_stats or bn.running_mean is None or bn.running_var is None:
        raise QuantizationConfigError(f"fuse_names ({first!r}, {norm!r}): {norm} keeps no running statistics "
                                      "(track_running_stats=False); there is nothing to fold.")


def _plain(model: nn.Module, name: str) -> nn.Module:
    """The layer at ``name``, looking through a quantizer's wrapper."""
    module = model.get_submodule(name)
    return getattr(module, "module", module) if not isinstance(module, _FIRST) else module


def fuse_modules(model: nn.Module, pairs: Sequence[tuple[str, str]]) -> list[nn.Parameter]:
    """Parametrize each pair's layer with its BatchNorm folded in; the norm's place holds a :class:`FusedNorm`.

    Returns the parameters fusion created (the bias of a layer that had none), which the optimizer must learn too;
    a pair fused already is left as it is.
    """
    created: list[nn.Parameter] = []
    for first, norm in pairs:
        layer, bn = _plain(model, first), model.get_submodule(norm)
        if isinstance(bn, FusedNorm) or isinstance(bn, nn.Identity):
            continue  # already fused (or folded for good)
        _check_pair(layer, bn, first, norm)
        if layer.bias is None:
            layer.bias = nn.Parameter(torch.zeros_like(bn.running_mean))
            created.append(layer.bias)
        parametrize.register_parametrization(layer, "bias", _FoldBias(bn))
        model.set_submodule(norm, FusedNorm(bn))
    return created


def unfuse_modules(model: nn.Module, pairs: Sequence[tuple[str, str]]) -> None:
    """Put each fused pair back as a plain layer followed by its BatchNorm (trained parameters, current statistics)."""
    for first, norm in pairs:
        holder = model.get_submodule(norm)
        if isinstance(holder, FusedNorm):
            parametrize.remove_parametrizations(_plain(model, first), "bias", leave_parametrized=False)
            model.set_submodule(norm, holder.norm)


def bake_modules(model: nn.Module, pairs: Sequence[tuple[str, str]]) -> None:
    """Fold the current statistics into each fused layer for good (plain parameters; the norm's place: Identity)."""
    for first, norm in pairs:
        holder = model.get_submodule(norm)
        if not isinstance(holder, FusedNorm):
            continue
        layer = _plain(model, first)
        with torch.no_grad():
            layer.weight.copy_(folded_weight(layer, holder.norm))
        parametrize.remove_parametrizations(layer, "bias", leave_parametrized=True)
        model.set_submodule(norm, nn.Identity())


def statistics_hook(layer: nn.Module, bn: nn.Module) -> Any:
    """A forward pre-hook (for the quantizer's wrapper of ``layer``) updating ``bn``'s statistics in train mode.

    It runs ``layer`` with its own (unfolded) weight and bias on the input, without gradients, through ``bn`` in
    train mode, as NNI 3.0's fused forward does before it folds.
    """
    def hook(wrapper: nn.Module, args: tuple) -> None:
        if not (wrapper.training and bn.training and args and isinstance(args[0], torch.Tensor)):
            return
        if not parametrize.is_parametrized(layer, "bias"):
            return
        with torch.no_grad():
            weight, bias = layer.weight, layer.parametrizations.bias.original
            if isinstance(layer, nn.Linear):
                out = F.linear(args[0], weight, bias)
            else:
                out = layer._conv_forward(args[0], weight, bias)
            bn(out)
    return hook
