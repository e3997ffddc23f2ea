from __future__ import annotations

import torch
import torch.ao.nn.quantized.dynamic as nnqd

from slimkit.core.weights import DENSE, find_targets, select
from slimkit.engines.quantization.int8.per_token import PerTokenInt8Linear
from slimkit.evaluation import count_macs, count_macs_by_dtype, fidelity, size_on_disk
from tests.algorithms.testers.base import AlgorithmTesterBase


def _is_dynamic_int8(module: torch.nn.Module) -> bool:
    return isinstance(module, nnqd.Linear)  # torch.ao's (per-tensor activations) or PerTokenInt8Linear


class TestInt8Dynamic(AlgorithmTesterBase):
    algorithm = "int8_dynamic"
    models = ["mlp", "tiny_bert", "tiny_llama", "tiny_gpt2"]  # tiny_gpt2: transformers Conv1D layers
    reject_models = ["conv_only", "not_a_module"]
    hyperparameters = {"per_channel": True, "exclude": ["*lm_head"]}

    def post_smash_hook(self, smashed, base, inputs):
        dense = [t.name for t in select(find_targets(base), DENSE) if not t.name.endswith("lm_head")]
        quantized = [n for n, m in smashed.model.named_modules() if _is_dynamic_int8(m)]
        assert sorted(quantized) == sorted(dense) and dense
        assert not any(_is_dynamic_int8(m) for n, m in smashed.model.named_modules() if n.endswith("lm_head"))
        state = smashed.applied[0]["state"]
        assert state["quantized_layers"] == len(dense) and state["coverage"]["share_not_excluded"] == 1.0
        assert all(x["reason"].startswith("excluded by the user's pattern") for x in state["coverage"]["left"])
        assert size_on_disk(smashed) < 0.6 * size_on_disk(base)
        assert fidelity(base, smashed, inputs).cosine_mean > 0.98
        macs = count_macs_by_dtype(smashed, inputs)  # int8 MACs are MACs: the total is the fp32 model's
        assert macs.get("int8", 0) > 0 and sum(macs.values()) == count_macs(base, inputs)
        per_token = self.hyperparameters.get("activation_scales", "per_token") == "per_token"
        assert state["activation_scales"] == ("per_token" if per_token else "per_tensor")
        kinds = {type(m) for n, m in smashed.model.named_modules() if n in quantized}
        assert kinds == ({PerTokenInt8Linear} if per_token else {nnqd.Linear})


class TestInt8DynamicPerTensor(TestInt8Dynamic):
    """torch.ao's own dynamic Linear: one activation scale per call."""

    models = ["tiny_llama"]
    hyperparameters = {"per_channel": True, "exclude": ["*lm_head"], "activation_scales": "per_tensor"}
    marks = ["slow"]  # the fast tier checks the per-tensor replay in tests/algorithms/test_pruna_torch_dynamic.py


class TestHalf(AlgorithmTesterBase):
    algorithm = "half"
    models = ["mlp", "resnet_tiny", "tiny_gpt2"]
    reject_models = ["no_weights", "not_a_module"]
    hyperparameters = {"dtype": "bfloat16"}

    def post_smash_hook(self, smashed, base, inputs):
        dtypes = {p.dtype for p in smashed.parameters() if p.is_floating_point()}
        assert dtypes == {torch.bfloat16}
        assert smashed.coverage["half"]["share"] == 1.0
        assert size_on_disk(smashed) < 0.6 * size_on_disk(base)
        assert fidelity(base, smashed, inputs).cosine_mean > 0.99


class TestHalfFloat16(TestHalf):
    models = ["mlp"]
    hyperparameters = {"dtype": "float16"}

    def post_smash_hook(self, smashed, base, inputs):
        assert {p.dtype for p in smashed.parameters()} == {torch.float16}
        assert fidelity(base, smashed, inputs).cosine_mean > 0.999
