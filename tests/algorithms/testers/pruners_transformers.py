"""Testers of the channel pruners on transformers: by dimension (mlp, heads, hidden) and the default of all three."""

from __future__ import annotations

from slimkit.evaluation import count_macs, count_parameters
from tests.algorithms.testers.base import AlgorithmTesterBase
from tests.algorithms.testers.pruners import REJECT, _state, check_shrunk


class TestL1FilterHeads(AlgorithmTesterBase):
    algorithm = "l1_filter"
    models = ["tiny_llama"]
    reject_models = REJECT
    hyperparameters = {"sparsity": 0.5, "heads": True, "dims": ["mlp"]}  # the older heads flag adds "heads"

    def post_smash_hook(self, smashed, base, inputs):
        shapes = {}
        for i in range(2):
            layer = f"model.layers.{i}"
            shapes |= {f"{layer}.mlp.gate_proj": (64, 64), f"{layer}.mlp.up_proj": (64, 64),
                       f"{layer}.mlp.down_proj": (64, 64), f"{layer}.self_attn.q_proj": (32, 64),
                       f"{layer}.self_attn.k_proj": (16, 64), f"{layer}.self_attn.v_proj": (16, 64),
                       f"{layer}.self_attn.o_proj": (64, 32)}
        check_shrunk(smashed, base, inputs, shapes, (0.6, 0.7), (0.55, 0.65))
        # per layer: 64 MLP channels x 3 matrices x 64, and one kv group (2 query heads + 1 kv head of 16 dims)
        removed = 2 * (64 * 3 * 64 + (32 + 16 + 16) * 64 + 64 * 32)
        assert count_parameters(smashed.model) == count_parameters(base) - removed
        kept = _state(smashed)["kept_channels"]
        att = kept["model.layers.0.self_attn"]
        assert len(att["kv_heads"]) == 1 and len(att["heads"]) == 2
        out = smashed.model.generate(**inputs, max_new_tokens=2, do_sample=False)  # kv cache with fewer heads
        assert out.shape == (inputs["input_ids"].shape[0], inputs["input_ids"].shape[1] + 2)


class TestL2Filter(AlgorithmTesterBase):
    algorithm = "l2_filter"
    models = ["tiny_bert"]
    reject_models = REJECT
    hyperparameters = {"sparsity": 0.5, "dims": ["mlp"]}  # the MLP channels (and the pooler's) only

    def post_smash_hook(self, smashed, base, inputs):
        shapes = {"bert.pooler.dense": (32, 64), "classifier": (2, 32)}
        for i in range(2):
            shapes |= {f"bert.encoder.layer.{i}.intermediate.dense": (64, 64),
                       f"bert.encoder.layer.{i}.output.dense": (64, 64)}
        check_shrunk(smashed, base, inputs, shapes, (0.78, 0.82), (0.7, 0.8))
        removed = 2 * (64 * 64 + 64 + 64 * 64) + (32 * 64 + 32 + 32 * 2)
        assert count_parameters(smashed.model) == count_parameters(base) - removed
        ffn = base.bert.encoder.layer[0].intermediate.dense.weight.norm(dim=1)  # the 64 largest-L2 rows stay
        kept = _state(smashed)["kept_channels"]["bert.encoder.layer.0.intermediate.dense"]["out"]
        assert kept == sorted(ffn.argsort()[64:].tolist())


class TestL2FilterHeads(AlgorithmTesterBase):
    algorithm = "l2_filter"
    models = ["tiny_bert"]
    reject_models = REJECT
    hyperparameters = {"sparsity": 0.5, "dims": ["mlp", "heads"]}

    def post_smash_hook(self, smashed, base, inputs):
        for i in range(2):
            att = smashed.model.bert.encoder.layer[i].attention
            assert (att.self.num_attention_heads, att.self.all_head_size) == (2, 32)
            assert att.self.query.out_features == 32 and att.output.dense.in_features == 32
        heads = 2 * (3 * (32 * 64 + 32) + 32 * 64)  # 2 of 4 heads per layer: q/k/v rows + biases, o columns
        ffn = 2 * (64 * 64 + 64 + 64 * 64) + (32 * 64 + 32 + 32 * 2)
        assert count_parameters(smashed.model) == count_parameters(base) - heads - ffn
        assert count_macs(smashed.model, inputs) < 0.6 * count_macs(base, inputs)


class TestL1FilterDefaultDims(AlgorithmTesterBase):
    """The default cuts MLP channels, whole heads and the hidden width: a 50% GPT-2 keeps about a third."""

    algorithm = "l1_filter"
    models = ["tiny_gpt2", "tiny_vit"]
    reject_models = REJECT
    hyperparameters = {"sparsity": 0.5}

    def post_smash_hook(self, smashed, base, inputs):
        config = smashed.model.config
        assert count_parameters(smashed.model) <= 0.4 * count_parameters(base)
        assert config.hidden_size == base.config.hidden_size // 2
        assert config.num_attention_heads == base.config.num_attention_heads // 2
        if base.slimkit_zoo_name == "tiny_gpt2":  # Conv1D layers, the tied head stays tied
            block = smashed.model.transformer.h[0]
            assert block.attn.c_attn.weight.shape == (config.n_embd, 3 * config.n_embd)
            assert smashed.model.lm_head.weight is smashed.model.transformer.wte.weight
        else:
            assert smashed.model.vit.embeddings.cls_token.shape[-1] == config.hidden_size
        assert count_macs(smashed.model, inputs) < 0.4 * count_macs(base, inputs)
