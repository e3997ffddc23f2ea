"""int8 CPU engines on fbgemm: dynamic int8 Linear, smoothing, FX static int8, fp32 fallback, AVX2 emulation.

One module per concern:

* :mod:`.linear` -- :class:`Int8Linear`, the CPU probe and the two weight recipes (full range, saturation-safe);
* :mod:`.experts` -- :class:`Int8Experts`, MoE experts with int8 per-expert weights and fbgemm matmuls;
* :mod:`.emulation` -- fbgemm's AVX2 kernel (int16 pair saturation) in plain torch, to measure AVX2 quality;
* :mod:`.smoothing` / :mod:`.smooth` -- SmoothQuant-style folding and the int8_smooth engine;
* :mod:`.static_fx` / :mod:`.static_tune` / :mod:`.static` -- FX static int8 for CNNs and its tuning;
* :mod:`.dynamic` -- torch.ao ``quantize_dynamic`` of Linear layers;
* :mod:`.calibration` / :mod:`.fallback` -- calibration batches and the sensitivity-ranked fp32 fallback.
"""

from slimkit.engines.quantization.int8.calibration import calibration_batches, example_inputs
from slimkit.engines.quantization.int8.emulation import EmulatedAvx2Linear, avx2_int8_matmul, emulate_avx2
from slimkit.engines.quantization.int8.experts import Int8Experts
from slimkit.engines.quantization.int8.linear import (
    FORCE_ENV,
    FULL_RANGE,
    SATURATION_SAFE,
    Int8Linear,
    choose_path,
    cpu_int8_capability,
    full_range_is_exact,
    pair_safe_levels,
    quantize_layers,
)
from slimkit.engines.quantization.int8.smooth import quantize_smooth, replay_smooth
from slimkit.engines.quantization.int8.static import quantize_static, rebuild_static

__all__ = [
    "FORCE_ENV",
    "FULL_RANGE",
    "SATURATION_SAFE",
    "EmulatedAvx2Linear",
    "Int8Experts",
    "Int8Linear",
    "avx2_int8_matmul",
    "calibration_batches",
    "choose_path",
    "cpu_int8_capability",
    "emulate_avx2",
    "example_inputs",
    "full_range_is_exact",
    "pair_safe_levels",
    "quantize_layers",
    "quantize_smooth",
    "quantize_static",
    "rebuild_static",
    "replay_smooth",
]
