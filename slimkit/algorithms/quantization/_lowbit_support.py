"""What the low-bit smash algorithms (rtn, hqq, gptq, awq) share.

Hyperparameters, model checks, the calibration ids they read from a SmashConfig, and the replay that rebuilds
empty packed layers on load.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ConfigSpace import OrdinalHyperparameter, UniformIntegerHyperparameter
from torch import nn

from slimkit.algorithms.quantization._targets import record_coverage
from slimkit.core.hyperparameters import Boolean, Hyperparameter, ListHyperparameter
from slimkit.core.weights import Target
from slimkit.engines.quantization.experts import is_experts_spec
from slimkit.engines.quantization.lowbit.calibration import calibration_ids, find_blocks
from slimkit.engines.quantization.lowbit.experts import replay_experts
from slimkit.engines.quantization.lowbit.layers import replay_layers
from slimkit.errors import ModelNotSupportedError

DEFAULT_EXCLUDE = ("lm_head",)
STATE_KEY = "layers"


def weight_hyperparameters(default_group: int = 128, with_sym: bool = True) -> list[Hyperparameter]:
    """``bits``, ``group_size``, (``sym``) and ``exclude``: the knobs every low-bit quantizer has."""
    hps: list[Hyperparameter] = [
        OrdinalHyperparameter("bits", [2, 3, 4, 8], default_value=4,
                              meta={"desc": "Bits per weight (codes are stored packed: 4 bits = two per byte)."}),
        OrdinalHyperparameter("group_size", [16, 32, 64, 128, 256, 512, 1024, -1], default_value=default_group,
                              meta={"desc": "Consecutive input columns sharing one scale and zero; smaller is "
                                            "more accurate and a little larger on disk; -1: one group per row "
                                            "(per-channel)."}),
    ]
    if with_sym:
        hps.append(Boolean("sym", False, meta={"desc": "Symmetric grid (fixed zero at the middle code) instead of "
                                                       "a per-group min/max grid."}))
    hps.append(ListHyperparameter("exclude", DEFAULT_EXCLUDE,
                                  meta={"desc": "Layers kept in full precision: exact names or glob patterns (a "
                                                "pattern also matches the last name part); lm_head by default."}))
    return hps


def calibration_hyperparameters(n_samples: int = 32, seq_len: int = 512) -> list[Hyperparameter]:
    """``n_calibration_samples`` and ``seq_len`` of the calibration token blocks."""
    return [
        UniformIntegerHyperparameter("n_calibration_samples", 1, 1024, default_value=n_samples,
                                     meta={"desc": "Token blocks of calibration text taken from the dataset."}),
        UniformIntegerHyperparameter("seq_len", 8, 8192, default_value=seq_len,
                                     meta={"desc": "Tokens per calibration block (capped at the model's "
                                                   "max_position_embeddings)."}),
    ]


def is_block_language_model(model: Any) -> bool:
    """A token-id language model (has input embeddings) with a list of transformer blocks holding Linear layers."""
    if not isinstance(model, nn.Module) or not callable(getattr(model, "get_input_embeddings", None)):
        return False
    try:
        find_blocks(model)
        return isinstance(model.get_input_embeddings(), nn.Embedding)
    except (ModelNotSupportedError, NotImplementedError, AttributeError):
        return False


def read_calibration_ids(model: nn.Module, smash_config: Any) -> Any:
    """Calibration ids ``[n, seq_len]`` from the SmashConfig's data and tokenizer, checked against the vocabulary."""
    seq_len = int(smash_config["seq_len"])
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(limit, int) and limit > 0:
        seq_len = min(seq_len, limit)
    vocab = model.get_input_embeddings().num_embeddings
    return calibration_ids(smash_config.data, smash_config.tokenizer, int(smash_config["n_calibration_samples"]),
                           seq_len, vocab)


def record(smash_config: Any, specs: dict[str, dict], targets: Sequence[Target]) -> None:
    """Store the packed layers' specs as the replay state, with the coverage and any RTN-fallback experts.

    ``targets`` are the model's targets found before quantizing (:func:`model_targets`); ``rtn_fallback`` lists the
    MoE experts quantized with RTN for lack of calibration tokens.
    """
    smash_config.state[STATE_KEY] = specs
    record_coverage(smash_config.state, targets, specs, tuple(smash_config["exclude"]), DEFAULT_EXCLUDE)
    fallback = {n: s["rtn_fallback"] for n, s in specs.items() if is_experts_spec(s) and s.get("rtn_fallback")}
    if fallback:
        smash_config.state["rtn_fallback"] = fallback


def replay(model: nn.Module, state: dict[str, Any]) -> nn.Module:
    """Swap the recorded layers for empty PackedLinear / PackedExperts modules; the saved buffers then load strictly."""
    specs = state[STATE_KEY]
    replay_layers(model, {n: s for n, s in specs.items() if not is_experts_spec(s)})
    return replay_experts(model, specs)
