"""``nni.compression.speedup`` of NNI 3.0: ``ModelSpeedup(model, dummy_input, masks).speedup_model()``.

NNI 3.0's masks ``{module name: {"weight": mask, "bias": mask}}`` are NNI 2.x's, so this is the face's one
``ModelSpeedup`` (:mod:`slimkit.faces.nni.v2.speedup`, BatchNorm masks included), under NNI 3.0's path, with
``auto_set_denpendency_group_ids`` (NNI 3.0 exports it here too).
"""

from slimkit.faces.nni.v2.speedup import ModelSpeedup
from slimkit.faces.nni.v3.utils import auto_set_denpendency_group_ids

__all__ = ["ModelSpeedup", "auto_set_denpendency_group_ids"]
