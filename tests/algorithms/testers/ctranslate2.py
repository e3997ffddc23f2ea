"""Testers of Pruna's CTranslate2 compilers: the converted model's logits and greedy tokens against the original's."""

from __future__ import annotations

import torch

from slimkit.algorithms.compilation._ctranslate2 import CT2Generator
from slimkit.algorithms.compilation._ctranslate2_seq2seq import CT2Translator
from slimkit.zoo._hf import byte_tokenizer
from tests.algorithms.testers.base import AlgorithmTesterBase


def _fp32_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * 4 for p in model.parameters())


class TestCGenerate(AlgorithmTesterBase):
    algorithm = "c_generate"
    models = ["tiny_llama", "tiny_gpt2", "tiny_opt"]  # Pruna tests c_generate on a tiny OPT
    reject_models = ["mlp", "tiny_bert", "not_a_module"]
    hyperparameters = {"n_threads": 1}  # weight_bits: the default, int8

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_tokenizer(byte_tokenizer())

    def post_smash_hook(self, smashed, base, inputs):
        assert isinstance(smashed.model, CT2Generator) and smashed.generator is smashed.model.generator  # Pruna's
        state = smashed.applied[-1]["state"]
        assert state["quantization"] == "int8" and state["bytes"] < 0.4 * _fp32_bytes(base)
        ids = inputs["input_ids"]
        with torch.no_grad():
            ours, theirs = smashed(ids).logits, base(ids).logits
        cosine = torch.nn.functional.cosine_similarity(ours.flatten(1), theirs.flatten(1)).min()
        assert ours.shape == theirs.shape and cosine > 0.999  # int8 weights with one scale per row
        new = {"max_new_tokens": 8, "attention_mask": torch.ones_like(ids), "pad_token_id": 0}
        with torch.no_grad():
            assert torch.equal(smashed.generate(ids, **new), base.generate(ids, do_sample=False, **new))
        # the serve face's /generate runs the converted model, token for token as the original's greedy search
        prompt = ids[0, :6].tolist()
        from starlette.testclient import TestClient  # serve's extra: a GPU image may lack it

        from slimkit.serve import build_app

        with TestClient(build_app(smashed)) as client:
            answer = client.post("/generate", json={"inputs": [prompt], "max_new_tokens": 5})
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"] == [base.generate(torch.tensor([prompt]), do_sample=False, **{
            **new, "max_new_tokens": 5, "attention_mask": torch.ones(1, 6, dtype=torch.long)})[0, 6:].tolist()]


class TestCGenerateFloat32(TestCGenerate):
    """weight_bits=32: CTranslate2's float32 kernels give the original's logits to rounding."""

    models = ["tiny_llama"]
    hyperparameters = {"weight_bits": 32, "n_threads": 1}

    def post_smash_hook(self, smashed, base, inputs):
        assert smashed.applied[-1]["state"]["quantization"] == "float32"
        with torch.no_grad():
            torch.testing.assert_close(smashed(**inputs).logits, base(**inputs).logits, atol=1e-4, rtol=1e-4)


class TestCTranslate(AlgorithmTesterBase):
    algorithm = "c_translate"
    models = ["tiny_bart"]
    reject_models = ["tiny_llama", "mlp", "not_a_module"]
    hyperparameters = {"n_threads": 1}  # int8

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_tokenizer(byte_tokenizer())

    def post_smash_hook(self, smashed, base, inputs):
        assert isinstance(smashed.model, CT2Translator)
        state = smashed.applied[-1]["state"]  # the float position tables weigh more in this tiny model: 0.42
        assert state["quantization"] == "int8" and state["bytes"] < 0.5 * _fp32_bytes(base)
        with torch.no_grad():
            ours, theirs = smashed(**inputs).logits, base(**inputs).logits
        cosine = torch.nn.functional.cosine_similarity(ours.flatten(1), theirs.flatten(1)).min()
        assert ours.shape == theirs.shape and cosine > 0.999
        new = {"max_new_tokens": 6, "do_sample": False, "num_beams": 1}
        with torch.no_grad():
            assert torch.equal(smashed.generate(inputs["input_ids"], **new),
                               base.generate(inputs["input_ids"], **new))


class TestCTranslateFloat32(TestCTranslate):
    """weight_bits=32: teacher-forced logits equal the original's to rounding."""

    hyperparameters = {"weight_bits": 32, "n_threads": 1}

    def post_smash_hook(self, smashed, base, inputs):
        assert smashed.applied[-1]["state"]["quantization"] == "float32"
        with torch.no_grad():
            torch.testing.assert_close(smashed(**inputs).logits, base(**inputs).logits, atol=1e-5, rtol=1e-5)
