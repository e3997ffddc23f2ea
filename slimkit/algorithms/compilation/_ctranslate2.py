"""CTranslate2 behind torch-shaped modules: the runners' shared base and :class:`CT2Generator` (causal LMs).

c_generate and c_translate run a folder CTranslate2's own converter wrote (:mod:`._ctranslate2_compiler`: weights
int8 / float16 / float32 in CTranslate2's ``model.bin`` format, no pickle). Token ids go in and out as ids: the
converted folder's vocabulary maps them to CTranslate2's token strings, so the results are the ids of the model's
own tokenizer. The encoder-decoder runner is in :mod:`._ctranslate2_seq2seq`.
"""

from __future__ import annotations

import json
import shutil
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from slimkit.errors import ConfigError, MissingPackageError, SaveLoadError

if TYPE_CHECKING:
    from transformers.modeling_outputs import CausalLMOutput

INSTALL = "pip install 'slimkit[ctranslate2]'"
#: Pruna's ``weight_bits`` (8, 16) plus 32 -> CTranslate2's ``quantization`` of the converted weights
QUANTIZATION = {8: "int8", 16: "float16", 32: "float32"}
#: the folder the converted model is saved in, inside a slimkit save
FOLDER = "ctranslate2"
#: the Hugging Face config of the converted model, kept beside CTranslate2's own config.json
HF_CONFIG = "transformers_config.json"
_SAMPLING = ("max_new_tokens", "min_new_tokens", "do_sample", "temperature", "top_k", "top_p")


def import_ctranslate2() -> Any:
    """Import ctranslate2, or raise MissingPackageError naming the extra to install."""
    try:
        import ctranslate2
        from ctranslate2.converters import transformers as _converter  # noqa: F401  (the converter needs it)
    except ImportError as exc:
        raise MissingPackageError(f"CTranslate2 is not installed ({exc}). Install it: {INSTALL}") from exc
    return ctranslate2


def _read(file: Path, valid: Callable[[Any], bool], what: str) -> Any:
    """The JSON in ``file``, or a SaveLoadError naming the file when it is unreadable or not ``what``."""
    try:
        value = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SaveLoadError(f"{file} is unreadable ({exc}); save the smashed model again.") from exc
    if not valid(value):
        raise SaveLoadError(f"{file} does not hold {what}: the file was edited or is corrupt.")
    return value


def open_model(runner: Any, folder: Path, n_threads: int) -> Any:
    """CTranslate2's ``runner`` on ``folder`` (CPU); a folder it refuses raises SaveLoadError."""
    try:
        return runner(str(folder), device="cpu", intra_threads=n_threads)
    except (RuntimeError, ValueError, OSError) as exc:
        raise SaveLoadError(f"CTranslate2 cannot load {folder} ({str(exc)[:300]}): model.bin or config.json is "
                            "damaged or was written by another CTranslate2. Save the smashed model again.") from exc


class CT2Module(nn.Module):
    """Base of the CTranslate2 runners: the converted folder, its vocabulary, the Hugging Face config."""

    def __init__(self, folder: str | Path, n_threads: int = 0, owns_folder: bool = False) -> None:
        super().__init__()
        self.folder = Path(folder)
        if owns_folder:
            weakref.finalize(self, shutil.rmtree, self.folder.parent, True)
        self.ctranslate2 = import_ctranslate2()
        self.n_threads = int(n_threads) or torch.get_num_threads()
        vocab = next((self.folder / n for n in ("vocabulary.json", "shared_vocabulary.json", "target_vocabulary.json")
                      if (self.folder / n).is_file()), None)
        if vocab is None:
            raise SaveLoadError(f"{self.folder} has no vocabulary.json: the converted model is incomplete.")
        self.vocabulary: list[str] = _read(vocab, lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v),
                                           "a list of token strings")
        raw = _read(self.folder / HF_CONFIG, lambda v: isinstance(v, dict) and isinstance(v.get("model_type"), str),
                    "a Hugging Face config with its model_type")
        from transformers import AutoConfig

        try:
            self.config = AutoConfig.for_model(raw.pop("model_type"), **raw)
        except (ValueError, TypeError, KeyError) as exc:
            raise SaveLoadError(f"{self.folder / HF_CONFIG} is not a config transformers can read ({exc}).") from exc
        eos = self.config.eos_token_id
        self.eos_token_id = int(eos[0] if isinstance(eos, list) else eos if eos is not None else 0)
        pad = self.config.pad_token_id
        self.pad_token_id = int(pad) if pad is not None else self.eos_token_id
        self.index = {token: i for i, token in enumerate(self.vocabulary)}

    def tokens(self, ids: list[int]) -> list[str]:
        """CTranslate2's token strings of token ids (a ConfigError names an id outside the vocabulary)."""
        size = len(self.vocabulary)
        bad = [i for i in ids if not 0 <= i < size]
        if bad:
            raise ConfigError(f"Token id {bad[0]} is outside the converted model's vocabulary of {size} tokens.")
        return [self.vocabulary[i] for i in ids]

    def extra_repr(self) -> str:
        """Show the converted folder and the threads."""
        return f"folder={str(self.folder)!r}, n_threads={self.n_threads}"


def rows(input_ids: Any, attention_mask: Any, what: str) -> list[list[int]]:
    """The token-id rows of ``input_ids`` ``[batch, seq]`` without the positions where ``attention_mask`` is 0."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() not in (1, 2):
        raise ConfigError(f"{what} needs input_ids as a [batch, seq] tensor; got {type(input_ids).__name__}.")
    ids = input_ids.view(1, -1) if input_ids.dim() == 1 else input_ids
    keep = torch.ones_like(ids, dtype=torch.bool) if attention_mask is None else attention_mask.view_as(ids).bool()
    return [ids[i][keep[i]].tolist() for i in range(ids.shape[0])]


def right_pad(rows: list[list[int]], value: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """``rows`` as one ``[batch, longest]`` tensor, the shorter rows padded with ``value`` on the right."""
    out = torch.full((len(rows), max(map(len, rows), default=0)), value, dtype=dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=dtype)
    return out


def check_generate_call(what: str, input_ids: Any, kwargs: dict[str, Any], accepted: tuple[str, ...]) -> None:
    """A ConfigError for a ``generate`` call without input_ids or with arguments the runner does not take."""
    unknown = sorted(set(kwargs) - {"pad_token_id", "eos_token_id", "use_cache", "generation_config"})
    if unknown:
        raise ConfigError(f"{what} generate() does not take {unknown}; it takes input_ids, attention_mask, "
                          f"{', '.join(accepted)}.")
    if input_ids is None:
        raise ConfigError(f"{what} generate() needs input_ids ([batch, seq] token ids).")


def sampling_options(do_sample: bool, temperature: float, top_k: int, top_p: float) -> dict[str, Any]:
    """CTranslate2's sampling arguments (greedy unless ``do_sample``)."""
    if not do_sample:
        return {"sampling_topk": 1}
    return {"sampling_topk": int(top_k), "sampling_topp": float(top_p), "sampling_temperature": float(temperature)}


def step_callback(prompt: torch.Tensor, streamer: Any, stopping_criteria: Any) -> tuple[Callable, list[int]]:
    """A CTranslate2 step callback feeding a transformers streamer and honouring stopping criteria; new ids."""
    new: list[int] = []

    def on_step(step: Any) -> bool:
        new.append(int(step.token_id))
        if streamer is not None:
            streamer.put(torch.tensor([step.token_id]))
        if stopping_criteria:
            so_far = torch.cat([prompt, torch.tensor([new], dtype=prompt.dtype)], dim=1)
            return bool(any(bool(c(so_far, None).all()) for c in stopping_criteria))
        return False

    return on_step, new


class CT2Generator(CT2Module):
    """A converted causal LM: ``forward`` gives logits ``[batch, seq, vocab]``, ``generate`` continues token ids."""

    def __init__(self, folder: str | Path, n_threads: int = 0, owns_folder: bool = False) -> None:
        super().__init__(folder, n_threads, owns_folder)
        self.generator = open_model(self.ctranslate2.Generator, self.folder, self.n_threads)

    def can_generate(self) -> bool:
        """A causal LM generates (the serve face's /generate uses it)."""
        return True

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **_: Any) -> CausalLMOutput:
        """Logits ``[batch, seq, vocab]`` float32 (zeros where ``attention_mask`` is 0); other arguments ignored."""
        from transformers.modeling_outputs import CausalLMOutput

        batch = rows(input_ids, attention_mask, "c_generate")
        ids = input_ids.view(len(batch), -1)
        logits = torch.zeros(ids.shape[0], ids.shape[1], len(self.vocabulary))
        present = [i for i, r in enumerate(batch) if r]
        if present:
            out = torch.from_numpy(np.array(self.generator.forward_batch([self.tokens(batch[i]) for i in present])))
            for j, i in enumerate(present):
                keep = torch.ones(ids.shape[1], dtype=torch.bool) if attention_mask is None else \
                    attention_mask.view_as(ids)[i].bool()
                logits[i, keep] = out[j, : len(batch[i])].float()
        return CausalLMOutput(logits=logits)

    def generate(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 max_new_tokens: int = 20, min_new_tokens: int = 0, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int = 50, top_p: float = 1.0, streamer: Any = None, stopping_criteria: Any = None,
                 **kwargs: Any) -> torch.Tensor:
        """Prompt + generated ids ``[batch, seq + new]`` (greedy by default; rows ending early padded with eos).

        A transformers ``streamer`` receives the prompt, then each new token; ``stopping_criteria`` are checked
        after every token.
        """
        check_generate_call("c_generate", input_ids, kwargs, (*_SAMPLING, "streamer", "stopping_criteria"))
        batch = rows(input_ids, attention_mask, "c_generate")
        ids = input_ids.view(len(batch), -1)
        options = sampling_options(do_sample, temperature, top_k, top_p)
        if streamer is not None:
            streamer.put(ids.cpu())
        new_rows = []
        for row in batch:
            on_step, new = step_callback(torch.tensor([row], dtype=ids.dtype), streamer, stopping_criteria)
            if max_new_tokens > 0:
                self.generator.generate_batch([self.tokens(row)], max_length=int(max_new_tokens),
                                              min_length=int(min_new_tokens), include_prompt_in_result=False,
                                              callback=on_step, **options)
            new_rows.append(new)
        if streamer is not None:
            streamer.end()
        return torch.cat([ids, right_pad(new_rows, self.eos_token_id, ids.dtype)], dim=1)
