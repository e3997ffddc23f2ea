"""ModelSpeedup: physically remove pruned channels, and replay that shrink on a fresh model."""

from __future__ import annotations

import os
import warnings
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from slimkit.errors import ConfigError, closest
from slimkit.evaluation.runtime import eval_mode
from slimkit.utils import run_model

from .errors import SpeedupError
from .fold import Fold, apply_folds, find_folds
from .graph import ChannelGraph, tensors_in
from .layers import subclass_problem, torch_base
from .masks import LayerMask, MaskDict, normalize_masks
from .planner import KeptChannels, ShrinkPlan, make_plan
from .shared import retie, shared_parameters
from .shrink import Snapshot, shrink_module, shrink_param
from .tracer import _as_tree, trace_channels


class SpeedupWarning(UserWarning):
    """A mask asked for more than the speedup could remove (coupled channels, model outputs)."""


class ModelSpeedup:
    """Shrink a pruned model for real: Conv/Linear/norm layers lose the channels their masks removed.

    Usage (NNI-shaped)::

        model = ModelSpeedup(model, dummy_input, masks).speedup_model()

    ``masks`` (NNI 2.x's ``masks_file=``) maps layer names to ``{"weight_mask": Tensor, "bias_mask": Tensor |
    None}`` (NNI 2.x's ``{"weight": ..., "bias": ...}`` too; a filter-pruned layer has whole zero output rows)
    or to ``{"out_channels": LongTensor}``; the path of a mask file works too (slimkit's safetensors from
    ``export_model(mask_path=...)``, or NNI's ``torch.save``d dict read with ``weights_only=True``). NNI's
    ``map_location``, ``batch_dim=0`` and ``confidence`` are accepted. Coupled layers (residual adds,
    concatenations, depthwise convs, norms, flatten -> Linear, attention heads) shrink together. The model
    is changed in place and returned; if anything fails it is restored. ``kept_channels`` then holds the
    JSON-ready record that :func:`apply_kept_channels` replays on a freshly built base model, and
    ``warnings`` every request that could not be honoured.

    A removed channel that still carries a constant in the masked model (the shift of a trained BatchNorm
    after a zeroed filter, a bias) is folded into the layers that read it (``fold_constants=True``, see
    :mod:`slimkit.engines.speedup.fold`); ``folds`` lists what was folded and where.
    """

    def __init__(self, model: nn.Module, dummy_input: Any, masks: MaskDict | str | os.PathLike | None = None,
                 verify: bool = True, fold_constants: bool = True, *,
                 masks_file: MaskDict | str | os.PathLike | None = None, map_location: Any = None,
                 batch_dim: int = 0, confidence: int = 8, customized_replace_func: Any = None) -> None:
        _refuse_wrapped(model)
        masks = _nni_arguments(masks, masks_file, batch_dim, confidence, customized_replace_func)
        self.model = model
        self.dummy_input = dummy_input
        self.map_location = map_location  # NNI's argument: masks always move to each layer's own device here
        self.masks: dict[str, LayerMask] = normalize_masks(model, masks)
        self.verify = verify
        self.fold_constants = fold_constants
        self.kept_channels: KeptChannels | None = None
        self.warnings: list[str] = []
        self.folds: list[Fold] = []

    def plan(self) -> KeptChannels:
        """Trace and decide what would be removed, without changing the model (warnings are emitted)."""
        return self._plan()[1].kept

    def _plan(self) -> tuple[ChannelGraph, ShrinkPlan]:
        graph = trace_channels(self.model, self.dummy_input)
        plan = make_plan(graph, self.masks)
        self.warnings = plan.warnings
        for message in plan.warnings:
            warnings.warn(message, SpeedupWarning, stacklevel=3)
        return graph, plan

    def speedup_model(self) -> nn.Module:
        """Remove the pruned channels in place and return the same model object."""
        if self.kept_channels is not None:
            raise SpeedupError("speedup_model() already ran on this model; its masks describe the unshrunk layers. "
                               "Create a new ModelSpeedup with masks for the shrunk model to prune further.")
        graph, plan = self._plan()
        modules = dict(self.model.named_modules())
        _refuse_opaque_subclasses(modules, plan.kept, graph, set(self.masks))
        snapshot = Snapshot(list(modules.values()))  # folding may also shift a norm that is not shrunk
        shared = shared_parameters(modules.items())  # before masking replaces a tied weight on one side
        try:
            with torch.no_grad():
                _apply_masks(modules, self.masks)
            folds = find_folds(self.model, self.dummy_input, plan.kept) if self.fold_constants else []
            apply_folds(self.model, folds, plan.kept)
            _shrink_all(self.model, plan.kept, shared)
            if self.verify:
                _verify(self.model, self.dummy_input, graph.output_shapes, plan.kept)
        except BaseException:
            snapshot.restore()
            raise
        self.kept_channels = plan.kept
        self.folds = folds
        return self.model


def _nni_arguments(masks: Any, masks_file: Any, batch_dim: Any, confidence: Any, replace: Any) -> Any:
    """Check NNI 2.x's keyword arguments; return the one mask source given (``masks`` or ``masks_file``)."""
    if masks is not None and masks_file is not None:
        raise ConfigError("ModelSpeedup got both masks and masks_file; they are the same argument (a mask dict or "
                          "a mask file path), pass one.")
    masks = masks if masks is not None else masks_file
    if masks is None:
        raise ConfigError("ModelSpeedup needs the masks: a dict {layer: {'weight': mask}} (e.g. the second value of "
                          "pruner.compress()) or the mask_path a pruner's export_model wrote, as masks_file=...")
    if batch_dim != 0:
        raise ConfigError(f"ModelSpeedup(batch_dim={batch_dim!r}): slimkit traces dummy_input as given and expects "
                          "the batch in dimension 0; pass an input whose first dimension is the batch.")
    if isinstance(confidence, bool) or not isinstance(confidence, int) or confidence < 1:
        raise ConfigError(f"ModelSpeedup(confidence={confidence!r}) must be a whole number >= 1 (NNI's batch size "
                          "for mask inference; slimkit's tracer derives channel coupling exactly and ignores it).")
    if replace is not None:
        raise ConfigError("ModelSpeedup(customized_replace_func=...) is not supported: slimkit shrinks Conv, Linear, "
                          "norm and attention layers itself. Exclude layers it cannot shrink with a config_list "
                          "entry {'exclude': True, 'op_names': [...]}.")
    return masks


def _refuse_wrapped(model: nn.Module) -> None:
    """A model still wrapped by a pruner has other layer names and masked forwards: ask for the plain one."""
    if not isinstance(model, nn.Module):
        raise ConfigError(f"ModelSpeedup needs a torch.nn.Module; got {type(model).__name__}.")
    for name, module in model.named_modules():
        if isinstance(getattr(module, "module", None), nn.Module) and "weight_mask" in module._buffers:
            raise ConfigError(
                f"Layer {name!r} is still wrapped by a pruner ({type(module).__name__}). Speed up the plain model: "
                "call pruner.unwrap_model(apply_masks=True) first, then ModelSpeedup(model, dummy_input, "
                "pruner.get_masks())."
            )


def _refuse_opaque_subclasses(modules: Mapping[str, nn.Module], kept: Mapping[str, Any],
                              graph: ChannelGraph | None = None, masked: Collection[str] = ()) -> None:
    """Refuse, before anything changes, to shrink a Conv/Linear subclass with state beyond weight and bias.

    The error names the layer and the ``exclude`` entry that avoids it: the layer itself when it is pruned,
    and the pruned layers whose channels it reads (found in ``graph``).
    """
    for name in kept:
        module = modules.get(name)
        problem = "" if module is None else subclass_problem(module)
        if not problem:
            continue
        culprits = [name] if name in masked or graph is None else []
        rec = None if graph is None else graph.leaves.get(name)
        if rec is not None:
            roots = graph.uf.roots()
            ids = np.concatenate([i for i in (rec.in_ids, rec.out_ids) if i is not None] or [np.zeros(0, np.int64)])
            classes = set(roots[ids[ids >= 0]].tolist())
            culprits += [s.owner for s in graph.spaces.values() if s.owner in masked and s.owner not in culprits
                         and classes.intersection(roots[s.ids].tolist())]
        culprits = culprits or [name]
        raise SpeedupError(
            f"Layer {name!r} is a {type(module).__name__}, a subclass of nn.{torch_base(module)} with its own "
            f"{problem}; the speedup cannot tell how its forward uses them, so it will not shrink it. Leave its "
            f"channels alone: add {{'exclude': True, 'op_names': {culprits}}} to the pruner's config_list (or give "
            "the layer only weight and bias). The model was left unchanged."
        )


def _apply_masks(modules: dict[str, nn.Module], masks: dict[str, LayerMask]) -> None:
    """Multiply weights/biases by their masks so the shrunk model equals the masked one."""
    for name, mask in masks.items():
        module = modules[name]
        for attr, m in (("weight", mask.weight_mask), ("bias", mask.bias_mask)):
            p = getattr(module, attr, None)
            if m is not None and isinstance(p, nn.Parameter):
                setattr(module, attr, nn.Parameter(p * m.to(p.device, p.dtype), requires_grad=p.requires_grad))


def _param_owner(modules: Mapping[str, nn.Module], name: str) -> tuple[nn.Module, str] | None:
    """(module, attribute) of the parameter ``name`` (a qualified parameter name), or None."""
    owner, _, attr = name.rpartition(".")
    module = modules.get(owner)
    return (module, attr) if module is not None and module._parameters.get(attr) is not None else None


def _touched(modules: Mapping[str, nn.Module], kept_channels: Mapping[str, Any]) -> list[nn.Module]:
    """The modules a replay of ``kept_channels`` changes (layers, and the owners of shrunk parameters)."""
    found = [modules[n] for n in kept_channels if n in modules]
    return found + [p[0] for n in kept_channels if n not in modules and (p := _param_owner(modules, n))]


def _shrink_all(model: nn.Module, kept_channels: Mapping[str, Any], shared: list | None = None) -> None:
    modules = dict(model.named_modules())
    shared = shared_parameters(modules.items()) if shared is None else shared

    def heads_last(name: str) -> bool:  # head counts are set after the projections shrink
        return isinstance(kept_channels[name], Mapping) and "heads" in kept_channels[name]

    order = sorted(kept_channels, key=heads_last)
    for name in order:
        entry = kept_channels[name]
        if name not in modules and isinstance(entry, Mapping) and "param_dim" in entry:
            owner = _param_owner(modules, name)
            if owner is None:
                raise SpeedupError(f"kept_channels names parameter {name!r}, which the model does not have. Build the "
                                   "same base architecture the record was made from before replaying it.")
            shrink_param(name, owner[0], owner[1], entry)
            continue
        if name not in modules:
            raise SpeedupError(
                f"kept_channels names layer {name!r}, which the model does not have.{closest(name, modules)} Build the "
                "same base architecture the record was made from before replaying it."
            )
        shrink_module(name, modules[name], entry)
    retie(shared)


def apply_kept_channels(model: nn.Module, kept_channels: Mapping[str, Any]) -> nn.Module:
    """Replay a recorded shrink on a freshly built base model (no masks or data needed); returns ``model``.

    Typical load path: build the base architecture, ``apply_kept_channels(model, json.load(f))``, then
    ``model.load_state_dict(load_file("model.safetensors"), strict=True)``. On error the model is unchanged.
    """
    if not isinstance(kept_channels, Mapping):
        raise SpeedupError(f"kept_channels must be a dict of layer name -> {{'out': [...], 'in': [...]}}; got "
                           f"{type(kept_channels).__name__}.")
    modules = dict(model.named_modules())
    _refuse_opaque_subclasses(modules, kept_channels)
    snapshot = Snapshot(_touched(modules, kept_channels))
    try:
        _shrink_all(model, kept_channels)
    except BaseException:
        snapshot.restore()
        raise
    return model


def _verify(model: nn.Module, dummy_input: Any, shapes: list[tuple[int, ...]], kept: KeptChannels) -> None:
    """Run the shrunk model once: it must still work and give outputs of the original shapes."""
    layers = sorted(n for n, e in kept.items() if "out" in e)
    exclude = {"exclude": True, "op_names": layers}
    try:
        with eval_mode(model), torch.no_grad():
            out = run_model(model, dummy_input)
    except Exception as exc:
        raise SpeedupError(
            f"After removing channels the model no longer runs on dummy_input ({type(exc).__name__}: {exc}). The "
            "usual cause is a reshape with hard-coded sizes such as x.view(-1, 400); write x.flatten(1) or "
            f"x.view(x.size(0), -1), or exclude the shrunk layers with {exclude!r}. The model was left unchanged."
        ) from exc
    got = [tuple(t.shape) for t in tensors_in(_as_tree(out))]
    if got != shapes:
        raise SpeedupError(f"After removing channels the model's output shapes changed from {shapes} to {got}; "
                           f"exclude the shrunk layers with {exclude!r}. The model was left unchanged.")
