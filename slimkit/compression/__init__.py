"""NNI-shaped compression: pruning and quantization engines, speedup, and NNI 2.x's names for them.

This namespace is what NNI 2.x scripts import (``from slimkit.compression import L1NormPruner, ModelSpeedup,
count_flops_params, QAT_Quantizer`` in place of ``nni.compression.pytorch...`` and
``nni.algorithms.compression.pytorch.quantization``). Where NNI 1.x and 2.x use one class name with two
signatures (``LevelPruner``, ``FPGMPruner``, ``SlimPruner``, ``AGPPruner``, ``ADMMPruner``, ``MovementPruner``,
``LotteryTicketPruner``, ``SimulatedAnnealingPruner``, ``AutoCompressPruner``, ``AMCPruner``), the name here is
NNI 2.x's (:mod:`slimkit.compression.v2`) and the 1.x engine stays in :mod:`slimkit.compression.pruning`, as in
NNI itself. ``create_compressor`` is Auptimizer's
``aup.compression.create_compressor`` (``import slimkit as aup``). ``ModelSpeedup`` also takes
``SlimPruner``'s BatchNorm masks. ``ModelSpeedupTensorRT`` exists only to say which slimkit engine does that job.
"""

from typing import Any

from slimkit.compression.pruning import *  # noqa: F403
from slimkit.compression.pruning import __all__ as _pruning_all
from slimkit.compression.quantization import (
    BNNQuantizer,
    DoReFaQuantizer,
    LsqQuantizer,
    NaiveQuantizer,
    ObserverQuantizer,
    QAT_Quantizer,
    QATQuantizer,
    QuantGrad,
    Quantizer,
    QuantType,
    load_calibration,
    set_quant_scheme_dtype,
)
from slimkit.compression.speedup import *  # noqa: F403
from slimkit.compression.speedup import __all__ as _speedup_all
from slimkit.compression.v2 import (
    ActivationAPoZRankPruner,
    ActivationMeanRankPruner,
    ADMMPruner,
    AGPPruner,
    AMCPruner,
    AutoCompressPruner,
    FPGMPruner,
    L1NormPruner,
    L2NormPruner,
    LevelPruner,
    LinearPruner,
    LotteryTicketPruner,
    ModelSpeedup,
    ModelSpeedupTensorRT,
    MovementPruner,
    SimulatedAnnealingPruner,
    SlimPruner,
    TaylorFOWeightPruner,
    trace,
)
from slimkit.core import faces
from slimkit.evaluation.flops import count_flops_params


def create_compressor(model: Any, config: Any, *args: Any, **kwargs: Any) -> Any:
    """Auptimizer's ``aup.compression.create_compressor``: :func:`slimkit.experiment.create_compressor` itself."""
    return faces.provided("create_compressor")(model, config, *args, **kwargs)


_FACE = [
    "ADMMPruner", "AGPPruner", "AMCPruner", "ActivationAPoZRankPruner", "ActivationMeanRankPruner",
    "AutoCompressPruner", "BNNQuantizer",
    "DoReFaQuantizer", "FPGMPruner", "L1NormPruner", "L2NormPruner", "LevelPruner", "LinearPruner",
    "LotteryTicketPruner", "LsqQuantizer", "ModelSpeedup", "ModelSpeedupTensorRT", "MovementPruner", "NaiveQuantizer",
    "ObserverQuantizer", "QATQuantizer",
    "QAT_Quantizer", "QuantGrad", "QuantType", "Quantizer", "SimulatedAnnealingPruner", "SlimPruner",
    "TaylorFOWeightPruner",
    "count_flops_params", "create_compressor", "load_calibration", "set_quant_scheme_dtype", "trace",
]
__all__ = sorted(set(_pruning_all) | set(_speedup_all) | set(_FACE))  # noqa: PLE0605
