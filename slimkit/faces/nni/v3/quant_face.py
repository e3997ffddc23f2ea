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
from functools import partial
from typing import Any

import torch
from torch import nn

from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.engines.quantization.observers import code_range, qmax_for
from slimkit.faces.nni.v3.chain import V3Compressor
from slimkit.faces.nni.v3.evaluator import Evaluator, OptimizerRelay
from slimkit.faces.nni.v3.fusion import (
    bake_modules,
    folded_weight,
    fuse_modules,
    fuse_pairs,
    statistics_hook,
    unfuse_modules,
)
from slimkit.faces.nni.v3.quant_config import quant_config_from_v3

__all__ = ["CalibrationV3", "V3Quantizer", "calibration_v3", "signed_offset", "v2_arguments"]

#: NNI 3.0's calibration config: ``{layer: {target: {"scale", "zero_point", "quant_dtype", ...}}}``
CalibrationV3 = dict[str, dict[str, dict[str, Any]]]
_TARGET_NAMES = {"weight": "weight", "input": "_input_0", "output": "_output_0"}


def calibration_v3(calibration: Mapping[str, Mapping[str, Any]],
                   settings: Mapping[str, Mapping[str, Mapping[str, str]]]) -> CalibrationV3:
    """Slimkit's calibration config in NNI 3.0's shape (``_input_0``/``_output_0``, ``quant_bits``, ranges).

    Zero points follow NNI 3.0's grids: signed for ``int<bits>`` (:func:`signed_offset`), unsigned for ``uint``.
    """
    out: CalibrationV3 = {}
    for layer, entry in calibration.items():
        targets: dict[str, dict[str, Any]] = {}
        for kind, target in _TARGET_NAMES.items():
            if f"{kind}_scale" not in entry:
                continue
            scale, zero_point, bits = entry[f"{kind}_scale"], entry[f"{kind}_zero_point"], entry[f"{kind}_bits"]
            given = settings.get(layer, {}).get(kind, {})
            if scale.numel() > 1:  # per channel: the range of each channel, shaped like its scale (as NNI 3.0)
                low, high = ((0 - zero_point) * scale).cpu(), ((qmax_for(bits) - zero_point) * scale).cpu()
            else:
                low, high = code_range(scale, zero_point, bits)
            dtype = given.get("quant_dtype", f"int{bits}")
            zero_point = zero_point - signed_offset(dtype, bits)  # NNI 3.0's int grids are signed
            targets[target] = {"scale": scale.cpu(), "zero_point": zero_point.cpu(), "quant_bits": bits,
                               "quant_dtype": dtype,
                               "quant_scheme": given.get("quant_scheme"),
                               "tracked_min": torch.as_tensor(low), "tracked_max": torch.as_tensor(high)}
        out[layer] = targets
    return out


def signed_offset(dtype: str, bits: int) -> int:
    """What NNI 3.0's zero point of a ``dtype`` grid is below slimkit's (unsigned codes ``[0, 2**bits - 1]``).

    NNI 3.0 quantizes ``int<bits>`` to ``[-2**(bits-1), 2**(bits-1) - 1]`` and ``uint<bits>`` to
    ``[0, 2**bits - 1]``; slimkit's codes are always unsigned, so an ``int`` zero point is ``2**(bits-1)`` lower in
    NNI's calibration config.
    """
    return 0 if str(dtype).startswith("uint") else 2 ** (bits - 1)


class V3Quantizer(V3Compressor):
    """Mixin (listed before the engine class) giving a slimkit quantizer NNI 3.0's signature and ``compress``."""

    #: the grids follow a scheme per type (per-channel weights, symmetric grids): QAT
    v3_schemes = False
    #: inputs and outputs may take ``granularity: "per_channel"`` (one scale per channel, dim 1)
    v3_channel_activations = False
    #: weights may take ``granularity: "out_channel"`` (``None``: when ``v3_schemes``)
    v3_channel_weights: bool | None = None
    #: the ``quant_dtype`` of an entry that gives none (or ``None``); ``None``: the entry must give one
    v3_default_dtype: str | None = None
    _relay: OptimizerRelay | None = None
    _unwrapped_calibration: CalibrationV3 | None = None
    _v3_settings: dict[str, dict[str, dict[str, str]]]
    _fusion_params: list[nn.Parameter]
    #: the ``(layer, norm)`` pairs ``fuse_names`` folded
    fused_pairs: list[tuple[str, str]]

    def _v3_config(self, model: nn.Module, config_list: Any, evaluator: Evaluator | None,
                   extra: Mapping[str, Any] | None = None, optional: bool = False) -> list[dict[str, Any]]:
        """Check the evaluator, fuse, translate the 3.0 ``config_list``; add ``extra`` keys to every entry.

        ``optional``: the quantizer works without an evaluator too (``evaluator`` may be ``None``).
        """
        who = type(self).__name__
        if not isinstance(evaluator, Evaluator) and not (optional and evaluator is None):
            raise QuantizationConfigError(f"{who} needs an NNI 3.0 evaluator (TorchEvaluator, TransformersEvaluator, "
                                          f"LightningEvaluator) that trains the model, got {type(evaluator).__name__}.")
        if not isinstance(model, nn.Module):
            raise QuantizationConfigError(f"{who} needs a torch.nn.Module, got {type(model).__name__}.")
        self.evaluator, self._relay = evaluator, OptimizerRelay()
        self.fused_pairs = fuse_pairs(model, config_list)  # folded once the engine wraps the model
        self._fusion_params = []
        self._v3_settings = {}
        translated = quant_config_from_v3(model, config_list, self.default_op_types,  # type: ignore[attr-defined]
                                          who, self.v3_schemes, self._v3_settings, self.v3_default_dtype,
                                          self.v3_channel_weights, self.v3_channel_activations)
        return [{**entry, **(extra or {})} for entry in translated]

    def _create_wrappers(self) -> list[Any]:
        """The engine's wrappers; a fused layer's wrapper updates its BatchNorm's statistics in train mode."""
        wrappers = super()._create_wrappers()  # type: ignore[misc]
        norms = dict(getattr(self, "fused_pairs", []))
        for wrapper in wrappers:
            if wrapper.name in norms:
                norm = self.bound_model.get_submodule(norms[wrapper.name])  # type: ignore[attr-defined]
                norm = getattr(norm, "norm", norm)
                wrapper.register_forward_pre_hook(statistics_hook(wrapper.module, norm))
                wrapper.layer_weight = partial(folded_weight, wrapper.module, norm)  # what the quantizer sees
        return wrappers

    def _wrap_model(self) -> None:
        """Wrap the layers; fused pairs are folded while the model is wrapped."""
        super()._wrap_model()  # type: ignore[misc]
        if getattr(self, "fused_pairs", None):
            self._fusion_params += fuse_modules(self.bound_model, self.fused_pairs)  # type: ignore[attr-defined]

    def _restore_layers(self) -> None:
        """Put the layers back; fused pairs become the plain layer and its BatchNorm again (NNI's unwrap).

        The calibration as it stands is kept for :meth:`get_calibration_config` while the model is unwrapped.
        """
        if self.is_wrapped and getattr(self, "_v3_settings", None) is not None:  # type: ignore[attr-defined]
            try:
                self._unwrapped_calibration = self.get_calibration_config()
            except QuantizationConfigError:
                self._unwrapped_calibration = None
        super()._restore_layers()  # type: ignore[misc]
        unfuse_modules(self.bound_model, getattr(self, "fused_pairs", []))  # type: ignore[attr-defined]

    def bake_fusion(self) -> None:
        """Fold the BatchNorms' current statistics into the fused layers for good (their places: ``nn.Identity``).

        :meth:`freeze` and the exports do it first, so the integer codes and the exported weights are the folded
        ones; the statistics no longer follow training afterwards.
        """
        was_wrapped = self.is_wrapped  # type: ignore[attr-defined]
        self._wrap_model()
        bake_modules(self.bound_model, getattr(self, "fused_pairs", []))  # type: ignore[attr-defined]
        if not was_wrapped:
            super()._restore_layers()  # type: ignore[misc]

    def quantized_state_dict(self) -> dict[str, torch.Tensor]:
        """The engine's export state, with fused BatchNorms folded for good first (:meth:`bake_fusion`)."""
        self.bake_fusion()
        return super().quantized_state_dict()  # type: ignore[misc]

    def freeze(self) -> nn.Module:
        """The engine's integer layers, with fused BatchNorms folded for good first (:meth:`bake_fusion`)."""
        self.bake_fusion()
        return super().freeze()  # type: ignore[misc]

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
        """NNI 3.0's calibration config (:func:`calibration_v3`); once unwrapped, the one at unwrapping.

        ``{layer: {"weight" | "_input_0" | "_output_0": {"scale", "zero_point", "quant_bits", "quant_dtype",
        "quant_scheme", "tracked_min", "tracked_max"}}}``.
        """
        if not self.is_wrapped and self._unwrapped_calibration is not None:  # type: ignore[attr-defined]
            return self._unwrapped_calibration  # as at unwrapping: a speedup since has not changed it, as in NNI
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
