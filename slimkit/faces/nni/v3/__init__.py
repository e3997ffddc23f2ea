"""NNI 3.0's compression face: evaluators, compressors with 3.0's signatures and config keys, 3.0's import paths.

NNI 3.0 scripts import ``nni.compression.pruning``, ``.quantization``, ``.distillation``, ``.speedup``, ``.utils``
and ``from nni.compression import TorchEvaluator``; here those are ``slimkit.compression.pruning`` ...
(re-exporting :mod:`slimkit.faces.nni.v3.pruning`, :mod:`~slimkit.faces.nni.v3.quantization`,
:mod:`~slimkit.faces.nni.v3.distillation`, :mod:`~slimkit.faces.nni.v3.speedup`) and ``slimkit.compression
.TorchEvaluator`` (this package's evaluators). Where NNI 3.0 reuses an NNI 2.x class name (``L1NormPruner``,
``SlimPruner``, ``AGPPruner``, ``QATQuantizer``...) one class takes both signatures; 3.0's ``config_list`` keys are
translated once (:mod:`~slimkit.faces.nni.v3.config`, :mod:`~slimkit.faces.nni.v3.quant_config`), and
``from_compressor`` chains compressors (:mod:`~slimkit.faces.nni.v3.chain`).

This package's ``__init__`` imports only the evaluators and the config translation, which
:mod:`slimkit.faces.nni.v2` imports in turn, so either face can be imported first.
"""

from slimkit.faces.nni.v3.config import V3_KEYS, is_v3_config, v2_config_from_v3
from slimkit.faces.nni.v3.evaluator import Evaluator, OptimizerRelay, TorchEvaluator
from slimkit.faces.nni.v3.hf_evaluator import TransformersEvaluator
from slimkit.faces.nni.v3.lightning_evaluator import LightningEvaluator

__all__ = ["Evaluator", "LightningEvaluator", "OptimizerRelay", "TorchEvaluator", "TransformersEvaluator", "V3_KEYS",
           "is_v3_config", "v2_config_from_v3"]
