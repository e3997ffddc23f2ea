"""Models the algorithm harness runs on: zoo entries plus a few local ones made to be rejected."""

from __future__ import annotations

from typing import Any

import torch

from slimkit import zoo
from tests.engines.quantization.tiny_moe import tiny_moe


class ConvOnly(torch.nn.Module):
    """No nn.Linear at all: int8_dynamic must refuse it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class NoWeights(torch.nn.Module):
    """No parameters: pruners and half must refuse it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def _not_a_module(x: torch.Tensor) -> torch.Tensor:
    return x


def tiny_unet() -> torch.nn.Module:
    """A diffusers UNet2DModel from a config (3 levels, attention in the middle one), random weights."""
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    return UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(16, 32, 32), norm_num_groups=8,
                       down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D"),
                       up_block_types=("UpBlock2D", "AttnUpBlock2D", "UpBlock2D"))


def tiny_cond_unet() -> torch.nn.Module:
    """A diffusers UNet2DConditionModel (text-conditioned, cross-attention) from a config, random weights."""
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    return UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
                                block_out_channels=(16, 32, 32), norm_num_groups=8, cross_attention_dim=24,
                                attention_head_dim=4,
                                down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"))


def tiny_sentence_encoder() -> torch.nn.Module:
    """The zoo's SentenceEncoder (mean pooling + L2 norm) around a two-layer random BertModel (sdpa attention)."""
    from transformers import BertConfig, BertModel

    from slimkit.zoo.minilm import SentenceEncoder

    torch.manual_seed(0)
    config = BertConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=64)
    return SentenceEncoder(BertModel(config, add_pooling_layer=False))


def tiny_opt() -> torch.nn.Module:
    """A causal LM llama.cpp does not run (OPT): GGUF export must refuse it, quantizers take it."""
    import transformers

    torch.manual_seed(0)
    config = transformers.OPTConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, ffn_dim=128,
                                    num_attention_heads=4, word_embed_proj_dim=64, max_position_embeddings=64)
    return transformers.OPTForCausalLM(config).eval()


def tiny_deit() -> torch.nn.Module:
    """transformers' DeiT with its distillation token (two tokens ToMe must keep), 32x32 images, random weights."""
    import transformers

    torch.manual_seed(0)
    config = transformers.DeiTConfig(image_size=32, patch_size=8, hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=2, num_attention_heads=4)
    return transformers.DeiTForImageClassificationWithTeacher(config).eval()


def tiny_bart() -> torch.nn.Module:
    """A 256-token BART (byte vocabulary, token 0 = start/end/pad) for the encoder-decoder compilers, random weights."""
    import transformers

    config = transformers.BartConfig(vocab_size=256, d_model=32, encoder_layers=1, decoder_layers=1,
                                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=0, bos_token_id=0,
                                     eos_token_id=0, decoder_start_token_id=0, forced_eos_token_id=None)
    return transformers.BartForConditionalGeneration(config).eval()


def tiny_whisper() -> torch.nn.Module:
    """A 264-token Whisper (bytes + Whisper's special tokens, no timestamps; see whisper_tokenizer), random weights."""
    import transformers

    ids = dict(zip(WHISPER_SPECIAL, range(256, 256 + len(WHISPER_SPECIAL)), strict=True))
    torch.manual_seed(0)
    config = transformers.WhisperConfig(
        vocab_size=256 + len(WHISPER_SPECIAL), num_mel_bins=16, d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=16, max_target_positions=32, pad_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|endoftext|>"],
        decoder_start_token_id=ids["<|startoftranscript|>"], suppress_tokens=[], begin_suppress_tokens=[],
        init_std=0.5)  # wide weights: greedy decoding wanders instead of repeating one token
    model = transformers.WhisperForConditionalGeneration(config).eval()
    model.generation_config.no_timestamps_token_id = ids["<|notimestamps|>"]
    return model


#: Whisper's special tokens, ids 256.. after the 256 bytes (English-only: no language token)
WHISPER_SPECIAL = ("<|endoftext|>", "<|startoftranscript|>", "<|translate|>", "<|transcribe|>",
                   "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>")


def whisper_tokenizer():
    """The byte tokenizer with Whisper's special tokens (ids 256..263), the vocabulary of tiny_whisper."""
    from slimkit.zoo._hf import byte_tokenizer

    tokenizer = byte_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": list(WHISPER_SPECIAL)})
    return tokenizer


def _whisper_inputs() -> dict[str, torch.Tensor]:
    """Log-mel features [2, 16 mels, 32 frames] (the encoder's two convolutions halve them to 16 positions)."""
    return {"input_features": torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(1))}


def _seq2seq_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    decoder = torch.cat([torch.zeros(2, 1, dtype=torch.long), torch.randint(1, 256, (2, 5), generator=g)], dim=1)
    return {"input_ids": torch.randint(1, 256, (2, 10), generator=g), "decoder_input_ids": decoder}


def _token_inputs() -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))}


def _sentence_inputs() -> dict[str, torch.Tensor]:
    """Two rows, the second right-padded (lengths 12 and 5)."""
    ids = torch.randint(1, 256, (2, 12), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    return {"input_ids": ids * mask, "attention_mask": mask}


def _unet_inputs(channels: int, text: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    inputs = {"sample": torch.randn(2, channels, 16, 16, generator=g), "timestep": torch.tensor(500)}
    if text:
        inputs["encoder_hidden_states"] = torch.randn(2, 5, 24, generator=g)
    return inputs


LOCAL = {
    "conv_only": (ConvOnly, lambda: torch.randn(1, 3, 8, 8)),
    "no_weights": (NoWeights, lambda: torch.randn(2, 4)),
    "not_a_module": (lambda: _not_a_module, lambda: torch.randn(2, 4)),
    "tiny_unet": (tiny_unet, lambda: _unet_inputs(3, text=False)),
    "tiny_cond_unet": (tiny_cond_unet, lambda: _unet_inputs(4, text=True)),
    "tiny_sentence_encoder": (tiny_sentence_encoder, _sentence_inputs),
    "tiny_opt": (tiny_opt, _token_inputs),
    "tiny_mixtral": (lambda: tiny_moe("mixtral"), _token_inputs),
    "tiny_qwen2_moe": (lambda: tiny_moe("qwen2_moe"), _token_inputs),
    "tiny_bart": (tiny_bart, _seq2seq_inputs),
    "tiny_whisper": (tiny_whisper, _whisper_inputs),
    "tiny_deit": (tiny_deit, lambda: torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))),
}


def get_model(name: str) -> tuple[Any, Any, Any]:
    """Return (model, example_inputs, factory) for a harness model name; factory rebuilds the architecture."""
    if name in LOCAL:
        factory, inputs = LOCAL[name]
        torch.manual_seed(0)
        return factory(), inputs(), factory
    loaded = zoo.load(name)
    return loaded.model, loaded.example_inputs, None


def tiny_unet_with_inputs() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """``--model tests.algorithms.models:tiny_unet_with_inputs`` for the command line tests."""
    return tiny_unet().eval(), _unet_inputs(3, text=False)


def tiny_mixtral_with_inputs() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """``--model tests.algorithms.models:tiny_mixtral_with_inputs``: a tiny Mixtral (4 experts, top-2)."""
    return tiny_moe("mixtral"), _token_inputs()


def tiny_bart_with_tokenizer() -> zoo.ZooModel:
    """``--model tests.algorithms.models:tiny_bart_with_tokenizer``: tiny BART with its byte tokenizer (c_translate)."""
    from slimkit.zoo._hf import byte_tokenizer

    torch.manual_seed(0)
    return zoo.ZooModel(tiny_bart(), _seq2seq_inputs(), "tests.algorithms.models:tiny_bart_with_tokenizer",
                        tokenizer=byte_tokenizer(), task="seq2seq")
