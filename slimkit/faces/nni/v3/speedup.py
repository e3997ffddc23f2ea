"""``nni.compression.speedup`` of NNI 3.0: ``ModelSpeedup(model, dummy_input, masks).speedup_model()``.

NNI 3.0's masks ``{module name: {"weight": mask, "bias": mask}}`` are NNI 2.x's, so this is the face's one
``ModelSpeedup`` (:mod:`slimkit.faces.nni.v2.speedup`, BatchNorm masks included) under NNI 3.0's path, plus NNI
3.0's ``node_infos`` (:class:`TracedSpeedup`), with ``auto_set_denpendency_group_ids`` (NNI 3.0 exports it here
too).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from slimkit.faces.nni.v2.speedup import NormMaskSpeedup
from slimkit.faces.nni.v3.node_infos import NodeInfo, TracedShapes, infos_or_error, trace_shapes
from slimkit.faces.nni.v3.utils import auto_set_denpendency_group_ids

__all__ = ["ModelSpeedup", "auto_set_denpendency_group_ids"]


class TracedSpeedup(NormMaskSpeedup):
    """The face's ``ModelSpeedup`` with NNI 3.0's ``node_infos`` (a ``torch.fx`` trace taken before shrinking)."""

    _traced: TracedShapes | Exception | None = None

    def speedup_model(self) -> nn.Module:
        """Remove the pruned channels in place and return the same model (see the engine's ``speedup_model``)."""
        if self.kept_channels is None:
            try:  # NNI 3.0's node_infos are read off a torch.fx trace of the model before it shrinks
                self._traced = trace_shapes(self.model, self.dummy_input)
            except Exception as exc:  # noqa: BLE001 - not every model traces; only node_infos needs it
                self._traced = exc
        return super().speedup_model()

    @property
    def node_infos(self) -> dict[Any, NodeInfo]:
        """NNI 3.0's ``{fx node: info}`` after :meth:`speedup_model` (:mod:`slimkit.faces.nni.v3.node_infos`)."""
        return infos_or_error(self._traced, self.kept_channels)


ModelSpeedup = TracedSpeedup  # NNI 3.0's name, on its path
