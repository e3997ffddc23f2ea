from __future__ import annotations

import copy

import pytest
import torch

from slimkit import zoo
from slimkit.engines.quantization.int8.linear import SATURATION_SAFE, choose_path
from slimkit.engines.quantization.int8.smoothing import (
    FoldGroup,
    choose_alpha,
    collect_statistics,
    discover_groups,
    fold,
    int8_error,
    verify_groups,
)


def _groups(name: str):
    model, inputs = zoo.load(name)
    linears = [n for n, m in model.named_modules() if type(m) is torch.nn.Linear]
    proposed = discover_groups(model, linears, inputs)
    return model, inputs, proposed, verify_groups(model, proposed, inputs)


def test_post_ln_bert_folds_only_value_into_attention_output():
    model, inputs, proposed, kept = _groups("tiny_bert")
    # LayerNorm producers were proposed (Q/K/V read the previous LayerNorm) but their outputs also feed a
    # residual branch, so folding there would change the model: verification must reject every one of them
    assert any("LayerNorm" in g.producer for g in proposed)
    assert [(g.producer, g.consumers) for g in kept] == [
        (f"bert.encoder.layer.{i}.attention.self.value", [f"bert.encoder.layer.{i}.attention.output.dense"])
        for i in range(2)
    ]


def test_pre_norm_llama_folds_into_rmsnorms_and_up_projection():
    _, _, _, kept = _groups("tiny_llama")
    layer0 = {g.producer: g.consumers for g in kept if ".layers.0." in g.producer}
    p = "model.layers.0."
    assert layer0 == {
        p + "input_layernorm": [p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"],
        p + "post_attention_layernorm": [p + "mlp.gate_proj", p + "mlp.up_proj"],
        p + "mlp.up_proj": [p + "mlp.down_proj"],  # down(act(gate) * up) is linear in up's output
    }
    # v_proj -> o_proj is not proposed: with grouped-query attention their widths differ (32 vs 64)


def test_fold_is_exact_in_fp32_for_verified_groups_and_changes_rejected_ones():
    model, inputs, proposed, kept = _groups("tiny_bert")
    with torch.no_grad():
        ref = model(**inputs).logits
        smoothed = copy.deepcopy(model)
        for group in kept:
            fold(smoothed, group, torch.rand(64) * 4 + 0.25)
        torch.testing.assert_close(smoothed(**inputs).logits, ref, atol=1e-5, rtol=1e-4)
        bad = next(g for g in proposed if "LayerNorm" in g.producer)
        broken = copy.deepcopy(model)
        fold(broken, bad, torch.rand(64) * 4 + 0.25)
        assert (broken(**inputs).logits - ref).abs().max() > 1e-3


# the recipe this CPU runs (full range on VNNI/AMX, saturation-safe on AVX2), and the saturation-safe one everywhere
RECIPES = pytest.mark.parametrize("safe", [choose_path() == SATURATION_SAFE, True], ids=["this_cpu", "safe"])


@RECIPES
def test_choose_alpha_smooths_outlier_channels(safe):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(64), torch.nn.Linear(64, 32))
    data = torch.randn(64, 8, 64)
    data[..., :3] *= 40  # LLM-style outlier channels
    group = FoldGroup(["1"], producer="0")
    collect_statistics(model, [group], [data])
    alpha, scales = choose_alpha(model, group, [0.3, 0.5, 0.7], reduce_range=False, saturation_safe=safe)
    assert alpha is not None
    assert scales[:3].min() > 2 * scales[3:].max()  # the loud channels are divided the most
    assert int8_error(model, group, scales, False, safe) < 0.5 * int8_error(model, group, None, False, safe)


@RECIPES
def test_choose_alpha_skips_smoothing_that_cannot_help(safe):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LayerNorm(64), torch.nn.Linear(64, 32, bias=False))
    with torch.no_grad():  # every channel has the same range in activations and weights: scales are constant
        model[1].weight.copy_(torch.randn(32, 64).sign() * 0.1)
    group = FoldGroup(["1"], producer="0")
    data = torch.rand(64, 8, 64) * 2 - 1
    data[0, 0] = 1.0  # every channel reaches |x| = 1
    collect_statistics(model, [group], [data])
    assert choose_alpha(model, group, [0.3, 0.5, 0.7], reduce_range=False, saturation_safe=safe) == (None, None)
