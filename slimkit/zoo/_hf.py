"""Helpers shared by the tiny Hugging Face builders: seeded construction from a config and token inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from slimkit.zoo._common import require, seeded
from slimkit.zoo.registry import ZooModel

#: the shape the tiny BERT and Llama share (each entry adds its own keys)
TINY_SHAPE = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4}


def transformers_module(purpose: str) -> Any:
    """Import transformers or raise MissingPackageError with the install command."""
    return require("transformers", "pip install transformers", purpose)


def build_seeded(model_cls: str, config_cls: str, arch: dict[str, Any], purpose: str, **fixed: Any) -> Any:
    """Instantiate ``transformers.<model_cls>(<config_cls>(**arch, **fixed))`` with torch seeded by arch['seed']."""
    transformers = transformers_module(purpose)
    settings = {k: v for k, v in arch.items() if k != "seed"}
    config = getattr(transformers, config_cls)(**settings, **fixed)
    with seeded(arch["seed"]):
        return getattr(transformers, model_cls)(config)


def byte_tokenizer(vocab_size: int = 256) -> Any:
    """An offline byte-level tokenizer (one token per byte, no merges) for the tiny 256-token language models.

    It makes the tiny builders real text models: calibration and fine-tuning on ``PyDocText`` work offline,
    exactly as on SmolLM2, in milliseconds. Token 0 doubles as padding and end of text.
    """
    if vocab_size != 256:
        return None
    transformers = transformers_module("the tiny models' byte tokenizer")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # installed with transformers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=alphabet[0],
                                                pad_token=alphabet[0])


def random_tokens(vocab_size: int, batch_size: int, seq_len: int, seed: int) -> torch.Tensor:
    """Seeded token ids ``[batch_size, seq_len]`` in ``[0, vocab_size)``."""
    return torch.randint(0, vocab_size, (batch_size, seq_len), generator=torch.Generator().manual_seed(seed + 1))


def check_positions(entry: str, seq_len: int, max_positions: int, key: str) -> None:
    """Raise ConfigError when the example sequence is longer than the model's position table."""
    from slimkit.errors import ConfigError

    if seq_len > max_positions:
        raise ConfigError(
            f"zoo model {entry!r}: seq_len={seq_len} exceeds {key}={max_positions}; lower seq_len or raise {key}."
        )


def causal_lm(entry: str, build: Callable[..., nn.Module], positions: str, batch_size: int, seq_len: int,
              arch: dict[str, Any]) -> ZooModel:
    """Tiny LM ``entry``: seeded model and ``{"input_ids"}``, byte tokenizer (``positions``: the position-table key)."""
    check_positions(entry, seq_len, arch[positions], positions)
    ids = random_tokens(arch["vocab_size"], batch_size, seq_len, arch["seed"])
    return ZooModel(build(**arch), {"input_ids": ids}, entry, tokenizer=byte_tokenizer(arch["vocab_size"]))
