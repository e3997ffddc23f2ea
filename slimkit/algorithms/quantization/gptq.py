"""gptq: Hessian-based error-compensating low-bit weight quantization with calibration text, stored packed."""

from __future__ import annotations

from typing import Any

from ConfigSpace import OrdinalHyperparameter, UniformFloatHyperparameter

from slimkit.algorithms.quantization import _lowbit_support as support
from slimkit.algorithms.quantization._lowbit import CalibratedLowBitQuantizer, clip_search_hyperparameter
from slimkit.core.contract import LayerResult, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.engines.quantization.lowbit.blockwise import BlockStep, gptq_step


@register
class GPTQ(CalibratedLowBitQuantizer):
    """GPTQ: Hessian-based low-bit quantization of Linear layers with error compensation, on calibration text.

    Each layer is quantized column by column; every column's rounding error is pushed onto the columns not
    yet quantized through the inverse Hessian of the layer's output error. Layers are processed one
    transformer block at a time (inputs captured at block 0, then carried through the already quantized
    blocks), so peak memory stays near one block. Options: activation order (most salient columns first),
    damping, group size, symmetric grid, clipping search. Needs a tokenizer and data (e.g.
    ``cfg.add_tokenizer(tok); cfg.add_data("PyDocText")``). Stored packed like rtn.
    """

    algorithm_name = "gptq"
    produces = LayerResult()
    renamed_hyperparameters = {"gptq": {"weight_bits": "bits"}}  # Pruna's name
    references = {"GPTQ": "https://arxiv.org/abs/2210.17323"}

    def get_hyperparameters(self) -> list:
        """Bits, group size, sym, act order, damping, block size, clipping, calibration size, exclusions."""
        return [
            *support.weight_hyperparameters(),
            Boolean("act_order", True, meta={"desc": "Quantize columns by decreasing Hessian diagonal (group "
                                                     "parameters fixed up front: no column permutation stored)."}),
            UniformFloatHyperparameter("damp", 1e-4, 1.0, default_value=0.01, log=True,
                                       meta={"desc": "Fraction of the mean Hessian diagonal added to it for a stable "
                                                     "inverse."}),
            OrdinalHyperparameter("block_size", [32, 64, 128, 256], default_value=128,
                                  meta={"desc": "Columns updated together before the lazy update of the rest."}),
            clip_search_hyperparameter(),
            *support.calibration_hyperparameters(),
        ]

    def stream_step(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> BlockStep:
        """GPTQ on each block's calibration inputs, for a model streamed block by block."""
        return gptq_step(support.read_calibration_ids(model, smash_config), smash_config["bits"],
                         smash_config["group_size"], smash_config["sym"], smash_config["act_order"],
                         float(smash_config["damp"]), smash_config["block_size"], smash_config["clip_search"],
                         tuple(smash_config["exclude"]))
