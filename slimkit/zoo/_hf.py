"""Helpers shared by the tiny Hugging Face builders: seeded construction from a config and token inputs."""

from __future__ import annotations

from typing import Any

import torch

from slimkit.zoo._common import require, seeded


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
