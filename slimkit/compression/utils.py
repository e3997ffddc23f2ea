"""``nni.compression.utils`` (NNI 3.0) as ``slimkit.compression.utils``.

The evaluators and ``auto_set_denpendency_group_ids`` (:mod:`slimkit.faces.nni.v3`,
:mod:`slimkit.faces.nni.v3.utils`).
"""

from slimkit.faces.nni.v3 import Evaluator, LightningEvaluator, TorchEvaluator, TransformersEvaluator
from slimkit.faces.nni.v3.utils import auto_set_denpendency_group_ids, auto_set_dependency_group_ids

__all__ = ["Evaluator", "LightningEvaluator", "TorchEvaluator", "TransformersEvaluator",
           "auto_set_denpendency_group_ids", "auto_set_dependency_group_ids"]
