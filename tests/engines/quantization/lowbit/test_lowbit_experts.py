"""PackedExperts: the packed-expert kernel against a dequantized reference, layout, replay and MACs."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from slimkit.core.experts import ExpertsLayout, reference_forward
from slimkit.core.tensors import flatten_state_dict, load_flat_state_dict
from slimkit.engine.base_model import meta_parameters, meta_tensors
from slimkit.engines.quantization.experts import DOWN, FIRST
from slimkit.engines.quantization.lowbit import native, quantize_model_rtn, quantize_rtn
from slimkit.engines.quantization.lowbit.experts import PackedExperts, replay_experts
from slimkit.engines.quantization.lowbit.experts_quantize import quantize_experts_rtn
from tests.engines.quantization.tiny_moe import experts_of, tiny_moe


def _packed(bits: int, gated: bool = True, group: int = 16, seed: int = 0) -> PackedExperts:
    layout = ExpertsLayout(4, 48, 40, gated)
    module = PackedExperts(layout, torch.nn.SiLU(), bits, group)
    gen = torch.Generator().manual_seed(seed)
    for which, (out_f, in_f) in module.shapes().items():
        for e in range(layout.num_experts):
            module.set_expert(which, e, *quantize_rtn(torch.randn(out_f, in_f, generator=gen), bits, group))
    return module


def _reference(module: PackedExperts, x, index, weights):
    first = torch.stack([module.dequantize(FIRST, e) for e in range(module.num_experts)])
    down = torch.stack([module.dequantize(DOWN, e) for e in range(module.num_experts)])
    return reference_forward(module.layout, first, down, module.act_fn, x, index, weights)


def _routing(tokens: int, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(tokens, 48, generator=gen), torch.randint(0, 4, (tokens, 2), generator=gen),
            torch.rand(tokens, 2, generator=gen))


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("tokens", [1, 5, 40])  # decode (kernel on the expert's slice), short batch, prefill
def test_kernel_equals_the_dequantized_reference(bits, tokens):
    module = _packed(bits)
    x, index, weights = _routing(tokens)
    with torch.no_grad():
        got = module(x, index, weights)
        module.use_kernel = False
        plain = module(x, index, weights)
    expected = _reference(module, x, index, weights)
    scale = float(expected.abs().max())
    assert float((got - expected).abs().max()) < 1e-5 * scale  # float32 summation order only
    assert float((plain - expected).abs().max()) < 1e-5 * scale


def test_the_kernel_reads_each_expert_in_place():
    lib = native.kernel()
    if lib is None:
        pytest.skip("the C kernel cannot be built here (no compiler or no AVX2); the torch path is tested above")
    module = _packed(4)
    calls = []

    class Spy:  # the kernel library, recording the address of the packed weight each call reads
        def __getattr__(self, name):
            return getattr(lib, name)

        def slimkit_lowbit_matmul(self, *args):
            calls.append(args[3])
            return lib.slimkit_lowbit_matmul(*args)

    native._STATE["active"] = (Spy(),)
    try:
        with torch.no_grad():
            module(torch.randn(1, 48), torch.tensor([[2, 3]]), torch.tensor([[0.5, 0.5]]))
    finally:
        native._STATE.pop("active", None)
    first, down = module.packed(FIRST)[0], module.packed(DOWN)[0]
    assert calls == [first.data_ptr() + 2 * first.stride(0), down.data_ptr() + 2 * down.stride(0),
                     first.data_ptr() + 3 * first.stride(0), down.data_ptr() + 3 * down.stride(0)]


def test_ungated_experts_and_the_input_scale():
    module = PackedExperts(ExpertsLayout(3, 32, 24, False), torch.nn.GELU(), 4, 16, input_scale=(FIRST, DOWN))
    gen = torch.Generator().manual_seed(0)
    for which, (out_f, in_f) in module.shapes().items():
        for e in range(3):
            module.set_expert(which, e, *quantize_rtn(torch.randn(out_f, in_f, generator=gen), 4, 16),
                              input_scale=torch.rand(in_f, generator=gen) + 0.5)
    x, index, weights = torch.randn(4, 32), torch.tensor([[0, 1], [2, 0], [1, 2], [0, 2]]), torch.rand(4, 2)
    with torch.no_grad():
        got = module(x, index, weights)
    expected = torch.zeros(4, 32)
    for t in range(4):
        for k in range(2):
            e = int(index[t, k])
            h = module.act_fn((x[t] * module.up_proj_input_scale[e]) @ module.dequantize(FIRST, e).t())
            expected[t] += weights[t, k] * ((h * module.down_proj_input_scale[e]) @ module.dequantize(DOWN, e).t())
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_rtn_experts_replace_the_module_and_keep_its_contract():
    model = tiny_moe("mixtral")
    (name, original), = list(experts_of(model).items())[:1]
    x, index, weights = torch.randn(6, 64), torch.randint(0, 4, (6, 2)), torch.rand(6, 2)
    with torch.no_grad():
        before = original(x, index, weights)
    specs = quantize_experts_rtn(model, [name], bits=8, group_size=16)
    packed = model.get_submodule(name)
    assert isinstance(packed, PackedExperts) and not list(packed.parameters())
    assert specs[name] == {"kind": "experts", "num_experts": 4, "hidden": 64, "intermediate": 96, "gated": True,
                           "bits": 8, "group_size": 16, "input_scale": []}
    assert (packed.num_experts, packed.hidden_dim, packed.intermediate_dim) == (4, 64, 96)
    assert packed.gate_up_proj_qweight.shape == (4, 192, 64) and packed.down_proj_qweight.shape == (4, 64, 96)
    with torch.no_grad():
        after = packed(x, index, weights)
    assert torch.nn.functional.cosine_similarity(after.flatten(), before.flatten(), dim=0) > 0.999


def test_replay_on_a_meta_skeleton_then_assign_load_is_exact():
    model = tiny_moe("qwen2_moe")
    names = list(experts_of(model))
    specs = quantize_experts_rtn(model, names, bits=4, group_size=16)
    with meta_parameters():
        skeleton = tiny_moe("qwen2_moe")
    replay_experts(skeleton, specs)
    assert all(isinstance(skeleton.get_submodule(n), PackedExperts) for n in names)
    state = flatten_state_dict(model)
    assert all(f"{n}.gate_up_proj_qweight" in state and f"{n}.gate_up_proj" not in state for n in names)
    load_flat_state_dict(skeleton, state, assign=True)
    assert meta_tensors(skeleton) == []
    ids = torch.randint(0, 256, (2, 12))
    with torch.no_grad():
        assert torch.equal(skeleton(ids).logits, model(ids).logits)


def test_call_macs_counts_both_projections_of_every_routed_pair():
    module = _packed(4)
    index = torch.tensor([[0, 1], [1, 4], [3, 3]])  # one sentinel (4): 5 routed pairs
    label, macs = module.call_macs((torch.randn(3, 48), index, torch.rand(3, 2)), None)
    assert label == "int4 weights" and macs == 5 * (80 * 48 + 48 * 40)
    layout = module.layout
    first = torch.randn(4, 80, 48)
    down = torch.randn(4, 48, 40)
    with FlopCounterMode(display=False) as counter:
        reference_forward(layout, first, down, torch.nn.SiLU(), torch.randn(3, 48), index, torch.rand(3, 2))
    assert counter.get_total_flops() // 2 == macs


def test_a_model_that_ran_the_kernel_deep_copies():
    model = tiny_moe("mixtral")
    quantize_model_rtn(model, 4, 32)
    ids = torch.randint(0, 256, (1, 4))
    with torch.no_grad():
        out = model(ids).logits  # caches the kernel plans (ctypes handles) on PackedLinear and PackedExperts
        assert torch.equal(copy.deepcopy(model)(ids).logits, out)
