"""A GGUF file run by llama.cpp (llama-cpp-python) behind a torch-shaped module: logits and ``generate``.

``forward(input_ids)`` returns the logits of every position (``[batch, seq, vocab]`` float32, like a Hugging Face
causal LM's ``.logits``); ``generate(input_ids, max_new_tokens=...)`` returns prompt + new ids (greedy unless
``do_sample``); :meth:`LlamaCppModule.generate_text` works on strings with the file's own tokenizer. llama.cpp's
log goes nowhere, except that its last warnings and errors are kept for the message when a file fails to load.
"""

from __future__ import annotations

import collections
import ctypes
import os
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from slimkit.errors import ConfigError, MissingPackageError, SaveLoadError

if TYPE_CHECKING:
    from transformers.modeling_outputs import CausalLMOutput

INSTALL = ("llama-cpp-python is not installed. Install it with: pip install 'slimkit[llamacpp]' (builds llama.cpp "
           "from source, ~15 min on 2 cores), or run `make test-llamacpp` in a slimkit checkout.")
_LOG: collections.deque[str] = collections.deque(maxlen=20)
_callback: Any = None
_SAMPLING = ("max_new_tokens", "min_new_tokens", "do_sample", "temperature", "top_k", "top_p", "seed")


def import_llama_cpp() -> Any:
    """Import llama_cpp (raising MissingPackageError with the extra to install) and route its log to a buffer."""
    global _callback
    try:
        import llama_cpp
    except ImportError as exc:
        raise MissingPackageError(f"{INSTALL} ({exc})") from exc
    if _callback is None:
        levels = {3: "warning", 4: "error"}  # ggml_log_level: 3 WARN, 4 ERROR

        def _collect(level: int, text: bytes, _user: Any) -> None:
            if level in levels and text.strip():
                _LOG.append(f"{levels[level]}: {text.decode('utf-8', 'replace').strip()}")

        _callback = llama_cpp.llama_log_callback(_collect)
        llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
    return llama_cpp


def open_llama(path: str | os.PathLike, n_threads: int = 0, n_ctx: int = 0) -> Any:
    """``llama_cpp.Llama`` on ``path``; a file llama.cpp refuses raises SaveLoadError with the path and its log."""
    llama_cpp = import_llama_cpp()
    threads = n_threads or torch.get_num_threads()
    _LOG.clear()
    try:
        return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                               n_threads_batch=threads, verbose=False)
    except (ValueError, RuntimeError, OSError) as exc:
        said = " | ".join(_LOG) or str(exc)
        raise SaveLoadError(f"llama.cpp cannot load {path}: {said[-800:]}. Export the model again (the file may "
                            "be truncated or written by another tool).") from exc


class LlamaCppModule(nn.Module):
    """An ``nn.Module`` whose forward and ``generate`` run a GGUF file in llama.cpp (CPU)."""

    def __init__(self, gguf_path: str | os.PathLike, n_threads: int = 0, n_ctx: int = 0) -> None:
        super().__init__()
        self.gguf_path = str(gguf_path)
        self.llm = open_llama(gguf_path, n_threads, n_ctx)
        weakref.finalize(self, self.llm.close)  # before interpreter teardown, where Llama.__del__ fails
        self._llama_cpp = import_llama_cpp()
        self.n_vocab, self.n_ctx = int(self.llm.n_vocab()), int(self.llm.n_ctx())
        self.eos_token_id = int(self.llm.token_eos())

    def _rows(self, input_ids: Any, attention_mask: Any) -> list[list[int]]:
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() not in (1, 2):
            raise ConfigError(f"llama_cpp needs input_ids as a [batch, seq] tensor; got {type(input_ids).__name__}.")
        ids = input_ids.view(1, -1) if input_ids.dim() == 1 else input_ids
        keep = torch.ones_like(ids, dtype=torch.bool) if attention_mask is None else attention_mask.view_as(ids).bool()
        rows = [ids[i][keep[i]].tolist() for i in range(ids.shape[0])]
        too_long = max(map(len, rows), default=0)
        if too_long > self.n_ctx:
            raise ConfigError(f"A sequence of {too_long} tokens exceeds llama_cpp's context of {self.n_ctx}; raise "
                              "llama_cpp_n_ctx or shorten the input.")
        return rows

    def _logits(self, tokens: list[int]) -> np.ndarray:
        """Logits ``[len(tokens), vocab]`` of one sequence, decoded from an empty KV cache in batches of 512."""
        lib, llm = self._llama_cpp, self.llm
        llm.reset()
        lib.llama_memory_clear(lib.llama_get_memory(llm.ctx), True)
        out = np.empty((len(tokens), self.n_vocab), dtype=np.float32)
        batch = lib.llama_batch_init(512, 0, 1)
        try:
            for start in range(0, len(tokens), 512):
                chunk = tokens[start : start + 512]
                batch.n_tokens = len(chunk)
                for i, tok in enumerate(chunk):
                    batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = tok, start + i, 1, True
                    batch.seq_id[i][0] = 0
                code = lib.llama_decode(llm.ctx, batch)
                if code != 0:
                    raise RuntimeError(f"llama_decode returned {code} ({' | '.join(_LOG)[-300:]}).")
                ptr = lib.llama_get_logits(llm.ctx)
                out[start : start + len(chunk)] = np.ctypeslib.as_array(ptr, shape=(len(chunk) * self.n_vocab,)) \
                    .reshape(len(chunk), self.n_vocab)
        finally:
            lib.llama_batch_free(batch)
            lib.llama_memory_clear(lib.llama_get_memory(llm.ctx), True)
        return out

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **_: Any) -> CausalLMOutput:
        """Logits ``[batch, seq, vocab]`` (zeros where ``attention_mask`` is 0); other arguments are ignored."""
        from transformers.modeling_outputs import CausalLMOutput  # transformers loads when a model runs, not here

        rows = self._rows(input_ids, attention_mask)
        ids = input_ids.view(len(rows), -1)
        logits = torch.zeros(ids.shape[0], ids.shape[1], self.n_vocab)
        for i, tokens in enumerate(rows):
            keep = torch.ones(ids.shape[1], dtype=torch.bool) if attention_mask is None else \
                attention_mask.view_as(ids)[i].bool()
            if tokens:
                logits[i, keep] = torch.from_numpy(self._logits(tokens))
        return CausalLMOutput(logits=logits)

    def _continue(self, tokens: list[int], max_new_tokens: int, do_sample: bool = False, temperature: float = 1.0,
                  top_k: int = 50, top_p: float = 1.0, seed: int | None = None, min_new_tokens: int = 0) -> list[int]:
        if seed is not None:
            self.llm.set_seed(int(seed))
        new: list[int] = []
        if max_new_tokens <= 0:
            return new
        self.llm.reset()  # every call decodes its whole prompt (no reuse of a previous call's KV cache)
        stream = self.llm.generate(tokens, top_k=top_k if do_sample else 1, top_p=top_p if do_sample else 1.0,
                                   min_p=0.0, temp=float(temperature) if do_sample else 0.0, repeat_penalty=1.0,
                                   reset=True)
        for token in stream:
            new.append(int(token))
            stop = token == self.eos_token_id and len(new) >= min_new_tokens
            if stop or len(new) >= max_new_tokens or len(tokens) + len(new) >= self.n_ctx:
                break
        return new

    def generate(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 max_new_tokens: int = 20, min_new_tokens: int = 0, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int = 50, top_p: float = 1.0, seed: int | None = None, **kwargs: Any) -> torch.Tensor:
        """Prompt + generated ids ``[batch, seq + new]`` (greedy by default; rows ending early padded with eos)."""
        unknown = sorted(set(kwargs) - {"pad_token_id", "eos_token_id", "use_cache"})
        if unknown:
            raise ConfigError(f"llama_cpp generate() does not take {unknown}; it takes input_ids, attention_mask, "
                              f"{', '.join(_SAMPLING)}.")
        if input_ids is None:
            raise ConfigError("llama_cpp generate() needs input_ids ([batch, seq] token ids).")
        rows = self._rows(input_ids, attention_mask)
        ids = input_ids.view(len(rows), -1)
        new = [self._continue(r, max_new_tokens, do_sample, temperature, top_k, top_p, seed, min_new_tokens)
               for r in rows]
        width = max(map(len, new), default=0)
        tail = torch.full((len(rows), width), self.eos_token_id, dtype=ids.dtype)
        for i, tokens in enumerate(new):
            tail[i, : len(tokens)] = torch.tensor(tokens, dtype=ids.dtype)
        return torch.cat([ids, tail], dim=1)

    def generate_text(self, prompt: str, max_new_tokens: int = 32, **sampling: Any) -> str:
        """``prompt`` continued by ``max_new_tokens`` tokens, tokenized and decoded by the GGUF's own tokenizer."""
        tokens = self.llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)
        unknown = sorted(set(sampling) - set(_SAMPLING))
        if unknown:
            raise ConfigError(f"llama_cpp generate_text() does not take {unknown}; it takes {', '.join(_SAMPLING)}.")
        new = self._continue(tokens, max_new_tokens, **sampling)
        return self.llm.detokenize(new).decode("utf-8", "replace")

    def extra_repr(self) -> str:
        """Show the GGUF file and the context length."""
        return f"gguf={self.gguf_path!r}, n_ctx={self.n_ctx}"
