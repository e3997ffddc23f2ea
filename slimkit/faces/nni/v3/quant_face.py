"""What NNI 3.0's quantizers share: an engine quantizer behind NNI 3.0's ``(model, config_list, evaluator)``.

:class:`V3Quantizer` is mixed in before an engine of :mod:`slimkit.engines.quantization`. With an NNI 3.0
evaluator it translates the 3.0 ``config_list`` (:mod:`~slimkit.faces.nni.v3.quant_config`), fuses the
``fuse_names`` pairs (:mod:`~slimkit.faces.nni.v3.fusion`), hooks the engine to the evaluator's optimizer
through an :class:`~slimkit.faces.nni.v3.evaluator.OptimizerRelay`, and ``compress(max_steps, max_epochs)`` trains
through the evaluator and returns ``(model, calibration_config)`` in NNI 3.0's format
(:meth:`V3Quantizer.get_calibration_config`). Without one, the engine's NNI 1.x/2.x behaviour is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.engines.quantization.observers import code_range
from slimkit.faces.nni.v3.chain import V3Compressor
from slimkit.faces.nni.v3.evaluator import Evaluator, OptimizerRelay
from slimkit.faces.nni.v3.fusion import fuse_modules, fuse_pairs
from slimkit.faces.nni.v3.quant_config import quant_config_from_v3

__all__ = ["CalibrationV3", "V3Quantizer", "calibration_v3", "v2_arguments"]

#: NNI 3.0's calibration config: ``{layer: {target: {"scale", "zero_point", "quant_dtype", ...}}}``
CalibrationV3 = dict[str, dict[str, dict[str, Any]]]
_TARGET_NAMES = {"weight": "weight", "input": "_input_0", "output": "_output_0"}


def calibration_v3(calibration: Mapping[str, Mapping[str, Any]],
                   settings: Mapping[str, Mapping[str, Mapping[str, str]]]) -> CalibrationV3:
    """Slimkit's calibration config in NNI 3.0's shape (``_input_0``/``_output_0``, ``quant_bits``, ranges)."""
    out: CalibrationV3 = {}
    for layer, entry in calibration.items():
        targets: dict[str, dict[str, Any]] = {}
        for kind, target in _TARGET_NAMES.items():
            if f"{kind}_scale" not in entry:
                continue
            scale, zero_point, bits = entry[f"{kind}_scale"], entry[f"{kind}_zero_point"], entry[f"{kind}_bits"]
            given = settings.get(layer, {}).get(kind, {})
            low, high = code_range(scale, zero_point, bits)
            targets[target] = {"scale": scale.cpu(), "zero_point": zero_point.cpu(), "quant_bits": bits,
                               "quant_dtype": given.get("quant_dtype", f"int{bits}"),
                               "quant_scheme": given.get("quant_scheme"),
                               "tracked_min": torch.as_tensor(low), "tracked_max": torch.as_tensor(high)}
        out[layer] = targets
    return out


class V3Quantizer(V3Compressor):
    """Mixin (listed before the engine class) giving a slimkit quantizer NNI 3.0's signature and ``compress``."""

    #: the grids follow a scheme per type (per-channel weights, symmetric grids): QAT
    v3_schemes = False
    #: the ``quant_dtype`` of an entry that gives none (or ``None``); ``None``: the entry must give one
    v3_default_dtype: str | None = None
    _relay: OptimizerRelay | None = None
    _v3_settings: dict[str, dict[str, dict[str, str]]]
    _fusion_params: list[nn.Parameter]
    #: the ``(layer, norm)`` pairs ``fuse_names`` folded
    fused_pairs: list[tuple[str, str]]

    def _v3_config(self, model: nn.Module, config_list: Any, evaluator: Evaluator,
                   extra: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Check the evaluator, fuse, translate the 3.0 ``config_list``; add ``extra`` keys to every entry."""
        who = type(self).__name__
        if not isinstance(evaluator, Evaluator):
            raise QuantizationConfigError(f"{who} needs an NNI 3.0 evaluator (TorchEvaluator, TransformersEvaluator, "
                                          f"LightningEvaluator) that trains the model, got {type(evaluator).__name__}.")
        if not isinstance(model, nn.Module):
            raise QuantizationConfigError(f"{who} needs a torch.nn.Module, got {type(model).__name__}.")
        self.evaluator, self._relay = evaluator, OptimizerRelay()
        self.fused_pairs = fuse_pairs(model, config_list)
        self._fusion_params = fuse_modules(model, self.fused_pairs)
        self._v3_settings = {}
        translated = quant_config_from_v3(model, config_list, self.default_op_types,  # type: ignore[attr-defined]
                                          who, self.v3_schemes, self._v3_settings, self.v3_default_dtype)
        return [{**entry, **(extra or {})} for entry in translated]

    def _fuse_preprocess(self, evaluator: Evaluator) -> None:
        """Wrap the layers, relay the evaluator's optimizer steps to the engine, let it learn its parameters."""
        self._wrap_model()  # type: ignore[attr-defined]
        self.patch_optimizer()  # type: ignore[attr-defined]
        evaluator.relay_optimizer_step(self._relay)  # type: ignore[arg-type]
        evaluator.add_params([*self._relay.added_params, *self._fusion_params])  # type: ignore[union-attr]

    def compress(self, max_steps: int | None = None,  # type: ignore[override]
                 max_epochs: int | None = None) -> Any:
        """Quantize: NNI 3.0 trains through the evaluator, NNI 1.x/2.x wraps the model.

        NNI 3.0: train ``max_steps`` steps or ``max_epochs`` epochs through the evaluator (the chain's pruners
        first) and return ``(model, calibration_config)``. NNI 1.x/2.x (built with an optimizer): the wrapped model.
        """
        if self.evaluator is None:
            return super().compress()  # type: ignore[misc]
        self._run_chain(max_steps, max_epochs)
        return self.bound_model, self.get_calibration_config()

    def track_forward(self, *args: Any, **kwargs: Any) -> None:
        """NNI 3.0's ``track_forward(real_input)``: one forward pass without gradients (shapes, first ranges)."""
        with torch.no_grad():
            self.bound_model(*args, **kwargs)

    def get_calibration_config(self) -> CalibrationV3:
        """NNI 3.0's calibration config (:func:`calibration_v3`).

        ``{layer: {"weight" | "_input_0" | "_output_0": {"scale", "zero_point", "quant_bits", "quant_dtype",
        "quant_scheme", "tracked_min", "tracked_max"}}}``.
        """
        return calibration_v3(self.calibration_config(), getattr(self, "_v3_settings", {}))  # type: ignore[attr-defined]


def v2_arguments(who: str, optimizer: Any, fourth: Any, kwargs: dict[str, Any],
                 options: Sequence[str]) -> dict[str, Any]:
    """The engine's keyword arguments of an NNI 1.x/2.x call ``(model, config_list, optimizer, dummy_input, ...)``.

    The face class's third and fourth parameters are NNI 3.0's (``evaluator``, ...); in NNI 2.x's form they hold
    the optimizer and ``dummy_input`` (``fourth``: ``None`` or ``0`` when not given). ``options`` are the engine
    options accepted by name.
    """
    if "optimizer" in kwargs and optimizer is not None:
        raise QuantizationConfigError(f"{who} got an optimizer twice (third argument and optimizer=).")
    chosen = kwargs.pop("optimizer", optimizer)
    unknown = sorted(set(kwargs) - {"dummy_input", *options})
    if unknown:
        raise QuantizationConfigError(f"{who} got unexpected argument(s) {', '.join(unknown)}; NNI 3.0's form is "
                                      f"{who}(model, config_list, evaluator, ...) with a TorchEvaluator, NNI 2.x's "
                                      f"{who}(model, config_list, optimizer, dummy_input, "
                                      f"{', '.join(f'{o}=...' for o in options)}).")
    given = fourth is not None and not (isinstance(fourth, int) and not isinstance(fourth, bool) and fourth == 0)
    if given and "dummy_input" in kwargs:
        raise QuantizationConfigError(f"{who} got dummy_input twice (fourth argument and dummy_input=).")
    return {"optimizer": chosen, "dummy_input": fourth if given else kwargs.pop("dummy_input", None), **kwargs}
