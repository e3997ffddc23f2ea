"""c_generate: a causal LM converted to CTranslate2 (int8 by default) and run by its CPU engine, with Pruna's name."""

from __future__ import annotations

from typing import Any

from slimkit.algorithms.compilation._ctranslate2 import CT2Generator
from slimkit.algorithms.compilation._ctranslate2_compiler import CTranslate2Compiler, loader_for, supported_configs
from slimkit.core.registry import register


@register
class CGenerate(CTranslate2Compiler):
    """Convert a Hugging Face causal LM to CTranslate2 and generate with CTranslate2's engine (int8 weights by default).

    CTranslate2's own Transformers converter writes the weights (``weight_bits`` 8: int8 with one scale per row,
    16: float16, 32: float32) and the tokenizer's vocabulary; the smashed model's ``forward(input_ids)`` returns
    logits for every position and ``generate()`` continues token ids (greedy, or sampling with ``do_sample``; a
    transformers streamer and stopping criteria work), so ``slimkit serve`` answers ``/generate`` with it. Saved as
    CTranslate2's folder (``ctranslate2/model.bin``, its own binary format, no pickle); loading needs no base model.
    Needs ``pip install 'slimkit[ctranslate2]'`` and the model's tokenizer (``cfg.add_tokenizer``).
    """

    algorithm_name = "c_generate"
    runner = CT2Generator

    def model_check_fn(self, model: Any) -> bool:
        """A decoder-only Hugging Face LM whose config CTranslate2's converter knows."""
        config = getattr(model, "config", None)
        return (loader_for(model) is not None and not getattr(config, "is_encoder_decoder", False)
                and callable(getattr(model, "can_generate", None)) and bool(model.can_generate()))

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return (f"It converts Hugging Face causal LMs whose config CTranslate2 converts ({supported_configs()}); "
                "encoder-decoder models go to c_translate, Whisper to c_whisper.")
