"""Low-bit weight-only quantization for language models: weights really stored packed, dequantised on the fly.

- :mod:`.packing`: exact pack/unpack of 2/3/4/8-bit codes into uint8.
- :class:`PackedLinear`: packed codes + float16 per-group scales/zeros as buffers (no fp32 weight kept).
- :class:`PackedExperts`: a transformers MoE experts module with each expert packed the same way
  (:mod:`.experts`; quantized per expert by :mod:`.experts_quantize`).
- Quantizers: :func:`quantize_rtn` (round to nearest), :func:`quantize_hqq` (half-quadratic, data-free),
  :func:`quantize_gptq` (Hessian-based error compensation), AWQ (:func:`search_scale`, activation-aware scales),
  and model-level ``quantize_model_*`` functions that swap layers in place and return replay specs.
- :func:`run_blockwise`: the calibration runner that walks transformer blocks one at a time.
"""

from slimkit.engines.quantization.lowbit.awq import ActivationStats, search_scale
from slimkit.engines.quantization.lowbit.calibration import calibration_ids, find_blocks, run_blockwise
from slimkit.engines.quantization.lowbit.experts import PackedExperts
from slimkit.engines.quantization.lowbit.gptq import HessianAccumulator, quantize_gptq
from slimkit.engines.quantization.lowbit.hqq import quantize_hqq
from slimkit.engines.quantization.lowbit.layers import replay_layers, select_layers
from slimkit.engines.quantization.lowbit.linear import PackedLinear
from slimkit.engines.quantization.lowbit.packing import SUPPORTED_BITS, pack, packed_length, unpack
from slimkit.engines.quantization.lowbit.quantize import (
    quantize_model_awq,
    quantize_model_gptq,
    quantize_model_hqq,
    quantize_model_rtn,
)
from slimkit.engines.quantization.lowbit.rtn import fake_quantize, quantize_rtn

__all__ = [
    "ActivationStats",
    "SUPPORTED_BITS",
    "HessianAccumulator",
    "PackedExperts",
    "PackedLinear",
    "calibration_ids",
    "fake_quantize",
    "find_blocks",
    "pack",
    "packed_length",
    "quantize_gptq",
    "quantize_hqq",
    "quantize_model_awq",
    "quantize_model_gptq",
    "quantize_model_hqq",
    "quantize_model_rtn",
    "quantize_rtn",
    "replay_layers",
    "run_blockwise",
    "search_scale",
    "select_layers",
    "unpack",
]
