"""NNI 3.0's ``PtqQuantizer``: post-training quantization calibrated through the evaluator, over slimkit's observer.

``PtqQuantizer(model, config_list, evaluator)``; ``model, calibration = quantizer.compress(max_steps,
max_epochs)`` runs the evaluator's training (when a duration is given) and its evaluating function while the
ranges are observed, fixes the scales and zero points (slimkit's
:class:`~slimkit.engines.quantization.observer.ObserverQuantizer`: a symmetric weight grid, an affine grid for
inputs and outputs, one scale per tensor) and returns the calibration in NNI 3.0's format. ``fuse_names`` folds
BatchNorms first. ``quantizer.freeze()`` then turns the layers into slimkit's integer layers (int8 weight codes
and fixed scales).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.engines.quantization.observer import ObserverQuantizer
from slimkit.faces.nni.v3.evaluator import Evaluator, TorchEvaluator
from slimkit.faces.nni.v3.quant_face import CalibrationV3, V3Quantizer

__all__ = ["PtqQuantizer"]


class PtqQuantizer(V3Quantizer, ObserverQuantizer):
    """NNI 3.0's post-training quantizer: ``PtqQuantizer(model, config_list, evaluator)``.

    ``config_list`` takes NNI 3.0's keys (:mod:`slimkit.faces.nni.v3.quant_config`). ``quant_scheme`` is
    checked but the grids are the observer's: weights symmetric, inputs and outputs affine (a symmetric grid is
    the affine one with zero point 0). NNI 3.0's ``is_bias_correction`` is not offered; chain a PTQ after a pruner
    by compressing the pruner first (PTQ does not train, so there is nothing to run together).
    """

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], evaluator: Evaluator,
                 existed_wrappers: Any = None, is_bias_correction: bool = False) -> None:
        if existed_wrappers is not None or is_bias_correction:
            raise QuantizationConfigError("PtqQuantizer(existed_wrappers=..., is_bias_correction=True) is not "
                                          "supported yet: quantize a model that no other compressor wraps.")
        if not isinstance(evaluator, Evaluator):
            raise QuantizationConfigError(f"PtqQuantizer needs an evaluator (TorchEvaluator, TransformersEvaluator) "
                                          f"whose evaluating function runs calibration data, got "
                                          f"{type(evaluator).__name__}.")
        ObserverQuantizer.__init__(self, model, self._v3_config(model, config_list, evaluator))

    def compress(self, max_steps: int | None = None,  # type: ignore[override]
                 max_epochs: int | None = None) -> tuple[nn.Module, CalibrationV3]:
        """Observe through the evaluator (training for the duration given, then evaluating); fix the grids."""
        evaluator = self.evaluator
        assert evaluator is not None
        can_evaluate = not isinstance(evaluator, TorchEvaluator) or evaluator.evaluating_func is not None
        if max_steps is None and max_epochs is None and not can_evaluate:
            raise QuantizationConfigError("PtqQuantizer calibrates on data the evaluator runs: give the "
                                          "TorchEvaluator an evaluating_func, or compress(max_steps, max_epochs).")
        with evaluator.bound(self.bound_model):
            if max_steps is not None or max_epochs is not None:
                evaluator.train(max_steps=max_steps, max_epochs=max_epochs)
            if can_evaluate:
                with torch.no_grad():
                    evaluator.evaluate()
        ObserverQuantizer.compress(self)
        return self.bound_model, self.get_calibration_config()
