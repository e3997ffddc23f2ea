"""Testers of the PERP recoverers: after a 50 % magnitude prune, held-out perplexity falls, and only the named
subset of parameters (norms, biases, head; plus the adapted attention projections for text_to_text_perp) moved."""

from __future__ import annotations

import torch

from slimkit import SmashConfig, smash
from slimkit.evaluation import perplexity
from tests.algorithms.testers.base import AlgorithmTesterBase

_PRUNE = {"pruner": "level", "level_sparsity": 0.5}
_FAST = {"steps": 4, "training_batch_size": 2, "learning_rate": 1e-2, "num_threads": 1}


def _held_out(cfg: SmashConfig, batches: int = 1) -> list:
    return [batch for _, batch in zip(range(batches), cfg.data.test_dataloader(batch_size=1), strict=False)]


class _PERPChecks:
    """Shared checks (a mixin): the pruned-only model is rebuilt; the recovered one beats it on held-out text,
    differs from it in exactly the parameters the recoverer names, and keeps every pruned zero."""

    models = ["tiny_llama"]
    reject_models = ["mlp", "tiny_bert", "not_a_module"]
    extra_config = _PRUNE
    #: parameter name suffixes of the adapted layers (text_to_text_perp) beyond norms and head
    adapted: tuple[str, ...] = ()

    #: zoo model whose tokenizer the data is tokenized with; the head's parameter name (the embedding when tied)
    tokenizer_of = "tiny_llama"
    head = "lm_head.weight"

    #: tokens per training / held-out sequence
    seq_len = 128

    @classmethod
    def prepare_config(cls, cfg):
        from slimkit import zoo

        cfg.add_tokenizer(zoo.load(cls.tokenizer_of).tokenizer)
        cfg.add_data("PyDocText", max_seq_len=cls.seq_len)

    def expected_changes(self, base: torch.nn.Module) -> set[str]:
        return {n for n, _ in base.named_parameters() if "norm" in n or n == self.head or n.endswith(self.adapted)}

    def trainable(self, base: torch.nn.Module) -> int:
        """In-place parameters plus rank-r adapters (r x (in + out)) on each adapted layer."""
        rank = self.hyperparameters.get("lora_r", 0)
        own = self.expected_changes(base)
        lora = sum(rank * (m.in_features + m.out_features) for n, m in base.named_modules()
                   if f"{n}.weight" in own and f"{n}.weight".endswith(self.adapted))
        return lora + sum(p.numel() for n, p in base.named_parameters() if n in own and not n.endswith(self.adapted))

    def post_smash_hook(self, smashed, base, inputs):
        cfg = SmashConfig()
        self.prepare_config(cfg)
        for key, value in _PRUNE.items():
            cfg[key] = value
        model = smashed.model
        cfg.device = str(next(model.parameters()).device)  # the harness smashed there (a GPU, the fake device)
        pruned = smash(base, cfg, verbose=False).model
        after, before = dict(model.named_parameters()), dict(pruned.named_parameters())
        assert set(after) == set(before)  # adapters merged: no parameter added
        changed = {n for n in after if not torch.equal(after[n], before[n])}
        assert changed == self.expected_changes(base)
        for name in changed:  # what the pruning zeroed stays zero
            zeros = before[name] == 0
            assert bool((after[name][zeros] == 0).all()), name
        state = smashed.applied[-1]["state"]
        assert state["train_steps"] == self.hyperparameters["steps"]
        assert state["trainable_params"] == self.trainable(base)
        assert state["val_perplexity_after"] < state["val_perplexity_before"]
        held_out = _held_out(cfg)
        assert perplexity(model, held_out) < 0.8 * perplexity(pruned, held_out)


class TestTextToTextInPlacePERP(_PERPChecks, AlgorithmTesterBase):
    algorithm = "text_to_text_inplace_perp"
    hyperparameters = _FAST


class TestTextToTextPERP(_PERPChecks, AlgorithmTesterBase):
    """MaskLoRA on the query and value projections (peft's Llama targets), merged with the zeros kept."""

    algorithm = "text_to_text_perp"
    hyperparameters = {**_FAST, "lora_r": 4}
    adapted = ("q_proj.weight", "v_proj.weight")


class TestTextToTextPERPAllLinearPiSSA(TestTextToTextPERP):
    """'all-linear' targets with the PiSSA start: every Linear of the blocks moves, still sparse."""

    hyperparameters = {**_FAST, "lora_r": 4, "lora_target_modules": "all-linear", "lora_variant": "pissa"}
    adapted = ("proj.weight",)
    marks = ["slow"]


class TestTextToTextPERPSmolLM2(TestTextToTextPERP):
    """The real SmolLM2-135M (tied embeddings: the head is the embedding), 50 % pruned, a few steps of PERP."""

    models = ["smollm2-135m"]
    marks = ["slow"]
    hyperparameters = {"steps": 4, "training_batch_size": 2, "learning_rate": 1e-3, "num_threads": 2, "lora_r": 4}
    tokenizer_of = "smollm2-135m"
    head = "model.embed_tokens.weight"
