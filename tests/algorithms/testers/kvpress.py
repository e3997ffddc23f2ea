"""Testers of Pruna's kvpress: the prompt's KV cache really shrinks by the ratio, and generation still runs."""

from __future__ import annotations

import torch

from tests.algorithms.testers.base import AlgorithmTesterBase

PROMPT = torch.randint(1, 256, (1, 40), generator=torch.Generator().manual_seed(0))


class TestKvpress(AlgorithmTesterBase):
    algorithm = "kvpress"
    models = ["tiny_llama"]
    reject_models = ["tiny_gpt2", "mlp", "not_a_module"]
    hyperparameters = {"press_type": "KnormPress", "compression_ratio": 0.5}
    kept = 20  # of the prompt's 40 tokens

    def post_smash_hook(self, smashed, base, inputs):
        new = {"max_new_tokens": 4, "do_sample": False, "return_dict_in_generate": True}
        prompt = PROMPT.to(inputs["input_ids"].device)  # the CUDA harness runs this hook on the GPU
        ours, theirs = smashed.generate(prompt, **new), base.generate(prompt, **new)
        assert ours.sequences.shape == theirs.sequences.shape == (1, 44)
        # the cache generation ended with: the kept prompt entries plus the 3 new tokens it attended to
        assert theirs.past_key_values.get_seq_length() == 43
        assert ours.past_key_values.get_seq_length() == self.kept + 3
        assert smashed.kv_press.stats() == {"prompt_tokens": 40, "kept_tokens": self.kept, "prefills": 1}
        assert smashed._kvpress_press is smashed.kv_press.press  # Pruna's attribute
        with torch.no_grad():  # forward is untouched: the press acts inside generate only
            assert torch.equal(smashed(**inputs).logits, base(**inputs).logits)


class TestKvpressExpectedAttention(TestKvpress):
    """Pruna's default press at a quarter of the cache removed."""

    hyperparameters = {"compression_ratio": 0.25}
    kept = 30
