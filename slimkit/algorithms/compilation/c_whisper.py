"""c_whisper: a Hugging Face Whisper converted to CTranslate2 (int8 by default) and run by its Whisper engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from slimkit.algorithms.compilation._ctranslate2 import CT2Module, open_model, right_pad
from slimkit.algorithms.compilation._ctranslate2_compiler import CTranslate2Compiler, loader_for
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.errors import ConfigError, MissingComponentError

_GENERATE = ("max_new_tokens", "num_beams", "language", "task")


class CT2Whisper(CT2Module):
    """A converted Whisper run by CTranslate2's ``models.Whisper``: ``generate(input_features)`` gives token ids.

    The decoder starts as transformers' Whisper does without timestamps: the start of transcript, then (on a
    multilingual model) the language (given, or detected by CTranslate2) and the task, then ``<|notimestamps|>`` where
    the vocabulary has it. Like transformers' Whisper ``generate``, the result holds the new tokens only, the end
    token included, finished rows padded with the pad token.
    """

    #: why the result has no ``forward``: tools that measure a model (``slimkit smash``) time ``generate`` instead
    generate_only = "CTranslate2's Whisper decodes; it gives no teacher-forced logits"

    def __init__(self, folder: str | Path, n_threads: int = 0, owns_folder: bool = False) -> None:
        super().__init__(folder, n_threads, owns_folder)
        self.whisper = open_model(self.ctranslate2.models.Whisper, self.folder, self.n_threads)
        self.decoder_start_token_id = int(self.config.decoder_start_token_id)

    def can_generate(self) -> bool:
        """Whisper generates (transcribes)."""
        return True

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Not available: CTranslate2's Whisper decodes, it does not return teacher-forced logits."""
        raise ConfigError("c_whisper runs CTranslate2's Whisper, which gives no teacher-forced logits: call "
                          "generate(input_features) for the token ids.")

    def _special(self, name: str) -> int:
        if name not in self.index:
            raise ConfigError(f"c_whisper: the converted vocabulary has no {name} token (this Whisper's tokenizer "
                              f"lacks it).")
        return self.index[name]

    def _prompts(self, features: Any, language: str | None, task: str) -> list[list[int]]:
        start = [self.decoder_start_token_id]
        tail = [self.index["<|notimestamps|>"]] if "<|notimestamps|>" in self.index else []
        if not self.whisper.is_multilingual:
            return [start + tail] * features.shape[0]
        if language is None:
            languages = [row[0][0] for row in self.whisper.detect_language(features)]
        else:
            languages = [f"<|{language.strip('<|>')}|>"] * features.shape[0]
        tail = [self._special(f"<|{task}|>"), *tail]
        return [start + [self._special(lang)] + tail for lang in languages]

    def generate(self, input_features: torch.Tensor | None = None, max_new_tokens: int = 20, num_beams: int = 1,
                 language: str | None = None, task: str = "transcribe", **kwargs: Any) -> torch.Tensor:
        """Token ids ``[batch, new]`` for log-mel features ``[batch, n_mels, frames]`` (greedy unless ``num_beams``).

        ``language`` (``"en"``, ``"<|fr|>"``...) and ``task`` (``"transcribe"`` / ``"translate"``) matter only on a
        multilingual model; without ``language`` CTranslate2 detects it per row.
        """
        unknown = sorted(set(kwargs) - {"attention_mask", "pad_token_id", "eos_token_id", "use_cache"})
        if unknown:
            raise ConfigError(f"c_whisper generate() does not take {unknown}; it takes input_features, "
                              f"{', '.join(_GENERATE)}.")
        if not isinstance(input_features, torch.Tensor) or input_features.dim() != 3:
            raise ConfigError("c_whisper generate() needs input_features as a [batch, n_mels, frames] tensor (a "
                              f"WhisperFeatureExtractor's output); got {type(input_features).__name__}.")
        if task not in ("transcribe", "translate"):
            raise ConfigError(f"c_whisper generate(): task is 'transcribe' or 'translate', got {task!r}.")
        if int(max_new_tokens) < 1:
            raise ConfigError(f"c_whisper generate(): max_new_tokens must be >= 1, got {max_new_tokens}.")
        array = np.ascontiguousarray(input_features.detach().cpu().float().numpy())
        features = self.ctranslate2.StorageView.from_array(array)
        # CTranslate2's Whisper decodes at most max_length // 2 tokens (OpenAI's sample_len = n_ctx // 2)
        results = self.whisper.generate(features, self._prompts(features, language, task),
                                        max_length=2 * int(max_new_tokens), beam_size=int(num_beams),
                                        suppress_blank=False)
        rows = [list(r.sequences_ids[0]) for r in results]
        rows = [r + [self.eos_token_id] if len(r) < int(max_new_tokens) else r for r in rows]  # it drops the end
        return right_pad(rows, self.pad_token_id)


@register
class CWhisper(CTranslate2Compiler):
    """Convert a Hugging Face Whisper to CTranslate2 and transcribe with its engine (int8; processor or tokenizer).

    CTranslate2's own converter writes the weights (``weight_bits`` 8: int8, 16: float16, 32: float32) and the
    vocabulary of the processor's tokenizer (or of ``cfg.add_tokenizer``'s). ``generate(input_features)`` returns
    token ids as transformers' Whisper ``generate`` does (greedy, no timestamps); there is no teacher-forced
    ``forward``. Saved as CTranslate2's folder (no pickle); loading needs no base model. Needs
    ``pip install 'slimkit[ctranslate2]'`` and the model's processor (``cfg.add_processor``) or tokenizer.
    """

    algorithm_name = "c_whisper"
    runner = CT2Whisper
    tokenizer_required = False  # Pruna asks for the processor; its tokenizer or cfg.tokenizer: vocabulary_source

    def model_check_fn(self, model: Any) -> bool:
        """A transformers WhisperForConditionalGeneration."""
        return loader_for(model) is not None and type(model).__name__ == "WhisperForConditionalGeneration"

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return ("It converts Hugging Face WhisperForConditionalGeneration models; causal LMs go to c_generate, "
                "other encoder-decoders to c_translate.")

    def vocabulary_source(self, smash_config: SmashConfigPrefixWrapper) -> Any:
        """The processor's tokenizer, else the tokenizer; a MissingComponentError without either."""
        tokenizer = getattr(smash_config.processor, "tokenizer", None) or smash_config.tokenizer
        if tokenizer is None:
            raise MissingComponentError("c_whisper needs the model's processor (cfg.add_processor(...)) or its "
                                        "tokenizer (cfg.add_tokenizer(...)): CTranslate2 writes its vocabulary.")
        return tokenizer
