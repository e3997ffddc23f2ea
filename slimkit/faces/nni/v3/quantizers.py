"""NNI's trainable quantizers with NNI 3.0's and NNI 1.x/2.x's signatures, each one engine of slimkit.

- ``QATQuantizer(model, config_list, evaluator, quant_start_step=0)`` (engine ``QATEngine``);
- ``LsqQuantizer(model, config_list, evaluator)`` (``LsqEngine``);
- ``LsqPlusQuantizer(model, config_list, evaluator)`` (``LsqPlusEngine``);
- ``DoReFaQuantizer(model, config_list, evaluator)`` (``DoReFaEngine``);
- ``BNNQuantizer(model, config_list, evaluator)`` (``BNNEngine``), all in :mod:`slimkit.engines.quantization`.

With an NNI 3.0 evaluator the ``config_list`` takes 3.0's keys (``target_names``, ``quant_dtype``,
``quant_scheme``, ``granularity``, ``fuse_names``, the ``op_names_re`` / ``exclude_op_*`` selectors) and
``compress(max_steps, max_epochs)`` returns ``(model, calibration_config)``; ``from_compressor`` chains them after
a pruner (:mod:`slimkit.faces.nni.v3.chain`). With an optimizer (or nothing) in the third place they are NNI
1.x/2.x's classes: ``(model, config_list, optimizer=None, dummy_input=None, <engine options>)`` and 2.x keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from slimkit.engines.quantization.bnn import BNNEngine
from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.engines.quantization.dorefa import DoReFaEngine
from slimkit.engines.quantization.lsq import LsqEngine
from slimkit.engines.quantization.lsq_plus import LsqPlusEngine
from slimkit.engines.quantization.qat import QATEngine
from slimkit.faces.nni.v3.evaluator import Evaluator
from slimkit.faces.nni.v3.quant_face import V3Quantizer, v2_arguments

__all__ = ["BNNQuantizer", "DoReFaQuantizer", "LsqPlusQuantizer", "LsqQuantizer", "QATQuantizer"]


def _no_wrappers(who: str, existed_wrappers: Any, extra: Mapping[str, Any]) -> None:
    if existed_wrappers is not None:
        raise QuantizationConfigError(f"{who}(existed_wrappers=...) is NNI's internal argument of from_compressor; "
                                      f"chain with {who}.from_compressor(pruner, config_list, ...).")
    if extra:
        raise QuantizationConfigError(f"{who} got unexpected argument(s) {', '.join(sorted(extra))} with an NNI 3.0 "
                                      "evaluator.")


class QATQuantizer(V3Quantizer, QATEngine):
    """Quantization-aware training with EMA-observed activation ranges (Jacob et al., 2018).

    NNI 3.0: ``QATQuantizer(model, config_list, evaluator, quant_start_step=0)``: activations are fake-quantized
    once ``quant_start_step`` optimizer steps have run (the observers settle first); ``quant_scheme``
    ``"symmetric"``/``"affine"`` and ``granularity`` ``"per_channel"``/``"out_channel"`` for weights choose the
    grids (per tensor by default, as in NNI 3.0). NNI 1.x/2.x: ``QATQuantizer(model, config_list, optimizer=None,
    dummy_input=None, ema_decay=0.99, per_channel=True)`` with ``quant_types`` / ``quant_bits`` entries.
    """

    v3_schemes = True
    v3_channel_activations = True

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], evaluator: Evaluator | Any = None,
                 quant_start_step: int | Any = 0, existed_wrappers: Any = None, **kwargs: Any) -> None:
        if not isinstance(evaluator, Evaluator):
            if existed_wrappers is not None:
                kwargs.setdefault("ema_decay", existed_wrappers)  # NNI 2.x's fifth positional argument
            QATEngine.__init__(self, model, config_list, **v2_arguments(
                "QATQuantizer", evaluator, quant_start_step, kwargs, ("ema_decay", "per_channel")))
            return
        _no_wrappers("QATQuantizer", existed_wrappers, kwargs)
        if isinstance(quant_start_step, bool) or not isinstance(quant_start_step, int):
            raise QuantizationConfigError(f"QATQuantizer quant_start_step must be an integer, got "
                                          f"{quant_start_step!r}.")
        self.quant_start_step = max(quant_start_step, 0)
        translated = self._v3_config(model, config_list, evaluator, {"quant_start_step": self.quant_start_step})
        QATEngine.__init__(self, model, translated, self._relay, per_channel=False)


class _Plain(V3Quantizer):
    """NNI 3.0's ``(model, config_list, evaluator, existed_wrappers=None)``, NNI 2.x's engine form otherwise."""

    _engine: type
    _options: tuple[str, ...] = ()

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], evaluator: Evaluator | Any = None,
                 existed_wrappers: Any = None, **kwargs: Any) -> None:
        who = type(self).__name__
        if not isinstance(evaluator, Evaluator):
            self._engine.__init__(self, model, config_list,
                                  **v2_arguments(who, evaluator, existed_wrappers, kwargs, self._options))
            return
        _no_wrappers(who, existed_wrappers, kwargs)
        self._engine.__init__(self, model, self._v3_config(model, config_list, evaluator), self._relay)


class LsqQuantizer(_Plain, LsqEngine):
    """Learned step size quantization (Esser et al., 2020): the step of every quantized tensor trains with the model.

    NNI 3.0: ``LsqQuantizer(model, config_list, evaluator)``; the steps join the evaluator's optimizer. NNI 2.x:
    ``LsqQuantizer(model, config_list, optimizer=None, dummy_input=None)``.
    """

    _engine = LsqEngine


class LsqPlusQuantizer(_Plain, LsqPlusEngine):
    """LSQ+ (Bhalgat et al., 2020): LSQ with a learned offset for activations; new in NNI 3.0.

    ``LsqPlusQuantizer(model, config_list, evaluator)``; the steps and offsets join the evaluator's optimizer.
    """

    _engine = LsqPlusEngine


class DoReFaQuantizer(_Plain, DoReFaEngine):
    """DoReFa-Net (Zhou et al., 2016): tanh-normalised k-bit weights, [0, 1]-clamped k-bit outputs.

    NNI 3.0: ``DoReFaQuantizer(model, config_list, evaluator)`` (targets ``weight`` and ``_output_``). NNI 2.x:
    ``DoReFaQuantizer(model, config_list, optimizer=None, dummy_input=None, rescale=True)``.
    """

    _engine = DoReFaEngine
    _options = ("rescale",)


class BNNQuantizer(_Plain, BNNEngine):
    """Binarized networks (Courbariaux et al., 2016): +-1 weights (scaled) and outputs, 1 bit each.

    NNI 3.0: ``BNNQuantizer(model, config_list, evaluator)`` for ``weight`` and ``_output_`` (``quant_dtype``
    ``None``, as NNI's example gives, or ``"int1"``). NNI 2.x: ``BNNQuantizer(model, config_list, optimizer=None,
    dummy_input=None, scale_weights=True)``.
    """

    _engine = BNNEngine
    _options = ("scale_weights",)
    v3_default_dtype = "int1"
