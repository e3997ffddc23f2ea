"""``nni.compression.speedup`` of NNI 3.0: ``ModelSpeedup(model, dummy_input, masks).speedup_model()``.

NNI 3.0's masks ``{module name: {"weight": mask, "bias": mask}}`` are NNI 2.x's, so this is the face's one
``ModelSpeedup`` (:mod:`slimkit.faces.nni.v2.speedup`, BatchNorm masks included), under NNI 3.0's path.
"""

from slimkit.faces.nni.v2.speedup import ModelSpeedup

__all__ = ["ModelSpeedup"]
