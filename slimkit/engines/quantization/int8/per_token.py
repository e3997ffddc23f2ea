"""Per-token activation scales for fbgemm's dynamic int8 Linear: each row of the input gets its own scale.

fbgemm's dynamic Linear quantizes its whole input with one scale (the min/max of the batch), so one outlier
token or channel coarsens every other token's codes: on SmolLM2-135M that alone takes perplexity from 16.1 to
43.7. Dividing each token by its own absolute maximum first puts every token on the same [-1, 1] range; fbgemm's
one scale is then a per-token scale, and multiplying each output row by its token's maximum undoes the division
(``W (x / s) s = W x``; the bias, added by fbgemm, is taken out before the multiplication and put back after).
The int8 GEMM is fbgemm's (VNNI / AMX / AVX2 as the CPU has); the extra work is a row max, a division and a
multiply-add, linear in the activations; a single token (decoding) skips them, fbgemm's per-call scale being
already that token's. Activations use 8 bits where the fbgemm probe finds the kernel exact
and 7 bits (``reduce_range``) where it saturates (AVX2 without VNNI), decided on the machine that runs the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.ao.nn.quantized.dynamic as nnqd

from slimkit.engines.quantization.int8.linear import Int8Linear, full_range_is_exact

_TINY = 1e-12  # an all-zero token keeps scale _TINY: its codes are zeros, its output the bias


def token_scales(x: torch.Tensor) -> torch.Tensor:
    """Each row's absolute maximum ``[..., 1]`` (at least ``_TINY``): the per-token activation scales of ``x``."""
    # two reductions cost less than abs() + amax or aminmax (measured on [4096, 1536]: 4.4 vs 9.9 / 24 ms)
    return torch.maximum(x.amax(dim=-1, keepdim=True), x.amin(dim=-1, keepdim=True).neg_()).clamp_min_(_TINY)


class PerTokenInt8Linear(Int8Linear):
    """fbgemm dynamic int8 ``Linear`` whose activations are quantized with one scale per token (input row).

    Its state dict is torch.ao's dynamic ``Linear``'s (packed int8 weight and bias): the weights are not touched.
    """

    def __init__(self, in_features: int, out_features: int, bias_: bool = True, reduce_range: bool = False,
                 saturation_safe: bool = False) -> None:
        super().__init__(in_features, out_features, bias_, reduce_range, saturation_safe)
        self.float_bias: torch.Tensor | None = None  # the packed bias, unpacked once (a copy, not saved)
        self.register_load_state_dict_post_hook(_refresh_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scale each token to [-1, 1], run fbgemm's int8 GEMM, scale each output row back; ``x``'s dtype."""
        # fbgemm's int8 GEMM has no gradient (as torch.ao's dynamic Linear): the input's graph is not followed
        dtype, x = x.dtype, x.detach().float()
        packed = self._packed_params._packed_params
        if x.numel() == x.shape[-1]:  # one token (decoding): fbgemm's scale of the call is already its own
            return torch.ops.quantized.linear_dynamic(x, packed, reduce_range=self.reduce_range).to(dtype)
        scale = token_scales(x)
        # a division (not a multiply by 1 / scale) leaves each row's extreme at exactly +-1: fbgemm's range of the
        # call is then exactly [-1, 1] (SmolLM2-135M perplexity 16.61; the reciprocal's rounding gave 16.79)
        y = torch.ops.quantized.linear_dynamic(x / scale, packed, reduce_range=self.reduce_range)
        if self.float_bias is None:
            return y.mul_(scale).to(dtype)
        return torch.addcmul(self.float_bias, y.sub_(self.float_bias), scale, out=y).to(dtype)

    def extra_repr(self) -> str:
        """torch.ao's description, the activation bits and the per-token scales."""
        return f"{super().extra_repr()}, activation_scales=per_token"

    @classmethod
    def from_dynamic(cls, module: nnqd.Linear) -> PerTokenInt8Linear:
        """The same packed weights as torch.ao's dynamic ``module``, with per-token activation scales."""
        bias = module.bias()
        new = cls(module.in_features, module.out_features, bias is not None, reduce_range=not full_range_is_exact())
        new._packed_params = module._packed_params
        new.scale, new.zero_point = module.scale, module.zero_point
        new.float_bias = None if bias is None else bias.detach().float()
        return new.train(module.training)


def _refresh_bias(module: PerTokenInt8Linear, incompatible_keys: Any) -> None:
    """After a state dict loaded into the packed params: unpack the bias again."""
    bias = module.bias()
    module.float_bias = None if bias is None else bias.detach().float()


def per_token_activations(model: torch.nn.Module, names: Iterable[str]) -> torch.nn.Module:
    """Swap the named torch.ao dynamic int8 ``Linear`` modules of ``model`` for :class:`PerTokenInt8Linear`."""
    for name in names:
        module = model.get_submodule(name)
        if not isinstance(module, nnqd.Linear):
            raise TypeError(f"{name} is a {type(module).__name__}, not a torch.ao dynamic int8 Linear.")
        model.set_submodule(name, PerTokenInt8Linear.from_dynamic(module))
    return model
