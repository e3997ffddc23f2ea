"""slimkit.core.experts: which transformers experts modules slimkit reproduces, why others are refused, routing."""

from __future__ import annotations

import pytest
import torch
import transformers
from transformers.models.aria.modeling_aria import AriaExperts
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
from transformers.models.mixtral.modeling_mixtral import MixtralExperts
from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHExperts
from transformers.models.olmoe.modeling_olmoe import OlmoeExperts
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeExperts
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

from slimkit.core.experts import dense_weights, experts_layout, reference_forward, routed_pairs, unsupported_reason
from slimkit.core.weights import EXPERTS, find_targets

E, H, INTER = 4, 32, 24


def _filled(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    return module


FAMILIES = {
    "mixtral": lambda: MixtralExperts(transformers.MixtralConfig(hidden_size=H, intermediate_size=INTER,
                                                                 num_local_experts=E)),
    "qwen2_moe": lambda: Qwen2MoeExperts(transformers.Qwen2MoeConfig(hidden_size=H, moe_intermediate_size=INTER,
                                                                     num_experts=E)),
    "qwen3_moe": lambda: Qwen3MoeExperts(transformers.Qwen3MoeConfig(hidden_size=H, moe_intermediate_size=INTER,
                                                                     num_experts=E)),
    "olmoe": lambda: OlmoeExperts(transformers.OlmoeConfig(hidden_size=H, intermediate_size=INTER, num_experts=E)),
    "aria (transposed)": lambda: AriaExperts(transformers.AriaTextConfig(hidden_size=H, intermediate_size=INTER,
                                                                         moe_num_experts=E)),
    "nemotron_h (no gate)": lambda: NemotronHExperts(transformers.NemotronHConfig(
        hidden_size=H, moe_intermediate_size=INTER, n_routed_experts=E)),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_supported_families_match_the_reference_forward(family):
    module = _filled(FAMILIES[family]())
    layout = experts_layout(module)
    assert layout is not None and unsupported_reason(module) is None
    assert (layout.num_experts, layout.hidden, layout.intermediate) == (E, H, INTER)
    assert layout.gated == ("no gate" not in family) and layout.transposed == ("transposed" in family)
    first, down = dense_weights(module, layout)
    assert tuple(first.shape) == (E, layout.first_rows, H) and tuple(down.shape) == (E, H, INTER)
    gen = torch.Generator().manual_seed(1)
    x, index, weights = torch.randn(9, H, generator=gen), torch.randint(0, E, (9, 2), generator=gen), torch.rand(9, 2)
    with torch.no_grad():
        expected = module(x, index, weights)
        got = reference_forward(layout, first, down, module.act_fn, x, index, weights)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_gpt_oss_is_refused_naming_biases_layout_and_gate():
    cfg = transformers.GptOssConfig(hidden_size=H, intermediate_size=INTER, num_local_experts=E)
    reason = unsupported_reason(GptOssExperts(cfg))
    assert reason.startswith("unsupported: GptOssExperts has expert biases")
    assert "interleaved gate/up rows" in reason
    assert experts_layout(GptOssExperts(cfg)) is None


class _ScaledExperts(MixtralExperts):
    """Same layout and flags as Mixtral, but a forward that computes something else."""

    def forward(self, hidden_states, top_k_index, top_k_weights):
        return 2.0 * super().forward(hidden_states, top_k_index, top_k_weights)


def test_a_forward_that_differs_is_refused_by_the_probe_and_in_the_targets():
    module = _filled(_ScaledExperts(transformers.MixtralConfig(hidden_size=H, intermediate_size=INTER,
                                                               num_local_experts=E)))
    reason = unsupported_reason(module)
    assert reason.startswith("unsupported: _ScaledExperts.forward is not the standard routed experts computation")
    holder = torch.nn.Module()
    holder.experts = module
    (target,) = find_targets(holder, (EXPERTS,))
    assert target.unsupported == reason and target.numel == E * (2 * INTER * H + H * INTER)


def test_meta_experts_are_trusted_on_structure_alone():
    with torch.device("meta"):
        module = MixtralExperts(transformers.MixtralConfig(hidden_size=H, intermediate_size=INTER, num_local_experts=E))
    assert unsupported_reason(module) is None and experts_layout(module) is not None


def test_wrong_parameter_names_are_named_in_the_reason():
    module = MixtralExperts(transformers.MixtralConfig(hidden_size=H, intermediate_size=INTER, num_local_experts=E))
    module.extra = torch.nn.Parameter(torch.zeros(E, 2, 2))
    assert "holds parameters ['down_proj', 'extra', 'gate_up_proj']" in unsupported_reason(module)


def test_routed_pairs_groups_positions_by_expert_and_skips_sentinels():
    index = torch.tensor([[2, 0], [0, 4], [2, 1]])  # 4 = a sentinel (expert parallelism) with 4 experts
    pairs = routed_pairs(index, 4)
    assert [(e, p.tolist()) for e, p in pairs] == [(0, [1, 2]), (1, [5]), (2, [0, 4])]
    assert [(e, p.tolist()) for e, p in routed_pairs(torch.tensor([[3]]), 4)] == [(3, [0])]
    assert routed_pairs(torch.tensor([[4]]), 4) == []


def test_routed_pairs_is_the_same_for_decode_and_prefill_sizes():
    index = torch.randint(-1, 6, (80, 2), generator=torch.Generator().manual_seed(0))  # -1 and 5: out of range
    large = routed_pairs(index, 5)  # 160 pairs: sorted on the tensor side
    small = [pair for chunk in range(0, 80, 16) for pair in routed_pairs(index[chunk : chunk + 16], 5)]
    assert [e for e, _ in large] == sorted({int(e) for e in index.flatten() if 0 <= e < 5})
    for e, positions in large:
        expected = [p for p in range(160) if int(index.flatten()[p]) == e]
        assert positions.tolist() == expected
        assert sum(len(p) for f, p in small if f == e) == len(expected)
