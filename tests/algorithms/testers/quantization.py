from __future__ import annotations

import torch

from slimkit.evaluation import fidelity, size_on_disk
from tests.algorithms.testers.base import AlgorithmTesterBase


def _is_dynamic_int8(module: torch.nn.Module) -> bool:
    return type(module).__module__.startswith("torch.ao.nn.quantized.dynamic") and type(module).__name__ == "Linear"


class TestInt8Dynamic(AlgorithmTesterBase):
    algorithm = "int8_dynamic"
    models = ["mlp", "tiny_bert", "tiny_llama"]
    reject_models = ["conv_only", "not_a_module"]
    hyperparameters = {"per_channel": True, "exclude": ["*lm_head"]}

    def post_smash_hook(self, smashed, base, inputs):
        linears = [n for n, m in base.named_modules() if type(m) is torch.nn.Linear and not n.endswith("lm_head")]
        quantized = [n for n, m in smashed.model.named_modules() if _is_dynamic_int8(m)]
        assert sorted(quantized) == sorted(linears)
        assert not any(_is_dynamic_int8(m) for n, m in smashed.model.named_modules() if n.endswith("lm_head"))
        assert smashed.applied[0]["state"]["quantized_layers"] == len(linears)
        assert size_on_disk(smashed) < 0.6 * size_on_disk(base)
        assert fidelity(base, smashed, inputs).cosine_mean > 0.98


class TestHalf(AlgorithmTesterBase):
    algorithm = "half"
    models = ["mlp", "resnet_tiny", "tiny_gpt2"]
    reject_models = ["no_weights", "not_a_module"]
    hyperparameters = {"dtype": "bfloat16"}

    def post_smash_hook(self, smashed, base, inputs):
        dtypes = {p.dtype for p in smashed.parameters() if p.is_floating_point()}
        assert dtypes == {torch.bfloat16}
        assert size_on_disk(smashed) < 0.6 * size_on_disk(base)
        assert fidelity(base, smashed, inputs).cosine_mean > 0.99


class TestHalfFloat16(TestHalf):
    models = ["mlp"]
    hyperparameters = {"dtype": "float16"}

    def post_smash_hook(self, smashed, base, inputs):
        assert {p.dtype for p in smashed.parameters()} == {torch.float16}
        assert fidelity(base, smashed, inputs).cosine_mean > 0.999
