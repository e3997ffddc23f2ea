"""torch.ao FX graph-mode pieces of int8_static: observers, qconfig, prepare / calibrate / convert, fp32 units.

Two choices here, measured on MobileNetV2 (ImageNet weights, histogram observers, no bias correction, top-1
agreement with fp32 on held-out skimage photo crops; fbgemm on an AVX-512 VNNI Xeon):

* **Saturation-safe weights.** fbgemm adds pairs of ``uint8 x int8`` products in int16 (``vpmaddubsw``; measured
  here: its depthwise conv kernel saturates with full 8-bit weights, by up to 30+ output steps on MobileNetV2).
  A pair stays exact when its two weights sum to at most 128 in magnitude. torch.ao's answer is 7-bit activations;
  ours keeps 8-bit activations and gives each output channel the most weight levels for which its two largest
  weights still sum to <= 127 (between 63 and 127 levels, 63 meaning 7 bits), so no pairing can saturate on
  any CPU. Held-out top-1 agreement with fp32 goes 0.68 -> 0.73 over plain 7-bit weights.
* **Bounded activations.** Conv-BN-ReLU6 is not fused by fbgemm: the conv output (negative values included)
  gets its own observer, which wastes most of the 8-bit range on values ReLU6 then clips. The observer of such
  an output sees the values clamped to the activation's bounds, so quantizing it *is* the ReLU6 (0.64 -> 0.68).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch.ao.quantization import QConfig, QConfigMapping
from torch.ao.quantization.observer import (
    FixedQParamsObserver,
    HistogramObserver,
    MinMaxObserver,
    ObserverBase,
    PerChannelMinMaxObserver,
)

from slimkit.engines.quantization.int8.fallback import progress
from slimkit.engines.quantization.int8.linear import use_fbgemm

CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
_BNS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)
_ACTS = (torch.nn.ReLU, torch.nn.Hardtanh)  # Hardtanh covers ReLU6


class SaturationSafeWeightObserver(PerChannelMinMaxObserver):
    """Per-channel symmetric int8 weights whose two largest levels in a channel sum to at most 127."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.update(dtype=torch.qint8, qscheme=torch.per_channel_symmetric, quant_min=-127, quant_max=127)
        super().__init__(**kwargs)
        self.register_buffer("levels", torch.tensor([]))

    def forward(self, x_orig: torch.Tensor) -> torch.Tensor:
        """Record the per-channel range and the number of levels each channel can use safely."""
        super().forward(x_orig)
        a = x_orig.detach().abs().float().transpose(0, self.ch_axis).reshape(x_orig.shape[self.ch_axis], -1)
        if a.shape[1] < 2:
            self.levels = torch.full((a.shape[0],), 127.0)
        else:
            top = a.topk(2, dim=1).values
            ratio = top[:, 1] / top[:, 0].clamp_min(1e-30)
            self.levels = torch.floor(127.0 / (1.0 + ratio)).clamp(63.0, 127.0)
        return x_orig

    def calculate_qparams(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Scale ``max|w| / levels`` per channel, zero point 0."""
        amax = torch.maximum(self.min_val.neg(), self.max_val).float()
        scale = (amax / self.levels.to(amax.device)).clamp_min(torch.finfo(torch.float32).eps)
        return scale, torch.zeros(scale.shape, dtype=torch.int64, device=scale.device)


class _Clamped:
    """Mixin: observe ``x.clamp(lo, hi)``, the values a following bounded activation keeps."""

    def __init__(self, lo: float, hi: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[call-arg]
        self.lo, self.hi = float(lo), float(hi)

    def forward(self, x_orig: torch.Tensor) -> torch.Tensor:
        super().forward(x_orig.detach().clamp(self.lo, self.hi))  # type: ignore[misc]
        return x_orig

    def extra_repr(self) -> str:
        return f"clamp=({self.lo}, {self.hi}), {super().extra_repr()}"  # type: ignore[misc]


class ClampedHistogramObserver(_Clamped, HistogramObserver):
    """HistogramObserver of an output that a bounded activation (ReLU6, Hardtanh) clips next."""


class ClampedMinMaxObserver(_Clamped, MinMaxObserver):
    """MinMaxObserver of an output that a bounded activation (ReLU6, Hardtanh) clips next."""


_ACTIVATION_KW = {"dtype": torch.quint8, "reduce_range": False}


def qconfig_mapping(observer: str, exclude: list[str]) -> QConfigMapping:
    """8-bit activations (``observer``: 'histogram' or 'minmax') and saturation-safe per-channel int8 weights."""
    activation = (HistogramObserver if observer == "histogram" else MinMaxObserver).with_args(**_ACTIVATION_KW)
    mapping = QConfigMapping().set_global(QConfig(activation=activation, weight=SaturationSafeWeightObserver))
    for name in exclude:
        mapping = mapping.set_module_name(name, None)
    return mapping


def _bounds(node: torch.fx.Node, modules: dict[str, torch.nn.Module]) -> tuple[float, float] | None:
    """(lo, hi) of a bounded activation node (ReLU6 / Hardtanh module, F.relu6, F.hardtanh), else None."""
    if node.op == "call_module" and isinstance(modules.get(str(node.target)), torch.nn.Hardtanh):
        act = modules[str(node.target)]
        return float(act.min_val), float(act.max_val)
    if node.op == "call_function" and node.target is F.relu6:
        return 0.0, 6.0
    if node.op == "call_function" and node.target is F.hardtanh:
        lo = node.kwargs.get("min_val", node.args[1] if len(node.args) > 1 else -1.0)
        hi = node.kwargs.get("max_val", node.args[2] if len(node.args) > 2 else 1.0)
        return (float(lo), float(hi)) if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else None
    return None


def clamp_bounded_outputs(prepared: torch.fx.GraphModule, observer: str) -> int:
    """Swap the observer of every conv/linear output whose only consumer is a bounded activation; how many."""
    modules = dict(prepared.named_modules())
    cls = ClampedHistogramObserver if observer == "histogram" else ClampedMinMaxObserver
    swapped = 0
    for node in prepared.graph.nodes:
        old = modules.get(str(node.target)) if node.op == "call_module" else None
        if not isinstance(old, (HistogramObserver, MinMaxObserver)) or old.dtype != torch.quint8 or not node.args:
            continue
        src, users = node.args[0], list(node.users)
        core = modules.get(str(src.target)) if isinstance(src, torch.fx.Node) and src.op == "call_module" else None
        core = core[0] if isinstance(core, torch.ao.nn.intrinsic._FusedModule) else core
        bounds = _bounds(users[0], modules) if len(users) == 1 else None
        if isinstance(core, (*CONVS, torch.nn.Linear)) and bounds is not None and bounds[0] < bounds[1]:
            setattr(prepared, str(node.target), cls(*bounds, **_ACTIVATION_KW))
            swapped += 1
    return swapped


def prepare(model: torch.nn.Module, mapping: QConfigMapping, example: torch.Tensor, observer: str) -> Any:
    """Fuse conv-bn(-relu) and insert observers (bounded outputs clamped); returns the prepared GraphModule."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao prints deprecation and observer notices
        from torch.ao.quantization.quantize_fx import prepare_fx

        use_fbgemm()
        prepared = prepare_fx(model.eval(), mapping, (example,))
    clamp_bounded_outputs(prepared, observer)
    return prepared


def calibrate(prepared: torch.nn.Module, images: list[torch.Tensor], desc: str = "int8_static: calibrating") -> None:
    """Run every calibration batch through the observers."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        for batch in progress(images, desc):
            prepared(batch)


def freeze_observers(prepared: torch.fx.GraphModule) -> None:
    """Replace each calibrated activation observer by fixed qparams, so later converts skip the range search."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, module in list(prepared.named_children()):
            if isinstance(module, ObserverBase) and module.dtype == torch.quint8 and not module.is_dynamic:
                scale, zero = module.calculate_qparams()
                setattr(prepared, name, FixedQParamsObserver(float(scale), int(zero), dtype=torch.quint8,
                                                             quant_min=0, quant_max=255))


def convert(prepared: torch.fx.GraphModule, mapping: QConfigMapping, fp32_modules: list[str]) -> Any:
    """The fbgemm int8 model of a (copy of the) calibrated ``prepared`` model; ``fp32_modules`` stay float."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization.quantize_fx import convert_fx

        use_fbgemm()
        final = copy.deepcopy(mapping)
        for name in fp32_modules:
            final = final.set_module_name(name, None)
        return convert_fx(copy.deepcopy(prepared), qconfig_mapping=final)


def fp32_units(model: torch.nn.Module) -> dict[str, list[str]]:
    """Conv/Linear layer name -> the module names of its block (itself, a following BatchNorm and activation).

    A block is what goes back to fp32 together: torch.ao fuses conv-bn(-relu) into one quantized module.
    """
    traced = torch.fx.symbolic_trace(model)
    modules = dict(traced.named_modules())
    units: dict[str, list[str]] = {}
    for node in traced.graph.nodes:
        if node.op != "call_module" or not isinstance(modules[str(node.target)], (*CONVS, torch.nn.Linear)):
            continue
        names, current = [str(node.target)], node
        for kinds in (_BNS, _ACTS):
            users = list(current.users)
            nxt = users[0] if len(users) == 1 else None
            if nxt is not None and nxt.op == "call_module" and isinstance(modules[str(nxt.target)], kinds):
                names.append(str(nxt.target))
                current = nxt
        units.setdefault(names[0], names)
    return units


def reads_graph_input(graph_module: torch.fx.GraphModule, name: str) -> bool:
    """Whether module ``name`` of a converted graph reads the model's (quantized) input directly."""
    for node in graph_module.graph.nodes:
        if node.op == "call_module" and node.target == name and node.args:
            src = node.args[0]
            return (isinstance(src, torch.fx.Node) and src.target is torch.quantize_per_tensor
                    and isinstance(src.args[0], torch.fx.Node) and src.args[0].op == "placeholder")
    return False


def feeds_graph_output(graph_module: torch.fx.GraphModule, name: str) -> bool:
    """Whether every consumer of module ``name`` of a converted graph only dequantizes its output."""
    for node in graph_module.graph.nodes:
        if node.op == "call_module" and node.target == name:
            return bool(node.users) and all(u.op == "call_method" and u.target == "dequantize" for u in node.users)
    return False

