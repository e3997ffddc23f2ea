"""Tester of Pruna's c_whisper: CTranslate2's Whisper decodes the tokens the original's greedy generate gives."""

from __future__ import annotations

import torch

from slimkit.algorithms.compilation.c_whisper import CT2Whisper
from tests.algorithms.models import whisper_tokenizer
from tests.algorithms.testers.base import AlgorithmTesterBase

NEW = {"max_new_tokens": 12}


class TestCWhisper(AlgorithmTesterBase):
    algorithm = "c_whisper"
    models = ["tiny_whisper"]
    reject_models = ["tiny_bart", "tiny_llama", "mlp", "not_a_module"]
    hyperparameters = {"n_threads": 1}  # weight_bits: the default, int8
    generate_kwargs = NEW  # the harness compares generated ids: CTranslate2's Whisper gives no logits

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_tokenizer(whisper_tokenizer())

    def post_smash_hook(self, smashed, base, inputs):
        assert isinstance(smashed.model, CT2Whisper)
        state = smashed.applied[-1]["state"]
        weights = sum(p.numel() * 4 for p in base.parameters())  # the position tables stay float in this tiny model
        assert state["quantization"] == "int8" and state["bytes"] < 0.6 * weights
        with torch.no_grad():
            ours, theirs = smashed.generate(**inputs, **NEW), base.generate(**inputs, do_sample=False, **NEW)
        assert ours.shape == theirs.shape == (2, 12)
        assert (ours == theirs).float().mean() >= 0.5  # int8: most tokens agree (greedy paths may part late)
        assert torch.equal(ours[:, :3], theirs[:, :3])


class TestCWhisperFloat32(TestCWhisper):
    """weight_bits=32: CTranslate2's float32 Whisper decodes exactly the original's greedy tokens."""

    hyperparameters = {"weight_bits": 32, "n_threads": 1}

    def post_smash_hook(self, smashed, base, inputs):
        assert smashed.applied[-1]["state"]["quantization"] == "float32"
        with torch.no_grad():
            assert torch.equal(smashed.generate(**inputs, max_new_tokens=20),
                               base.generate(**inputs, do_sample=False, max_new_tokens=20))
