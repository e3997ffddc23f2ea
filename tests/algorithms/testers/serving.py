from __future__ import annotations

import torch

from slimkit.utils import main_tensor, run_model
from tests.algorithms.testers.base import AlgorithmTesterBase


class TestEmbeddingCache(AlgorithmTesterBase):
    algorithm = "embedding_cache"
    models = ["tiny_bert"]
    reject_models = ["mlp", "tiny_gpt2", "not_a_module"]
    hyperparameters = {"max_entries": 64}

    def post_smash_hook(self, smashed, base, inputs):
        cache = smashed.embedding_cache
        n = inputs["input_ids"].shape[0]
        before = cache.stats()
        with torch.no_grad():
            first = main_tensor(run_model(smashed, inputs))
            again = main_tensor(run_model(smashed, inputs))
            expected = main_tensor(run_model(base, inputs))
        after = cache.stats()
        assert torch.equal(first, expected) and torch.equal(again, first)
        assert after["hits"] - before["hits"] >= n and after["entries"] == n
