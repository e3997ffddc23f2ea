from __future__ import annotations

import threading

import torch

from slimkit.utils import main_tensor, model_device, move_inputs, run_model
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


def _concurrently(model, calls):
    """Run ``model(**call)`` for every call in its own thread (all released at once); return the outputs."""
    barrier, out = threading.Barrier(len(calls)), [None] * len(calls)

    def go(i):
        barrier.wait()
        with torch.no_grad():
            out[i] = main_tensor(run_model(model, calls[i]))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


class TestDynamicBatch(AlgorithmTesterBase):
    algorithm = "dynamic_batch"
    models = ["tiny_bert", "mlp"]
    reject_models = ["not_a_module"]
    hyperparameters = {"max_wait_ms": 200.0, "max_batch_size": 16}
    reload_atol = 1e-6

    def post_smash_hook(self, smashed, base, inputs):
        if isinstance(inputs, dict):  # 8 callers, token inputs of lengths 4..11, one row each
            calls = [{k: v[:1, : 4 + i] for k, v in inputs.items()} for i in range(8)]
        else:
            calls = [inputs[i % inputs.shape[0]].unsqueeze(0) * (i + 1) for i in range(8)]
        before = smashed.dynamic_batcher.stats()["batches"]
        outputs = _concurrently(smashed, calls)
        with torch.no_grad():
            for call, got in zip(calls, outputs, strict=True):
                expected = main_tensor(run_model(base, move_inputs(call, model_device(base))))
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
        assert smashed.dynamic_batcher.stats()["batches"] - before < len(calls)


class TestDynamicBatchPacked(AlgorithmTesterBase):
    """``pack="on"``: a sentence encoder's concurrent callers run as padding-free packed sequences."""

    algorithm = "dynamic_batch"
    models = ["tiny_sentence_encoder"]
    reject_models = ["not_a_module"]
    hyperparameters = {"max_wait_ms": 200.0, "max_batch_size": 16, "pack": "on", "max_pack_tokens": 40}
    reload_atol = 1e-6

    def post_smash_hook(self, smashed, base, inputs):
        g = torch.Generator().manual_seed(5)  # 8 callers of 3..38 tokens; one sends 2 rows, right-padded
        calls = [{"input_ids": torch.randint(1, 256, (1, 3 + 5 * i), generator=g)} for i in range(8)]
        for call in calls:
            call["attention_mask"] = torch.ones_like(call["input_ids"])
        calls[2] = inputs
        batcher = smashed.dynamic_batcher
        assert (batcher.pack, batcher.max_pack_tokens) == ("on", 40)
        before = batcher.stats()
        outputs = _concurrently(smashed, calls)
        with torch.no_grad():
            for call, got in zip(calls, outputs, strict=True):
                torch.testing.assert_close(got, base(**move_inputs(call, model_device(base))), atol=2e-6, rtol=0)
        after = batcher.stats()
        assert after["packed_forwards"] > before["packed_forwards"]
        assert after["batches"] - before["batches"] < len(calls)


class TestPrefixCache(AlgorithmTesterBase):
    algorithm = "prefix_cache"
    models = ["tiny_llama", "tiny_gpt2"]
    reject_models = ["tiny_bert", "mlp", "not_a_module"]
    hyperparameters = {"max_prefixes": 4, "min_prefix_tokens": 2}

    def post_smash_hook(self, smashed, base, inputs):
        system = inputs["input_ids"][:1, :10]
        prompts = [torch.cat([system, inputs["input_ids"][i : i + 1, 10 : 12 + 2 * i]], dim=1) for i in range(2)]
        prompts.append(prompts[0])
        with torch.no_grad():
            for prompt in prompts:
                kwargs = {"attention_mask": torch.ones_like(prompt), "max_new_tokens": 8, "do_sample": False,
                          "pad_token_id": 0}
                assert torch.equal(smashed.generate(prompt, **kwargs), base.generate(prompt, **kwargs))
        stats = smashed.prefix_cache.stats()
        assert stats["hits"] == 2 and stats["misses"] == 1
        assert stats["reused_tokens"] == 10 + prompts[0].shape[1] - 1


class TestStepCache(AlgorithmTesterBase):
    algorithm = "step_cache"
    models = ["tiny_unet", "tiny_cond_unet"]
    reject_models = ["tiny_bert", "mlp", "not_a_module"]
    hyperparameters = {"interval": 3}

    def post_smash_hook(self, smashed, base, inputs):
        """A 7-step loop with falling timesteps: full steps 0, 3, 6 are exact, the 4 between skip the deep blocks."""
        cache = smashed.step_cache
        blocks = [m for m in smashed.modules() if hasattr(m, "step_cache_block")]
        assert len(blocks) == 5 and cache.deep_blocks == ["down_blocks.1", "down_blocks.2", "mid_block", "up_blocks.0",
                                                          "up_blocks.1"]
        before, calls = cache.stats(), cache.block_calls
        x = inputs["sample"]
        with torch.no_grad():
            for step, t in enumerate(range(900, 200, -100)):
                kwargs = {**inputs, "sample": x, "timestep": torch.tensor(t)}
                got, want = smashed(**kwargs).sample, base(**kwargs).sample
                if step % 3 == 0:
                    assert torch.equal(got, want)
                else:
                    assert got.shape == want.shape and torch.isfinite(got).all() and not torch.equal(got, want)
                x = x - 0.05 * want
            again = {**inputs, "timestep": torch.tensor(900)}  # the timestep went up: a new run, in full
            assert torch.equal(smashed(**again).sample, base(**again).sample)
        after = cache.stats()
        assert after["full_steps"] - before["full_steps"] == 4 and after["cached_steps"] - before["cached_steps"] == 4
        assert cache.block_calls - calls == 4 * 5  # the 5 deep blocks ran on the 4 full steps only
