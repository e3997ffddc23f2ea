"""Tiny random configs of transformers' own model families, and their example inputs (seeded, offline)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import transformers as T

H = dict(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2)
IMG = dict(image_size=32, patch_size=8)


def text(vocab: int = 100) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(0, vocab, (2, 8), generator=torch.Generator().manual_seed(1))}


def image() -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))}


FAMILIES: dict[str, tuple[Callable[[], Any], Callable[[], dict[str, torch.Tensor]]]] = {
    "bert": (lambda: T.BertForSequenceClassification(T.BertConfig(vocab_size=100, **H)), text),
    "roberta": (lambda: T.RobertaForSequenceClassification(T.RobertaConfig(vocab_size=100, **H)), text),
    "distilbert": (lambda: T.DistilBertForSequenceClassification(T.DistilBertConfig(
        vocab_size=100, dim=64, n_heads=4, hidden_dim=128, n_layers=2)), text),
    "deberta_v2": (lambda: T.DebertaV2ForSequenceClassification(T.DebertaV2Config(vocab_size=100, **H)), text),
    "electra": (lambda: T.ElectraForSequenceClassification(T.ElectraConfig(vocab_size=100, embedding_size=64, **H)),
                text),
    "vit": (lambda: T.ViTForImageClassification(T.ViTConfig(**IMG, **H)), image),
    "deit": (lambda: T.DeiTForImageClassification(T.DeiTConfig(**IMG, **H)), image),
    "regnet": (lambda: T.RegNetForImageClassification(T.RegNetConfig(
        hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1], groups_width=8, embedding_size=16)), image),
    "convnext": (lambda: T.ConvNextForImageClassification(T.ConvNextConfig(hidden_sizes=[16, 32, 64, 128],
                                                                           depths=[1, 1, 2, 1])), image),
    "gpt2": (lambda: T.GPT2LMHeadModel(T.GPT2Config(vocab_size=100, n_embd=64, n_head=4, n_layer=2,
                                                    bos_token_id=99, eos_token_id=99)), text),
    "phi3": (lambda: T.Phi3ForCausalLM(T.Phi3Config(vocab_size=100, num_key_value_heads=2, pad_token_id=0,
                                                    bos_token_id=1, eos_token_id=2, **H)), text),
    "mixtral": (lambda: T.MixtralForCausalLM(T.MixtralConfig(vocab_size=100, num_key_value_heads=2,
                                                             num_local_experts=4, num_experts_per_tok=2, **H)), text),
    "swin": (lambda: T.SwinForImageClassification(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16,
                                                               depths=[1, 1], num_heads=[2, 4], window_size=4)), image),
    "mobilevit": (lambda: T.MobileViTForImageClassification(T.MobileViTConfig(
        image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32])), image),
}


def build(name: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The seeded tiny model ``name`` (eval mode) and its example inputs."""
    factory, inputs = FAMILIES[name]
    torch.manual_seed(0)
    return factory().eval(), inputs()


def main_output(out: Any) -> torch.Tensor:
    """Logits of a transformers output."""
    return out.logits if hasattr(out, "logits") else out[0]
