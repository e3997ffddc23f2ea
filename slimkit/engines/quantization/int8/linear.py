"""fbgemm dynamic int8 Linear: per-channel symmetric int8 weights, activations quantized per call with 8 bits.

Which weights are safe depends on the CPU. fbgemm's AVX2 and plain AVX-512 kernels multiply uint8 activations
by int8 weights with ``vpmaddubsw``, which adds each adjacent pair along K (``k = 2i, 2i+1``) into int16 *with
saturation* before the int32 accumulation; VNNI (``vpdpbusd``) and AMX accumulate in int32 and are exact.
``torch.ao`` therefore always asks for 7-bit activations (``reduce_range``). Two recipes here:

* ``"full_range"``: 8-bit activations, 127-level weights. Exact only where :func:`full_range_is_exact` (a
  worst-case probe: every product 255 * 127) says so, e.g. on AVX-512 VNNI CPUs.
* ``"saturation_safe"``: 8-bit activations and, per output channel, the most weight levels for which every
  adjacent pair satisfies ``|q_2i| + |q_2i+1| <= 128`` (64..127 levels), so ``255 * 128 = 32640`` never
  saturates int16: exact on every x86 CPU. Chosen where the probe fails, or forced with
  ``SLIMKIT_INT8_SATURATION_SAFE=1`` (or the ``saturation_safe`` argument) to test it anywhere.

``FBGEMM_ENABLE_INSTRUCTIONS=AVX2`` (read once per process by fbgemm) makes a VNNI machine run the AVX2 kernels;
:mod:`~slimkit.engines.quantization.int8.emulation` reproduces them in plain torch.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Iterable
from typing import Any

import torch
import torch.ao.nn.quantized.dynamic as nnqd

from slimkit.core.weights import weight_of

FULL_RANGE = "full_range"
SATURATION_SAFE = "saturation_safe"
FORCE_ENV = "SLIMKIT_INT8_SATURATION_SAFE"
PAIR_LIMIT = 128  # |q_a| + |q_b| <= 128: 255 * 128 = 32640 <= 32767, the int16 maximum


def use_fbgemm() -> None:
    """Select the fbgemm quantized engine (qnnpack where fbgemm is missing)."""
    engines = torch.backends.quantized.supported_engines
    torch.backends.quantized.engine = "fbgemm" if "fbgemm" in engines else "qnnpack"


def pair_safe_levels(weight: torch.Tensor) -> torch.Tensor:
    """Per output row of ``weight [out, in]``: the most levels (64..127) that keep every adjacent pair safe.

    Safe means the rounded codes satisfy ``|q_2i| + |q_2i+1| <= 128`` along ``in``.
    """
    a = weight.detach().abs().float()
    if a.shape[1] % 2:
        a = torch.nn.functional.pad(a, (0, 1))  # fbgemm pads K with zeros
    amax = a.amax(dim=1).clamp_min(1e-12)
    pair = (a[:, 0::2] + a[:, 1::2]).amax(dim=1) / amax  # in [1, 2]
    levels = torch.floor(PAIR_LIMIT / pair).clamp(64, 127)
    for _ in range(4):  # rounding can add one to a pair sum: step down where it does
        codes = torch.round(a * (levels / amax)[:, None])
        over = (codes[:, 0::2] + codes[:, 1::2]).amax(dim=1) > PAIR_LIMIT
        if not bool(over.any()):
            break
        levels = torch.where(over, levels - 1, levels).clamp_min(64)
    return levels


class Int8Linear(nnqd.Linear):
    """Dynamic int8 ``Linear`` (fbgemm): int8 weights, activations quantized per call with 8 (or 7) bits.

    The state dict is torch.ao's (packed int8 weight + bias), so it saves as safetensors without pickle.
    ``requantize_on_load`` re-quantizes the loaded weights saturation-safe (a save from a full-range CPU
    loaded on a saturating one).
    """

    def __init__(self, in_features: int, out_features: int, bias_: bool = True, reduce_range: bool = False,
                 saturation_safe: bool = False) -> None:
        super().__init__(in_features, out_features, bias_=bias_, dtype=torch.qint8)
        self.reduce_range = bool(reduce_range)
        self.saturation_safe = bool(saturation_safe)
        self.requantize_on_load = False
        self.register_load_state_dict_post_hook(_after_load)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Quantize ``x`` dynamically and run the int8 GEMM; returns ``x``'s dtype."""
        y = torch.ops.quantized.linear_dynamic(x, self._packed_params._packed_params, reduce_range=self.reduce_range)
        return y.to(x.dtype)

    def call_macs(self, args: tuple, output: Any) -> tuple[str, int]:
        """``("int8", MACs)`` of one call (int8 activations times int8 weights), for :mod:`slimkit.evaluation`."""
        return "int8", (output.numel() * self.in_features if isinstance(output, torch.Tensor) else 0)

    def extra_repr(self) -> str:
        """Show the activation bit width and weight recipe next to torch.ao's description."""
        weights = "pair-safe" if self.saturation_safe else "127 levels"
        return f"{super().extra_repr()}, activation_bits={7 if self.reduce_range else 8}, weights={weights}"


    @classmethod
    def from_linear(cls, linear: torch.nn.Module, reduce_range: bool = False,
                    saturation_safe: bool = False) -> Int8Linear:
        """Quantize a dense layer's weight per output channel (symmetric int8) and keep its fp32 bias.

        ``linear`` is any :mod:`slimkit.core.weights` dense target: ``nn.Linear``, a subclass, or ``Conv1D``.
        """
        bias = getattr(linear, "bias", None)
        return cls.from_weight(weight_of(linear), bias if isinstance(bias, torch.Tensor) else None, reduce_range,
                               saturation_safe)

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None, reduce_range: bool = False,
                    saturation_safe: bool = False) -> Int8Linear:
        """Build from an fp32 ``[out, in]`` weight (per-channel symmetric int8) and an optional bias."""
        module = cls(weight.shape[1], weight.shape[0], bias is not None, reduce_range, saturation_safe)
        module.set_weight_bias(quantize_weight(weight, saturation_safe),
                               bias.detach().float().cpu() if bias is not None else None)
        return module


def _after_load(module: Int8Linear, incompatible_keys: Any) -> None:
    """After a state dict loaded (packed params included): re-quantize saturation-safe when asked to."""
    if module.requantize_on_load:
        module.set_weight_bias(quantize_weight(module.weight().dequantize(), True), module.bias())
        module.saturation_safe = True


def quantize_weight(weight: torch.Tensor, saturation_safe: bool = False) -> torch.Tensor:
    """Per-output-channel symmetric qint8 of ``weight``: 127 levels, or :func:`pair_safe_levels` levels."""
    weight = weight.detach().float().cpu()
    levels = pair_safe_levels(weight) if saturation_safe else torch.full((weight.shape[0],), 127.0)
    scale = (weight.abs().amax(dim=1) / levels).clamp_min(1e-12).double()
    zero = torch.zeros(weight.shape[0], dtype=torch.long)
    return torch.quantize_per_channel(weight, scale, zero, 0, torch.qint8)


@functools.lru_cache(maxsize=4)
def _probe(engine: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ones = torch.nn.Linear(512, 4, bias=False)
        torch.nn.init.ones_(ones.weight)
        module = Int8Linear.from_linear(ones, reduce_range=False)
        out = module(torch.ones(8, 512))  # every product is 255 * 127: the int16 worst case
    return bool(torch.allclose(out, torch.full_like(out, 512.0), rtol=1e-3))


def full_range_is_exact() -> bool:
    """Whether this machine's int8 kernel computes 8-bit activations times int8 weights without saturating."""
    use_fbgemm()
    return _probe(torch.backends.quantized.engine)


def cpu_int8_capability() -> str:
    """One line naming this CPU's int8 features and what the fbgemm probe found (saved with int8 models)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    found = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8") if f in flags]
    forced = os.environ.get("FBGEMM_ENABLE_INSTRUCTIONS")
    kernel = "8-bit activations exact" if full_range_is_exact() else "int16 pair saturation"
    return f"{' '.join(found) or 'unknown ISA'}; fbgemm: {kernel}" + (f" (FBGEMM_ENABLE_INSTRUCTIONS={forced})"
                                                                    if forced else "")


def saturation_safe_forced() -> bool:
    """Whether ``SLIMKIT_INT8_SATURATION_SAFE`` asks for the saturation-safe recipe on every CPU."""
    return os.environ.get(FORCE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def choose_path(saturation_safe: bool | None = None) -> str:
    """``"saturation_safe"`` when asked (argument, else the env var) or when this CPU saturates, else full range."""
    forced = saturation_safe_forced() if saturation_safe is None else saturation_safe
    return SATURATION_SAFE if forced or not full_range_is_exact() else FULL_RANGE


def quantize_layers(model: torch.nn.Module, names: Iterable[str], reduce_range: bool,
                    saturation_safe: bool = False, requantize_on_load: bool = False) -> torch.nn.Module:
    """Swap the named dense layers (Linear, subclasses, Conv1D) of ``model`` for :class:`Int8Linear`, in place."""
    use_fbgemm()
    for name in names:
        module = Int8Linear.from_linear(model.get_submodule(name), reduce_range, saturation_safe)
        module.requantize_on_load = requantize_on_load
        model.set_submodule(name, module)
    return model
