"""``ModelSpeedup`` as NNI scripts use it: also for Network-Slimming masks, which sit on BatchNorm layers.

A BatchNorm mask (what ``SlimPruner`` returns) says which channels of the *producer* before it go;
:class:`NormMaskSpeedup` turns such masks into masks of those producers before the speedup
(:func:`~slimkit.engines.pruning.coupling.norm_producer_masks`), so ``ModelSpeedup(model, dummy_input,
masks)`` works for every pruner's masks, as it does in NNI. NNI's name ``ModelSpeedup`` is this class on the face
(``slimkit.compression.ModelSpeedup``); the engine it extends is :class:`slimkit.engines.speedup.ModelSpeedup`,
which refuses masks on norms (the speedup engine does not depend on the pruning engine).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from torch import nn

from slimkit.engines.pruning.coupling import has_norm_masks, norm_producer_masks
from slimkit.engines.speedup import ModelSpeedup as EngineSpeedup
from slimkit.engines.speedup import SpeedupError
from slimkit.engines.speedup.masks import MaskDict, load_masks

__all__ = ["ModelSpeedup", "NormMaskSpeedup"]


def _slimkit_entry(entry: Any) -> Any:
    """NNI 2.x's ``{"weight", "bias"}`` entry as slimkit's ``{"weight_mask", "bias_mask"}`` (others unchanged)."""
    if isinstance(entry, Mapping) and "weight_mask" not in entry and "out_channels" not in entry and "weight" in entry:
        return {"weight_mask": entry["weight"], "bias_mask": entry.get("bias")}
    return entry


class NormMaskSpeedup(EngineSpeedup):
    """:class:`slimkit.engines.speedup.ModelSpeedup` that also accepts masks on BatchNorm layers.

    ``ModelSpeedup(model, dummy_input, masks_file).speedup_model()`` (NNI 2.x) or ``ModelSpeedup(model,
    dummy_input, masks)``; the masks are a dict or a mask file (see the base class).
    """

    def __init__(self, model: nn.Module, dummy_input: Any, masks: MaskDict | str | os.PathLike | None = None,
                 verify: bool = True, fold_constants: bool = True, **kwargs: Any) -> None:
        masks = _v3_arguments(masks, kwargs)
        source = masks if masks is not None else kwargs.get("masks_file")
        if isinstance(model, nn.Module) and source is not None:
            loaded = {name: _slimkit_entry(entry) for name, entry in load_masks(source).items()}
            if has_norm_masks(model, loaded):
                loaded = norm_producer_masks(model, dummy_input, loaded)
            if masks is not None:
                masks = loaded
            else:
                kwargs["masks_file"] = loaded
        super().__init__(model, dummy_input, masks, verify, fold_constants, **kwargs)


#: NNI 3.0's keywords that only tune NNI's own tracer (slimkit's traces the model once, on its own terms)
_V3_TUNING = ("garbage_collect_values", "logger")
#: NNI 3.0's extension points into NNI's tracer, which slimkit does not run
_V3_HOOKS = ("customized_mask_updaters", "customized_replacers", "graph_module")


def _v3_arguments(masks: Any, kwargs: dict[str, Any]) -> Any:
    """The masks of an NNI 3.0 call (``masks_or_file``); its other keywords made the engine's or refused.

    ``batch_size`` is NNI 2.x's ``confidence``; ``map_location`` and ``batch_dim`` go to the engine as they are;
    ``garbage_collect_values`` and ``logger`` only tune NNI's tracer and are dropped; its hooks are refused.
    """
    if "masks_or_file" in kwargs:
        if masks is not None:
            raise SpeedupError("ModelSpeedup got the masks twice (masks and masks_or_file=).")
        masks = kwargs.pop("masks_or_file")
    if "batch_size" in kwargs:  # NNI 3.0's name for NNI 2.x's confidence
        kwargs["confidence"] = kwargs.pop("batch_size")
    for key in _V3_TUNING:
        kwargs.pop(key, None)
    given = [k for k in _V3_HOOKS if kwargs.pop(k, None) is not None]
    if given:
        raise SpeedupError(f"ModelSpeedup({given[0]}=...) plugs into NNI's own tracer, which slimkit does not run; "
                           "slimkit traces channel dependencies itself. An op it cannot follow is named in its error, "
                           "with the 'exclude' entry that avoids it.")
    return masks


ModelSpeedup = NormMaskSpeedup  # NNI's name, on the face
