"""Testers of Pruna's model-structure algorithms: reduce_noe (MoE top-k) and token_merging (ToMe on ViT/DeiT)."""

from __future__ import annotations

import torch

from slimkit.evaluation import fidelity
from tests.algorithms.testers.base import AlgorithmTesterBase


class TestReduceNOE(AlgorithmTesterBase):
    algorithm = "reduce_noe"
    models = ["tiny_mixtral", "tiny_qwen2_moe"]
    reject_models = ["tiny_llama", "mlp", "not_a_module"]
    hyperparameters = {"num_experts_per_token": 1}

    def post_smash_hook(self, smashed, base, inputs):
        model = smashed.model
        assert model.config.num_experts_per_tok == 1 and base.config.num_experts_per_tok == 2
        gates = [m for n, m in model.named_modules() if n.endswith("mlp.gate")]
        assert len(gates) == 2 and all(g.top_k == 1 for g in gates)
        state = smashed.applied[0]["state"]
        assert state["experts_per_token_before"] == 2 and state["experts_per_token"] == 1
        routed: list[torch.Tensor] = []  # the router really picks one expert per token now
        handle = gates[0].register_forward_hook(lambda m, i, o: routed.append(o[-1]))
        with torch.no_grad():
            model(**inputs)
        handle.remove()
        assert routed[0].shape[-1] == 1
        cosine = fidelity(base, smashed, inputs).cosine_mean
        assert 0.5 < cosine < 0.99999  # the outputs changed (fewer experts), and stay related


class TestTokenMerging(AlgorithmTesterBase):
    algorithm = "token_merging"
    models = ["tiny_vit", "tiny_deit"]
    reject_models = ["tiny_bert", "mlp", "not_a_module"]
    hyperparameters = {"r": 4}

    def post_smash_hook(self, smashed, base, inputs):
        with torch.no_grad():
            hidden = smashed.model(inputs, output_hidden_states=True).hidden_states
        first = hidden[0].shape[1]  # 16 patches + class token (+ DeiT's distillation token)
        assert [h.shape[1] for h in hidden] == [first, first - 4, first - 8]
        state = smashed.applied[0]["state"]
        assert state["merged_per_layer"] == [4, 4]
        assert state["protected_tokens"] == first - 16
        assert fidelity(base, smashed, inputs).cosine_mean > 0.99  # logits of the class token stay close
