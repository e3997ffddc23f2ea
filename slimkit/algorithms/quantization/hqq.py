"""hqq: half-quadratic quantization (data-free optimised zeros/scales), stored packed (2/3/4/8 bits)."""

from __future__ import annotations

from typing import Any

import torch
from ConfigSpace import CategoricalHyperparameter, UniformIntegerHyperparameter

from slimkit.algorithms.quantization import _lowbit_support as support
from slimkit.algorithms.quantization._lowbit import LowBitQuantizer
from slimkit.algorithms.quantization._targets import model_targets
from slimkit.core.contract import LayerResult, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.engines.quantization.lowbit import quantize_model_hqq
from slimkit.engines.quantization.lowbit.blockwise import BlockStep, hqq_step
from slimkit.errors import ConfigError

#: ``compute_dtype`` values (Pruna spells them ``"torch.bfloat16"``) -> torch dtype (``None``: the model's own)
COMPUTE_DTYPES = {"model": None, "torch.float32": torch.float32, "torch.float16": torch.float16,
                  "torch.bfloat16": torch.bfloat16}


def _cast(model: Any, compute_dtype: str) -> None:
    dtype = COMPUTE_DTYPES[compute_dtype]
    if dtype is not None:
        model.to(dtype)


@register
class HQQ(LowBitQuantizer):
    """Half-Quadratic Quantization: per-group zero points (and optionally scales) fitted to a robust l_p error.

    Instead of min/max, each group's parameters minimise ``|W - dequant(quant(W))|^p`` with ``p = 0.7`` by
    half-quadratic splitting (alternating closed-form steps), which keeps outlier weights from spoiling the
    grid for the rest. No calibration data; seconds per model. Our own implementation (no ``hqq`` package).
    """

    algorithm_name = "hqq"
    produces = LayerResult(integer_zeros=False)  # fitted fractional zero points
    near_names = ("hqq_diffusers",)  # Pruna's names for close algorithms (errors point here)
    renamed_hyperparameters = {"hqq": {"weight_bits": "bits"}}  # Pruna's name
    references = {"HQQ": "https://mobiusml.github.io/hqq_blog/"}

    def get_hyperparameters(self) -> list:
        """Bits, group size, optimisation steps, scale refit, exclusions."""
        return [
            *support.weight_hyperparameters(with_sym=False),
            UniformIntegerHyperparameter("iters", 1, 200, default_value=20,
                                         meta={"desc": "Half-quadratic optimisation steps per layer."}),
            Boolean("optimize_scale", False, meta={"desc": "Also refit each group's scale by least squares at "
                                                           "every step (the zero is always optimised)."}),
            CategoricalHyperparameter("compute_dtype", list(COMPUTE_DTYPES), default_value="model",
                                      meta={"desc": "Float type the model computes in, dequantized weights included "
                                                    "(Pruna's name; 'torch.bfloat16' casts the model to bfloat16 "
                                                    "before quantizing); 'model' keeps the model's own."}),
        ]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        targets = model_targets(model)
        _cast(model, smash_config["compute_dtype"])
        specs = quantize_model_hqq(model, smash_config["bits"], smash_config["group_size"], smash_config["iters"],
                                   smash_config["optimize_scale"], tuple(smash_config["exclude"]))
        support.record(smash_config, specs, targets)
        return model

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Cast to the compute dtype (if one was chosen), then swap in the empty packed layers."""
        _cast(model, smash_config["compute_dtype"])
        return super().replay(model, smash_config, state)

    def stream_step(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> BlockStep:
        """HQQ one layer at a time, for a model streamed block by block.

        A streaming run keeps the checkpoint's dtype (or the one passed as ``dtype=`` / ``--dtype``), so a
        ``compute_dtype`` that would cast the model is refused with that advice.
        """
        if COMPUTE_DTYPES[smash_config["compute_dtype"]] is not None:
            raise ConfigError(f"hqq_compute_dtype={smash_config['compute_dtype']!r} casts the whole model, which a "
                              "streaming run does not do; leave it at 'model' and choose the model's dtype with "
                              "smash_folder(..., dtype='bfloat16') (--dtype bfloat16).")
        return hqq_step(smash_config["bits"], smash_config["group_size"], smash_config["iters"],
                        smash_config["optimize_scale"], tuple(smash_config["exclude"]))
