"""A Hugging Face byte-level BPE tokenizer written into GGUF metadata, the way llama.cpp's converter does it.

Tokens, token types (added special tokens are CONTROL, other added tokens USER_DEFINED, ids past the tokenizer's
length UNUSED padding), merges and special token ids (the ``gguf`` package's :class:`gguf.SpecialVocab`, read
from the tokenizer's own saved files), and ``tokenizer.ggml.pre``: llama.cpp names the pre-tokenizer by the hash
of the ids a fixed text encodes to (``get_vocab_base_pre`` in ``convert_hf_to_gguf``); a tokenizer whose hash is
not in :data:`PRE_TOKENIZERS` gets ``"default"`` (GPT-2's split), which is exact for merge-free byte tokenizers.
"""

from __future__ import annotations

import json
import tempfile
from hashlib import sha256
from typing import Any

import gguf

from slimkit.errors import ConfigError

#: the text llama.cpp's converter encodes to identify a pre-tokenizer (verbatim from ``convert_hf_to_gguf.py``)
CHECK_TEXT = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) "
    "✅ 🦙🦙 3 33 333 "
    "3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= "
    "нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure "
    "I'll make it, 'D you like some tea? We'Ve a'lL"
)
#: sha256 of ``str(tokenizer.encode(CHECK_TEXT))`` -> llama.cpp pre-tokenizer name (a few of the converter's table)
PRE_TOKENIZERS = {
    "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249": "smollm",  # SmolLM / SmolLM2
    "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea": "qwen2",  # Qwen1.5 / Qwen2 / Qwen2.5
    "d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c": "qwen2",  # Qwen3 embedding
    "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5": "llama-bpe",  # Llama 3
    "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454": "gpt-2",
}


def _backend(tokenizer: Any) -> dict:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ConfigError(f"GGUF export needs a fast (tokenizers-backed) Hugging Face tokenizer; got "
                          f"{type(tokenizer).__name__}. Load it with AutoTokenizer.from_pretrained(..., use_fast=True)."
                          )
    spec = json.loads(backend.to_str())
    model, decoder = spec.get("model") or {}, spec.get("decoder") or {}
    if model.get("type") != "BPE" or model.get("byte_fallback") or decoder.get("type") != "ByteLevel":
        raise ConfigError(f"GGUF export writes byte-level BPE tokenizers (GPT-2 style: SmolLM2, Qwen2, Llama 3); "
                          f"got model type {model.get('type')!r} with decoder {decoder.get('type')!r}. "
                          "SentencePiece tokenizers are not supported yet.")
    return spec


def pre_tokenizer(tokenizer: Any) -> str:
    """llama.cpp's name for the tokenizer's pre-tokenizer (``"default"`` when unknown)."""
    digest = sha256(str(tokenizer.encode(CHECK_TEXT)).encode()).hexdigest()
    return PRE_TOKENIZERS.get(digest, "default")


def token_table(tokenizer: Any, vocab_size: int) -> tuple[list[str], list[int]]:
    """Tokens by id and their GGUF token types, padded to the model's ``vocab_size``."""
    vocab = tokenizer.get_vocab()
    if max(vocab.values()) >= vocab_size:
        raise ConfigError(f"The tokenizer has token id {max(vocab.values())} but the model's vocab_size is "
                          f"{vocab_size}; pass the tokenizer the model was trained with.")
    by_id = {i: t for t, i in vocab.items()}
    added = getattr(tokenizer, "added_tokens_decoder", {})
    types = [gguf.TokenType.UNUSED if i not in by_id else gguf.TokenType.NORMAL if i not in added
             else gguf.TokenType.CONTROL if added[i].special else gguf.TokenType.USER_DEFINED
             for i in range(vocab_size)]
    return [by_id.get(i, f"[PAD{i}]") for i in range(vocab_size)], types


def add_tokenizer(writer: gguf.GGUFWriter, tokenizer: Any, vocab_size: int) -> None:
    """Write ``tokenizer`` (byte-level BPE) into ``writer``'s metadata for a model with ``vocab_size`` rows."""
    merges = bool(_backend(tokenizer)["model"].get("merges"))
    tokens, types = token_table(tokenizer, vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre_tokenizer(tokenizer))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    with tempfile.TemporaryDirectory(prefix="slimkit-gguf-tok-") as folder:
        tokenizer.save_pretrained(folder)
        special = gguf.SpecialVocab(folder, load_merges=merges, n_vocab=vocab_size)
    if not merges:  # llama.cpp requires the key even when a byte tokenizer has no merges
        writer.add_key_value(gguf.Keys.Tokenizer.MERGES, [], gguf.GGUFValueType.ARRAY,
                             sub_type=gguf.GGUFValueType.STRING)
    special.add_to_gguf(writer, quiet=True)
