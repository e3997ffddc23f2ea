"""AttentiveMobileNetV3: the BigNAS / AttentiveNAS / once-for-all MobileNetV3 supernet (MMRazor's backbone type).

``arch_setting`` rows are ``[min, max, step]`` ranges: ``kernel_size`` and ``num_blocks`` per stage,
``expand_ratio`` per stage plus the last layer's, ``num_out_channels`` for the stem, each stage and the last
layer. The supernet: a 3x3 stride-2 stem, stages ``layer1..layerN`` of :class:`~.elastic_block.ElasticMBBlock`
(each stage a depth mutable keeping its first ``d`` blocks), then ``last_conv`` (1x1 expand, global pool, 1x1
feature mix). Every choice shares the largest weights: widths are the first channels, smaller kernels the centre
of the largest (``conv_cfg=dict(type='OFAConv2d')``: transformed, see :mod:`.elastic_ops`).

Mutables carry MMRazor's aliases, so its subnet files set them: ``backbone.first_channels``,
``backbone.last_channels``, ``backbone.layers.<i>.{kernel_size,expand_ratio,depth,out_channels}`` (with
``fine_grained_mode``, ``backbone.layers.<i>.<k>.{kernel_size,expand_ratio}`` per block, and
``..._se`` for the squeeze-excite width). ``last_mutable_channels`` is the output width a
``DynamicLinearClsHead`` connects to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from slimkit.engines.nas.dynamic_ops import DynamicConv2d
from slimkit.engines.nas.mutables import MutableChannels, MutableSequential
from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.nas.elastic_block import ElasticMBBlock, conv_unit, pointwise
from slimkit.faces.mmrazor.nas.elastic_ops import MutableValue, expanded
from slimkit.faces.mmrazor.nas.mobilenet import make_divisible
from slimkit.faces.mmrazor.nas.staged import StagedBackbone

_KEYS = ("kernel_size", "num_blocks", "expand_ratio", "num_out_channels")
_CONVS = {None: False, "BigNasConv2d": False, "OFAConv2d": True, "Conv2d": False}
_NORMS = ("DynamicBatchNorm2d", "BN", "BN2d", "SyncBN")


def parse_values(rows: Any, key: str) -> list[list[int]]:
    """``[[min, max, step], ...]`` -> the value lists ``[min, min + step, ..., max]`` (MMRazor's ``parse_values``)."""
    out = []
    for row in rows if isinstance(rows, Sequence) and not isinstance(rows, str) else [None]:
        if not (isinstance(row, Sequence) and len(row) == 3 and all(isinstance(v, int) for v in row)
                and 0 < row[0] <= row[1] and row[2] > 0):
            raise ConfigError(f"AttentiveMobileNetV3 arch_setting[{key!r}] rows must be [min, max, step] with "
                              f"0 < min <= max and step > 0, got {row!r}.")
        out.append(list(range(row[0], row[1] + 1, row[2])))
    return out


def _scoped(cfg: Mapping[str, Any] | None, what: str, allowed: Sequence[str | None]) -> str | None:
    kind = None if cfg is None else str(cfg.get("type", "")).split(".")[-1] if isinstance(cfg, Mapping) else "?"
    if kind not in allowed:
        raise ConfigError(f"AttentiveMobileNetV3 {what}={cfg!r} is not supported; types: "
                          f"{', '.join(a for a in allowed if a)}.")
    return kind


def _ints(value: Any, allowed: Sequence[int] | None = None) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, int) and not isinstance(v, bool) and (allowed is None or v in allowed) for v in value)


def _check_args(widen_factor: Any, out_indices: Any, frozen_stages: Any, norm_cfg: Any, act_cfg_list: Any,
                stride_list: Any, with_se_list: Any, in_channels: Any) -> None:
    """ConfigError naming the first argument of the wrong type or range."""
    momentum = norm_cfg.get("momentum", 0.1) if isinstance(norm_cfg, Mapping) else 0.1
    checks = [
        ("widen_factor", widen_factor, isinstance(widen_factor, (int, float)) and not isinstance(widen_factor, bool)
         and widen_factor > 0, "a positive number"),
        ("out_indices", out_indices, _ints(out_indices), "a list of stage indices"),
        ("frozen_stages", frozen_stages, _ints([frozen_stages]), "an int (-1: none)"),
        ("norm_cfg", norm_cfg, norm_cfg is None or isinstance(norm_cfg, Mapping), "dict(type='DynamicBatchNorm2d')"),
        ("norm_cfg momentum", momentum, isinstance(momentum, (int, float)) and not isinstance(momentum, bool)
         and 0 <= momentum <= 1, "a number in [0, 1]"),
        ("act_cfg_list", act_cfg_list, act_cfg_list is None or (isinstance(act_cfg_list, (list, tuple)) and all(
            isinstance(a, str) for a in act_cfg_list)), "a list of activation names such as 'HSwish'"),
        ("stride_list", stride_list, stride_list is None or _ints(stride_list, (1, 2)), "a list of strides 1 or 2"),
        ("with_se_list", with_se_list, with_se_list is None or (isinstance(with_se_list, (list, tuple)) and all(
            isinstance(v, bool) for v in with_se_list)), "a list of booleans"),
        ("in_channels", in_channels, _ints([in_channels]) and in_channels > 0, "a positive int")]
    for name, value, ok, want in checks:
        if not ok:
            raise ConfigError(f"AttentiveMobileNetV3 {name} must be {want}, got {value!r}.")


class ElasticStage(MutableSequential):
    """A stage: its blocks, a depth choice, and the stage's width (and shared kernel / ratio) mutables."""

    def __init__(self, blocks: list[nn.Module], depths: list[int], width: MutableChannels,
                 shared: Mapping[str, MutableValue]) -> None:
        super().__init__(blocks, depths)
        self.out_channels = width
        for name, mutable in shared.items():
            self.add_module(name, mutable)
        self._modules["blocks"] = self._modules.pop("blocks")  # the stage's own mutables are named first


@register_module()
class AttentiveMobileNetV3(StagedBackbone):
    """The searchable MobileNetV3 supernet (see the module doc); arguments as MMRazor's.

    ``stride_list`` / ``with_se_list``: per stage; ``act_cfg_list``: activation names for the stem, each stage
    and the last layer; ``norm_cfg``: ``DynamicBatchNorm2d`` (its ``momentum`` is used); ``conv_cfg``:
    ``BigNasConv2d`` (centre-cropped kernels) or ``OFAConv2d`` (transformed); ``with_attentive_shortcut``: a
    shortcut on every block; ``zero_init_residual``: blocks with a shortcut start as the identity (their last
    norm's scale 0). ``with_cp`` (activation checkpointing, a memory saving) is read and not used.
    """

    stem_name = "first_conv"

    def __init__(self, arch_setting: Mapping[str, Sequence[Sequence[int]]], widen_factor: float = 1.0,
                 out_indices: Sequence[int] = (7,), frozen_stages: int = -1,
                 conv_cfg: Mapping[str, Any] | None = None, norm_cfg: Mapping[str, Any] | None = None,
                 act_cfg_list: Sequence[str] | None = None, stride_list: Sequence[int] | None = None,
                 with_se_list: Sequence[bool] | None = None, norm_eval: bool = False, with_cp: bool = False,
                 zero_init_residual: bool = True, fine_grained_mode: bool = False,
                 with_attentive_shortcut: bool = True, init_cfg: Mapping[str, Any] | None = None,
                 in_channels: int = 3) -> None:
        super().__init__()
        if not isinstance(arch_setting, Mapping) or set(arch_setting) != set(_KEYS):
            raise ConfigError(f"AttentiveMobileNetV3 arch_setting must be dict({', '.join(_KEYS)}) of [min, max, "
                              f"step] rows, got {arch_setting!r}.")
        if init_cfg is not None:
            raise ConfigError("AttentiveMobileNetV3 init_cfg is not read; load weights with the algorithm's "
                              "init_cfg=dict(type='Pretrained', checkpoint=<.safetensors>).")
        _check_args(widen_factor, out_indices, frozen_stages, norm_cfg, act_cfg_list, stride_list, with_se_list,
                    in_channels)
        kernels, depths, ratios, widths = (parse_values(arch_setting[k], k) for k in _KEYS)
        widths = [sorted({make_divisible(c * widen_factor, 8) for c in row}) for row in widths]
        n = len(kernels)
        acts = list(act_cfg_list or ["Swish"] * (n + 2))
        strides = list(stride_list or [1, 2, 2, 2, 1, 2, 1])
        ses = list(with_se_list or [False, False, True, False, True, True, True])
        if len(depths) != n or len(ratios) != n + 1 or len(widths) != n + 2 or len(acts) < n + 2 or min(
                len(strides), len(ses)) < n:
            raise ConfigError(f"AttentiveMobileNetV3: {n} stages need {n} num_blocks rows, {n + 1} expand_ratio rows "
                              f"(the last for the last layer), {n + 2} num_out_channels rows (stem, stages, last "
                              f"layer), {n + 2}+ act_cfg_list entries (stem, stages, ..., last layer) and {n} "
                              f"strides / with_se flags; got {len(depths)}, {len(ratios)}, {len(widths)}, "
                              f"{len(acts)}, {len(strides)}, {len(ses)}.")
        self.check_stages(n + 1, out_indices, frozen_stages, norm_eval)
        transform = _CONVS[_scoped(conv_cfg, "conv_cfg", list(_CONVS))]
        _scoped(norm_cfg or {"type": "DynamicBatchNorm2d"}, "norm_cfg", _NORMS)
        momentum = float((norm_cfg or {}).get("momentum", 0.1))
        self.first_mutable_channels = MutableChannels(widths[0])
        self.first_mutable_channels.alias = "backbone.first_channels"
        self.last_mutable_channels = MutableChannels(widths[-1])
        self.last_mutable_channels.alias = "backbone.last_channels"
        # one last ratio is no choice (MMRazor's subnet files have no entry for it)
        self.last_expand_ratio = MutableValue(ratios[-1]) if len(ratios[-1]) > 1 else ratios[-1][0]
        self.first_conv = conv_unit(DynamicConv2d(in_channels, self.first_mutable_channels, 3, 2, 1, bias=False),
                                    self.first_mutable_channels, {"type": acts[0]}, momentum)
        cin: MutableChannels = self.first_mutable_channels
        self.layer_names = []
        for i in range(n):
            prefix = f"backbone.layers.{i + 1}."
            width = MutableChannels(widths[i + 1])
            width.alias = prefix + "out_channels"
            shared = {} if fine_grained_mode else {
                "kernel_size": MutableValue(kernels[i], alias=prefix + "kernel_size"),
                "expand_ratio": MutableValue(ratios[i], alias=prefix + "expand_ratio")}
            blocks = []
            for k in range(max(depths[i])):
                kernel = shared.get("kernel_size") or MutableValue(kernels[i], alias=f"{prefix}{k}.kernel_size")
                ratio = shared.get("expand_ratio") or MutableValue(ratios[i], alias=f"{prefix}{k}.expand_ratio")
                blocks.append(ElasticMBBlock(cin if k == 0 else width, width, kernel, ratio,
                                             int(strides[i]) if k == 0 else 1, {"type": acts[i + 1]}, momentum,
                                             bool(ses[i]), bool(with_attentive_shortcut), transform,
                                             own=fine_grained_mode))
            stage = ElasticStage(blocks, depths[i], width, shared)
            stage.alias = prefix + "depth"
            self.add_module(f"layer{i + 1}", stage)
            self.layer_names.append(f"layer{i + 1}")
            cin = width
        last_expand = expanded(cin, self.last_expand_ratio)
        self.last_conv = nn.Sequential()
        self.last_conv.add_module("final_expand_layer", pointwise(cin, last_expand, {"type": acts[-1]}, momentum))
        self.last_conv.add_module("pool", nn.AdaptiveAvgPool2d(1))
        self.last_conv.add_module("feature_mix_layer", pointwise(last_expand, self.last_mutable_channels,
                                                                 {"type": acts[-1]}, None))
        self.layer_names.append("last_conv")
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, ElasticMBBlock) and (m.residual or m.attentive):
                    nn.init.zeros_(m.linear_conv.bn.weight)
        self._freeze()
