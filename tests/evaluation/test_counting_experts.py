"""MACs of MoE models: float experts (grouped_mm, invisible to the FLOP counter) and quantized experts count alike."""

from __future__ import annotations

import copy

import pytest
import torch

from slimkit.engines.quantization.int8.experts import quantize_experts_int8
from slimkit.engines.quantization.lowbit import quantize_model_rtn
from slimkit.evaluation import count_macs, count_macs_by_dtype
from tests.engines.quantization.tiny_moe import experts_of, tiny_moe


@pytest.mark.parametrize("implementation", ["grouped_mm", "eager"])
def test_float_and_quantized_experts_report_the_same_macs(implementation):
    base = tiny_moe("qwen2_moe")
    base.config._experts_implementation = implementation
    inputs = {"input_ids": torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(0))}
    total = count_macs(base, inputs)
    packed, int8 = copy.deepcopy(base), copy.deepcopy(base)
    quantize_model_rtn(packed, 4, 32)
    quantize_experts_int8(int8, list(experts_of(int8)))
    by_packed, by_int8 = count_macs_by_dtype(packed, inputs), count_macs_by_dtype(int8, inputs)
    assert sum(by_packed.values()) == sum(by_int8.values()) == total
    # 8 tokens x top-2 x 2 layers, each pair both projections of a [96, 64] + [64, 48] expert
    assert by_int8["int8"] == 8 * 2 * 2 * (96 * 64 + 64 * 48)
    assert set(by_packed) == {"fp32", "int4 weights"} and by_packed["int4 weights"] > by_int8["int8"]
