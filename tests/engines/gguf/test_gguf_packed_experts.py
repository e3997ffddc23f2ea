"""slimkit's PackedExperts (rtn/gptq per-expert packing) written to GGUF as llama.cpp's expert blocks, unchanged."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from slimkit.engines.gguf import export_gguf
from slimkit.engines.quantization.experts import DOWN, FIRST
from slimkit.engines.quantization.lowbit import PackedExperts, quantize_model_rtn
from tests.engines.gguf.conftest import build


@pytest.mark.parametrize(("kind", "sym", "block"), [("mixtral", True, "Q4_0"), ("qwen2_moe", False, "Q4_1")])
def test_packed_experts_go_out_as_their_own_grid(kind, sym, block, tokenizer, tmp_path):
    model = build(kind)
    quantize_model_rtn(model, 4, 32, sym=sym)
    export_gguf(model, tmp_path / "e.gguf", tokenizer)
    tensors = {t.name: t for t in gguf.GGUFReader(tmp_path / "e.gguf").tensors}
    experts = model.model.layers[1].mlp.experts
    assert isinstance(experts, PackedExperts)
    inter = experts.intermediate_dim
    gate_up = np.stack([experts.dequantize(FIRST, e).numpy() for e in range(experts.num_experts)])
    down = np.stack([experts.dequantize(DOWN, e).numpy() for e in range(experts.num_experts)])
    for name, want in (("ffn_gate_exps", gate_up[:, :inter]), ("ffn_up_exps", gate_up[:, inter:]),
                       ("ffn_down_exps", down)):
        t = tensors[f"blk.1.{name}.weight"]
        assert t.tensor_type == getattr(gguf.GGMLQuantizationType, block)
        got = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(want.shape)
        # Q4_1 stores the min -z * s rounded to fp16 (under 0.75 % of a step); Q4_0 is exact
        np.testing.assert_allclose(got, want, rtol=0, atol=0 if sym else 0.0075 * float(np.abs(want).max()))
