"""rtn: group-wise round-to-nearest low-bit weight quantization, stored packed (2/3/4/8 bits)."""

from __future__ import annotations

from typing import Any

from slimkit.algorithms.quantization import _lowbit_support as support
from slimkit.algorithms.quantization._lowbit import LowBitQuantizer
from slimkit.core.contract import LayerResult, SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.quantization.lowbit.blockwise import BlockStep, rtn_step


@register
class RTN(LowBitQuantizer):
    """Round-to-nearest weight-only quantization of Linear layers to 2/3/4/8 bits with per-group scales and zeros.

    Each group of ``group_size`` input columns gets a float16 scale and zero from its min/max (or a symmetric
    grid); codes are packed (two 4-bit codes per byte), so files and memory really shrink. Layers dequantise
    on the fly; no data is needed. The baseline that hqq, gptq and awq improve on.
    """

    algorithm_name = "rtn"
    produces = LayerResult()
    renamed_hyperparameters = {"rtn": {"weight_bits": "bits"}}  # Pruna's name
    references = {"GPTQ paper (RTN baseline)": "https://arxiv.org/abs/2210.17323"}

    def get_hyperparameters(self) -> list:
        """Bits, group size, symmetric grid, exclusions."""
        return support.weight_hyperparameters()

    def stream_step(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> BlockStep:
        """RTN one layer at a time, for a model streamed block by block."""
        return rtn_step(smash_config["bits"], smash_config["group_size"], smash_config["sym"],
                        tuple(smash_config["exclude"]))
