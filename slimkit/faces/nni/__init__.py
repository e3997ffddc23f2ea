"""NNI's face: the class names, signatures and import paths NNI scripts use, over slimkit's engines.

- :mod:`slimkit.faces.nni.v2`: NNI 2.x's pruners (``L1NormPruner``, ``LevelPruner``, ``AGPPruner``...,
  ``compress() -> (model, masks)``), ``ModelSpeedupTensorRT`` and ``trace``;
- :mod:`slimkit.faces.nni.v3`: NNI 3.0's evaluators (``TorchEvaluator``...), ``TaylorPruner``, the quantizers
  with 3.0's signatures (``QATQuantizer``..., ``LsqPlusQuantizer``, ``PtqQuantizer``), the layer-wise distillers,
  ``from_compressor`` chaining, module fusion, 3.0's config keys and paths (``slimkit.compression.pruning|
  quantization|distillation|speedup|utils``); the classes 2.x and 3.0 share take both signatures;
- :mod:`slimkit.faces.nni.v1`: NNI 1.x's names that NNI 2.x reused (``LevelPruner``...) or that are not the
  engine's own (``QAT_Quantizer``).

This package is what ``slimkit.compression`` re-exports (``from slimkit.compression import L1NormPruner,
ModelSpeedup, count_flops_params, QAT_Quantizer``): NNI 2.x's classes where NNI 2.x has the name, NNI 1.x's
elsewhere (the engines' own classes: ``L1FilterPruner``, ``QATQuantizer``, ``WeightMasker``, ``Pruner``), the
pruning framework's helpers, the speedup and ``count_flops_params``. Every name is bound once, to one class; the
engines never import this face.
"""

from slimkit.engines.pruning import *  # noqa: F403  (the engines' names; none is a name NNI 2.x reused)
from slimkit.engines.pruning import __all__ as _PRUNING
from slimkit.engines.quantization import *  # noqa: F403
from slimkit.engines.speedup import (
    ChannelGraph,
    ChannelGroups,
    KeptChannels,
    SpeedupError,
    SpeedupWarning,
    UnsupportedOpError,
    apply_kept_channels,
    channel_dependency_report,
    trace_channels,
)
from slimkit.evaluation.flops import count_flops_params
from slimkit.faces.nni.v1 import QAT_Quantizer
from slimkit.faces.nni.v2 import *  # noqa: F403  (NNI 2.x's classes, ModelSpeedup included)
from slimkit.faces.nni.v3 import LightningEvaluator, TorchEvaluator, TransformersEvaluator
from slimkit.faces.nni.v3.distillation import Adaptive1dLayerwiseDistiller, DynamicLayerwiseDistiller
from slimkit.faces.nni.v3.ptq import PtqQuantizer
from slimkit.faces.nni.v3.quantizers import (
    BNNQuantizer,
    DoReFaQuantizer,
    LsqPlusQuantizer,
    LsqQuantizer,
    QATQuantizer,
)
from slimkit.faces.nni.v3.taylor import TaylorPruner
from slimkit.faces.nni.v3.utils import auto_set_denpendency_group_ids

_FACE = [
    "ADMMPruner", "AGPPruner", "AMCPruner", "ActivationAPoZRankPruner", "ActivationMeanRankPruner",
    "AutoCompressPruner", "BNNQuantizer", "ChannelGraph", "ChannelGroups", "DoReFaQuantizer", "FPGMPruner",
    "KeptChannels", "L1NormPruner", "L2NormPruner", "LevelPruner", "LinearPruner", "LotteryTicketPruner",
    "LsqPlusQuantizer", "LsqQuantizer", "ModelSpeedup", "ModelSpeedupTensorRT", "MovementPruner", "NaiveQuantizer",
    "ObserverQuantizer", "PtqQuantizer", "Adaptive1dLayerwiseDistiller", "DynamicLayerwiseDistiller",
    "QATQuantizer", "QAT_Quantizer", "QuantGrad", "QuantType", "Quantizer", "SimulatedAnnealingPruner", "SlimPruner",
    "SpeedupError", "SpeedupWarning", "TaylorFOWeightPruner", "TaylorPruner", "UnsupportedOpError",
    "apply_kept_channels", "auto_set_denpendency_group_ids", "channel_dependency_report", "count_flops_params",
    "load_calibration", "set_quant_scheme_dtype", "trace", "trace_channels", "LightningEvaluator", "TorchEvaluator",
    "TransformersEvaluator",
]
__all__ = sorted({*_PRUNING, *_FACE})  # noqa: PLE0605
