"""CTranslate2's Translator behind a torch-shaped encoder-decoder: teacher-forced logits and ``generate``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from slimkit.algorithms.compilation._ctranslate2 import (
    CT2Module,
    check_generate_call,
    open_model,
    right_pad,
    rows,
    sampling_options,
)
from slimkit.errors import ConfigError

_GENERATE = ("max_new_tokens", "min_new_tokens", "do_sample", "temperature", "top_k", "top_p", "num_beams")

if TYPE_CHECKING:
    from transformers.modeling_outputs import Seq2SeqLMOutput


def _logits(step: Any) -> torch.Tensor:
    return torch.from_numpy(np.array(step)).float()


class CT2Translator(CT2Module):
    """A converted encoder-decoder run by CTranslate2's Translator.

    ``forward(input_ids, decoder_input_ids)`` gives the decoder's logits ``[batch, target, vocab]`` (teacher
    forcing); ``generate(input_ids)`` the decoded ids from the start token on.
    """

    def __init__(self, folder: str | Path, n_threads: int = 0, owns_folder: bool = False) -> None:
        super().__init__(folder, n_threads, owns_folder)
        self.translator = open_model(self.ctranslate2.Translator, self.folder, self.n_threads)
        self.decoder_start_token_id = int(self.config.decoder_start_token_id)

    def _sources(self, input_ids: Any, attention_mask: Any) -> list[list[str]]:
        return [self.tokens(r) for r in rows(input_ids, attention_mask, "c_translate")]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                decoder_input_ids: torch.Tensor | None = None, **_: Any) -> Seq2SeqLMOutput:
        """Logits of every decoder position given the previous ``decoder_input_ids`` (which start with the start token).

        CTranslate2 forces the target prefix and reports each step's logits: position 0 comes from a free first step,
        positions 1.. from the run forced along ``decoder_input_ids[:, 1:]``.
        """
        from transformers.modeling_outputs import Seq2SeqLMOutput

        if not isinstance(decoder_input_ids, torch.Tensor) or decoder_input_ids.dim() != 2:
            raise ConfigError("c_translate forward() needs decoder_input_ids [batch, target] (starting with the "
                              f"decoder start token {self.decoder_start_token_id}); use generate() to translate.")
        if bool((decoder_input_ids[:, 0] != self.decoder_start_token_id).any()):
            raise ConfigError(f"c_translate: decoder_input_ids must start with the decoder start token "
                              f"{self.decoder_start_token_id}; got {decoder_input_ids[:, 0].tolist()}.")
        sources, length = self._sources(input_ids, attention_mask), decoder_input_ids.shape[1]
        options = {"beam_size": 1, "min_decoding_length": 0, "return_logits_vocab": True, "end_token": []}
        first = self.translator.translate_batch(sources, max_decoding_length=1, **options)
        logits = torch.stack([_logits(r.logits[0][0]) for r in first])[:, None]
        if length > 1:
            prefixes = [self.tokens(r[1:].tolist()) for r in decoder_input_ids]
            forced = self.translator.translate_batch(sources, target_prefix=prefixes, max_decoding_length=length,
                                                     **options)
            rest = torch.stack([torch.stack([_logits(s) for s in r.logits[0][1:length]]) for r in forced])
            logits = torch.cat([logits, rest], dim=1)
        return Seq2SeqLMOutput(logits=logits)

    def generate(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 max_new_tokens: int = 20, min_new_tokens: int = 0, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int = 50, top_p: float = 1.0, num_beams: int = 1, **kwargs: Any) -> torch.Tensor:
        """Decoded ids ``[batch, 1 + new]``: the start token, then the translation (end token included).

        Shorter rows are padded with the pad token, as a transformers encoder-decoder's ``generate`` returns them.
        """
        check_generate_call("c_translate", input_ids, kwargs, _GENERATE)
        results = self.translator.translate_batch(
            self._sources(input_ids, attention_mask), beam_size=int(num_beams), max_decoding_length=int(max_new_tokens),
            min_decoding_length=int(min_new_tokens), return_end_token=True,
            **sampling_options(do_sample, temperature, top_k, top_p))
        decoded = [[self.decoder_start_token_id] + [self.index[t] for t in r.hypotheses[0]] for r in results]
        return right_pad(decoded, self.pad_token_id)
