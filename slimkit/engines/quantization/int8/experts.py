"""Int8Experts: a transformers MoE experts module with int8 per-expert weights and fbgemm int8 matmuls (CPU).

Each expert's two projections are quantized like :class:`~.linear.Int8Linear`'s weights: symmetric int8 with one
scale per output channel, and run with ``torch.ops.quantized.linear_dynamic`` (activations quantized per call to
8 bits, int8 x int8 products accumulated in int32 by fbgemm). The recipe follows :func:`~.linear.choose_path`:
on a CPU whose kernel saturates (AVX2 and plain AVX-512: ``vpmaddubsw`` adds adjacent products into int16) every
expert's weights use the pair-safe levels (:func:`~.linear.pair_safe_levels`), so no product pair can saturate;
on a VNNI CPU all 127 levels. A save made with 127 levels and loaded on a saturating CPU is re-quantized
pair-safe on load. With ``per_token`` (``int8_dynamic``'s default ``activation_scales``) each routed token is divided
by its absolute maximum before the kernel and its output row multiplied back, as
:class:`~.per_token.PerTokenInt8Linear` does, so one outlier token does not coarsen the others routed with it.

The fbgemm packed weights live outside the state dict; ``state_dict()`` stores them as plain tensors
(``<p>_int8`` int8 ``[E, out, in]`` and ``<p>_scale`` float64 ``[E, out]``, ``<p>`` the replaced module's
parameter name), so a save is safetensors without pickle and reloads bit for bit.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from slimkit.core.experts import ExpertsLayout
from slimkit.engines.quantization.experts import (
    DOWN,
    FIRST,
    QuantizedExperts,
    layout_from_spec,
    layout_spec,
    replace_experts,
    saved_experts,
)
from slimkit.engines.quantization.int8.linear import SATURATION_SAFE, choose_path, quantize_weight, use_fbgemm
from slimkit.engines.quantization.int8.per_token import token_scales
from slimkit.errors import ConfigError


class Int8Experts(QuantizedExperts):
    """Experts with int8 per-expert, per-channel weights run by fbgemm (see the module doc)."""

    def __init__(self, layout: ExpertsLayout, act_fn: Callable, saturation_safe: bool = False,
                 per_token: bool = False) -> None:
        super().__init__(layout, act_fn)
        self.saturation_safe = bool(saturation_safe)
        self.per_token = bool(per_token)  # one activation scale per routed token, else one per call
        #: re-quantize the loaded weights pair-safe after a load (a 127-level save on a saturating CPU)
        self.requantize_on_load = False
        self._packed: dict[str, list[Any]] = {FIRST: [None] * layout.num_experts, DOWN: [None] * layout.num_experts}

    def set_expert(self, which: str, e: int, qweight: torch.Tensor) -> None:
        """Store expert ``e``'s per-channel ``torch.qint8`` weight ``[out, in]`` of projection ``which``."""
        shape = self.shapes()[which]
        if tuple(qweight.shape) != shape or qweight.dtype != torch.qint8:
            raise ConfigError(f"expert {e} {which}: expected a qint8 {shape} weight, got {qweight.dtype} "
                              f"{tuple(qweight.shape)}.")
        self._packed[which][e] = torch.ops.quantized.linear_prepack(qweight, None)

    def qweight(self, which: str, e: int) -> torch.Tensor:
        """Expert ``e``'s quantized weight of ``which`` (per-channel ``torch.qint8``, unpacked from fbgemm)."""
        packed = self._packed[which][e]
        if packed is None:
            raise ConfigError(f"Int8Experts: expert {e} {which} has no weights yet; load a state dict or quantize.")
        return torch.ops.quantized.linear_unpack(packed)[0]

    def dequantize(self, which: str, e: int) -> torch.Tensor:
        """Expert ``e``'s weight of ``which`` as float32 ``[out, in]`` (int8 codes times their scales)."""
        return self.qweight(which, e).dequantize()

    def project(self, expert: int, which: str, x: torch.Tensor) -> torch.Tensor:
        """The fbgemm dynamic int8 matmul of the routed tokens with expert ``expert``'s ``which`` weight."""
        packed = self._packed[which][expert]
        if packed is None:
            raise ConfigError(f"Int8Experts: expert {expert} {which} has no weights; load a state dict or quantize.")
        flat = x.float().contiguous()
        if not self.per_token or flat.shape[0] < 2:  # one token: the call's scale is already its own
            return torch.ops.quantized.linear_dynamic(flat, packed, reduce_range=False).to(x.dtype)
        scale = token_scales(flat)
        return torch.ops.quantized.linear_dynamic(flat / scale, packed, reduce_range=False).mul_(scale).to(x.dtype)

    def macs_label(self) -> str:
        """int8 activations times int8 weights."""
        return "int8"

    def extra_repr(self) -> str:
        """Experts, widths and weight recipe in ``print(model)``."""
        weights = "pair-safe" if self.saturation_safe else "127 levels"
        scales = "per_token" if self.per_token else "per_call"
        return f"{super().extra_repr()}, activation_bits=8, activation_scales={scales}, weights={weights}"

    # ------------------------------------------------------------------------------------------- state dict
    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for which, (out_f, in_f) in self.shapes().items():
            key = f"{prefix}{self.buffer_prefix(which)}"
            if any(p is None for p in self._packed[which]):  # empty (replayed, not loaded yet): shapes only
                e = self.num_experts
                destination[f"{key}_int8"] = torch.empty(e, out_f, in_f, dtype=torch.int8, device="meta")
                destination[f"{key}_scale"] = torch.empty(e, out_f, dtype=torch.float64, device="meta")
                continue
            weights = [self.qweight(which, e) for e in range(self.num_experts)]
            destination[f"{key}_int8"] = torch.stack([w.int_repr() for w in weights])
            destination[f"{key}_scale"] = torch.stack([w.q_per_channel_scales().double() for w in weights])

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list, unexpected_keys: list, error_msgs: list) -> None:
        for which in (FIRST, DOWN):
            keys = (f"{prefix}{self.buffer_prefix(which)}_int8", f"{prefix}{self.buffer_prefix(which)}_scale")
            if not all(k in state_dict for k in keys):
                missing_keys.extend(k for k in keys if k not in state_dict)
                continue
            codes, scales = (state_dict.pop(k) for k in keys)
            if codes.shape[0] != self.num_experts or codes.dtype != torch.int8:
                error_msgs.append(f"{keys[0]}: expected int8 with {self.num_experts} experts, got {codes.dtype} "
                                  f"{tuple(codes.shape)}")
                continue
            for e in range(self.num_experts):
                scale = scales[e].double()
                weight = torch._make_per_channel_quantized_tensor(
                    codes[e].contiguous(), scale, torch.zeros(scale.shape[0], dtype=torch.long), 0)
                if self.requantize_on_load:
                    weight = quantize_weight(weight.dequantize(), True)
                self.set_expert(which, e, weight)
        if self.requantize_on_load:
            self.saturation_safe, self.requantize_on_load = True, False
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def __deepcopy__(self, memo: dict) -> Int8Experts:
        new = Int8Experts(self.layout, copy.deepcopy(self.act_fn, memo), self.saturation_safe, self.per_token)
        new.requantize_on_load = self.requantize_on_load
        new.train(self.training)
        for which in (FIRST, DOWN):
            for e in range(self.num_experts):
                if self._packed[which][e] is not None:
                    new.set_expert(which, e, self.qweight(which, e))
        memo[id(self)] = new
        return new

    # ------------------------------------------------------------------------------------------- replay
    def spec(self) -> dict[str, Any]:
        """JSON-able description from which :meth:`from_spec` rebuilds an empty module."""
        return {**layout_spec(self.layout), "saturation_safe": self.saturation_safe, "per_token": self.per_token}

    @classmethod
    def from_spec(cls, spec: dict[str, Any], act_fn: Callable) -> Int8Experts:
        """An empty module for a strict state-dict load; re-quantizes pair-safe on load where this CPU needs it."""
        # saves made before per-token scales ran per call
        module = cls(layout_from_spec(spec), act_fn, bool(spec.get("saturation_safe", False)),
                     bool(spec.get("per_token", False)))
        module.requantize_on_load = not module.saturation_safe and choose_path() == SATURATION_SAFE
        return module


@torch.no_grad()
def quantize_experts_int8(model: nn.Module, names: list[str], saturation_safe: bool | None = None,
                          per_token: bool = False) -> dict[str, dict]:
    """Swap the named experts modules for :class:`Int8Experts` in place; returns their replay specs.

    ``saturation_safe`` None follows :func:`~.linear.choose_path` (pair-safe weights where this CPU saturates);
    ``per_token`` gives each routed token its own activation scale.
    """
    use_fbgemm()
    safe = choose_path(saturation_safe) == SATURATION_SAFE
    return {name: replace_experts(model, name,
                                  lambda module, layout: Int8Experts(layout, module.act_fn, safe, per_token),
                                  lambda w: (quantize_weight(w, safe),)) for name in names}


def replay_int8_experts(model: nn.Module, specs: dict[str, dict]) -> nn.Module:
    """Swap each named experts module for an empty :class:`Int8Experts`; the saved int8 weights then load."""
    use_fbgemm()
    for name, spec, old in saved_experts(model, specs):
        model.set_submodule(name, Int8Experts.from_spec(spec, old.act_fn))
    return model
