"""What every NNI 2.x pruner of this face shares.

``compress()`` returning ``(model, masks)``, NNI 2.x's mask format ``{layer: {"weight": mask, "bias": mask}}``,
``show_pruned_weights``, ``load_masks`` and global ranking.

The classes are slimkit's own engines (:mod:`slimkit.engines.pruning`) with NNI 2.x's constructor
signatures; :class:`V2Pruner` is mixed in before the engine class, which each face class imports and calls
directly.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from slimkit.engines._masks_io import read_mask_file
from slimkit.engines.config_list import select_layers
from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.maskers import StructuredWeightMasker
from slimkit.engines.pruning.wrapper import PrunerModuleWrapper
from slimkit.faces.nni.v2.config import GlobalGroup, canonical_config_list
from slimkit.faces.nni.v3.config import is_v3_config, v2_config_from_v3
from slimkit.faces.nni.v3.evaluator import Evaluator

V2Masks = dict[str, dict[str, torch.Tensor]]


def v2_masks(pruner: Pruner) -> V2Masks:
    """The pruner's masks in NNI 2.x's format ``{layer: {"weight": mask, "bias": mask}}`` (bias when present)."""
    out: V2Masks = {}
    for name, masks in pruner.get_masks().items():
        out[name] = {"weight": masks["weight_mask"]}
        if masks.get("bias_mask") is not None:
            out[name]["bias"] = masks["bias_mask"]
    return out


def to_v1_masks(masks: Mapping[str, Mapping[str, Any]] | str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Masks in any accepted form (NNI 2.x dict, slimkit dict, mask file) as ``{"weight_mask", "bias_mask"}``."""
    if isinstance(masks, (str, os.PathLike)):
        return read_mask_file(masks)
    if not isinstance(masks, Mapping):
        raise PruningConfigError(f"masks must be a dict {{layer: {{'weight': mask, 'bias': mask}}}} or a mask file "
                                 f"path, got {type(masks).__name__}.")
    return {name: {"weight_mask": entry.get("weight_mask", entry.get("weight")),
                   "bias_mask": entry.get("bias_mask", entry.get("bias"))} for name, entry in masks.items()}


def show_pruned_weights(pruner: Pruner, dim: int = 0) -> list[tuple[str, int, int]]:
    """Print and return ``(layer, kept, total)`` units along ``dim`` of each pruned layer's weight."""
    return pruner.get_pruned_weights(dim)


def call_trainer(trainer: Callable[..., Any], model: nn.Module, optimizer: Any, criterion: Any, epoch: int) -> Any:
    """Call an NNI trainer: ``trainer(model, optimizer, criterion)``, or with ``epoch`` when it requires one."""
    try:
        params = inspect.signature(trainer).parameters.values()
    except (TypeError, ValueError):
        return trainer(model, optimizer, criterion)
    required = [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(required) >= 4:
        return trainer(model, optimizer, criterion, epoch)
    return trainer(model, optimizer, criterion)


def check_training_args(name: str, trainer: Any, optimizer: Any, criterion: Any) -> None:
    """NNI 2.x's trainer triple: ``trainer(model, optimizer, criterion)``, an optimizer and a loss function."""
    if not callable(trainer):
        raise PruningConfigError(f"{name} needs trainer=, a function trainer(model, optimizer, criterion) that runs "
                                 f"one epoch of your training loop; got {type(trainer).__name__}.")
    if optimizer is None or not callable(getattr(optimizer, "step", None)):
        raise PruningConfigError(f"{name} needs traced_optimizer=, e.g. slimkit.trace(torch.optim.SGD)"
                                 f"(model.parameters(), lr=0.01) (a plain optimizer works too); got "
                                 f"{type(optimizer).__name__}.")
    if not callable(criterion):
        raise PruningConfigError(f"{name} needs criterion=, the loss function the trainer calls, e.g. "
                                 f"torch.nn.CrossEntropyLoss(); got {type(criterion).__name__}.")


def check_schedule(who: str, model: Any, finetuner: Any, evaluator: Any, speedup: bool, dummy_input: Any) -> None:
    """What NNI 2.x's scheduled pruners share: a module, functions of the model, ``dummy_input`` for a speedup."""
    if not isinstance(model, nn.Module):
        raise PruningConfigError(f"{who} needs a torch.nn.Module, got {type(model).__name__}.")
    for label, fn in (("finetuner", finetuner), ("evaluator", evaluator)):
        if fn is not None and not callable(fn):
            raise PruningConfigError(f"{who} {label} must be a function of the model, got {type(fn).__name__}.")
    if speedup and dummy_input is None:
        raise PruningConfigError(f"{who}(speedup=True) needs dummy_input, an input the model accepts, to trace "
                                 "which channels can be removed.")


def check_mode(name: str, mode: Any, allowed: tuple[str, ...]) -> str:
    """``mode`` must be one of ``allowed``."""
    if mode not in allowed:
        raise PruningConfigError(f"{name} mode must be one of {', '.join(map(repr, allowed))}, got {mode!r}.")
    return mode


class V2Pruner:
    """Mixin giving a slimkit pruner NNI 2.x's behaviour (list it before the engine class).

    Subclasses call :meth:`_v2_config` to translate the ``config_list`` before the engine's ``__init__``.
    """

    mode: str = "normal"
    dependency_input: Any = None
    #: an NNI 3.0 entry asked for ``granularity: "out_channel"``
    out_channel: bool = False
    #: the NNI 3.0 evaluator the pruner was given (``None`` for NNI 2.x's signatures)
    evaluator: Evaluator | None = None
    _groups: list[GlobalGroup]

    def _v2_config(self, model: nn.Module, config_list: Any, mode: str, v3: bool = False,
                   dummy_input: Any = None) -> list[dict[str, Any]]:
        """Translate NNI 2.x keys (NNI 3.0's first, when ``v3`` or the list uses them); remember the global groups.

        An NNI 3.0 list sets :attr:`mode`: ``"global"`` with a ``global_group_id``, ``"dependency_aware"`` with a
        ``dependency_group_id`` (traced on :attr:`dependency_input`: the input ``auto_set_denpendency_group_ids``
        saw, else ``dummy_input``), else ``"normal"``.
        """
        if not isinstance(model, nn.Module):
            raise PruningConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
        self.dependency_input = dummy_input
        if v3 or is_v3_config(config_list):
            translated3 = v2_config_from_v3(model, config_list, self.default_op_types,  # type: ignore[attr-defined]
                                            type(self).__name__)
            config_list, mode = translated3.config_list, "global" if translated3.global_ranking else "normal"
            self.out_channel = translated3.out_channel
            if translated3.dependency_aware and not translated3.global_ranking:
                mode = "dependency_aware"
                self.dependency_input = dummy_input if translated3.dummy_input is None else translated3.dummy_input
                if self.dependency_input is None:
                    raise PruningConfigError(f"{type(self).__name__}: dependency_group_id needs the model traced: "
                                             "build the config with auto_set_denpendency_group_ids(model, "
                                             "config_list, dummy_input), or give the evaluator a dummy_input.")
        self.mode = mode
        translated, self._groups = canonical_config_list(model, config_list, mode)
        self._allocated = False
        if self._groups:  # which layers each group ranks, on the unwrapped model
            chosen = select_layers(model, translated, self.default_op_types, PruningConfigError)  # type: ignore[attr-defined]
            for group in self._groups:
                group.layers = [name for name, index in chosen.items() if index == group.index]
        return translated

    def compress(self) -> tuple[nn.Module, V2Masks]:  # type: ignore[override]
        """Compute the masks; return the (wrapped) model and the masks ``{layer: {"weight", "bias"}}``.

        An optimizer the pruner was given is used only inside ``compress()``: its ``step`` is restored after.
        """
        try:
            model = super().compress()  # type: ignore[misc]
        finally:
            self.restore_optimizer()  # type: ignore[attr-defined]
        return model, v2_masks(self)  # type: ignore[arg-type]

    def _unwrap_model(self) -> None:
        """NNI 2.x's ``_unwrap_model()``: the layers come back holding ``weight * mask`` (the pruned model).

        What a user saves or speeds up after ``compress()`` is the pruned model, as in NNI 2.x; ``_wrap_model()``
        wraps the layers again (the zeroed weights stay zero). The optimizer's ``step`` is already restored by
        :meth:`compress`. The engine's own code keeps the dense weights (``unwrap_model(apply_masks=False)``).
        """
        if self.is_wrapped:  # type: ignore[attr-defined]
            self.unwrap_model(apply_masks=True)  # type: ignore[attr-defined]

    def show_pruned_weights(self, dim: int = 0) -> list[tuple[str, int, int]]:
        """Print how many units (along ``dim``) each pruned layer keeps; return the rows."""
        return show_pruned_weights(self, dim)  # type: ignore[arg-type]

    def load_masks(self, masks: Mapping[str, Mapping[str, Any]] | str | os.PathLike) -> None:  # type: ignore[override]
        """Install masks (NNI 2.x dict, slimkit dict or a mask file) on the wrapped layers."""
        self.apply_masks(to_v1_masks(masks))  # type: ignore[attr-defined]

    @torch.no_grad()
    def update_mask(self) -> None:
        """With ``mode="global"``, first turn each ``total_sparsity`` group into per-layer sparsities."""
        if self._groups and not self._allocated:
            self._allocate_global()
            self._allocated = True
        super().update_mask()  # type: ignore[misc]

    def _unit_importance(self, wrapper: PrunerModuleWrapper, idx: int) -> tuple[torch.Tensor, int]:
        """Per-unit importance and the weights in one unit: channels for filter maskers, elements otherwise."""
        masker = self.masker  # type: ignore[attr-defined]
        weight = wrapper.module.weight.detach()
        if isinstance(masker, StructuredWeightMasker):
            importance = masker.get_channel_importance(wrapper, idx).detach().float().flatten()
            kept = wrapper.weight_mask.reshape(wrapper.weight_mask.shape[0], -1).sum(dim=1) != 0
            return importance.masked_fill(~kept, -math.inf), max(1, weight.numel() // weight.shape[0])
        if weight.dim() == 1:  # BatchNorm scales (Slim): one unit per channel
            importance = weight.float().abs()
        else:
            importance = weight.float().abs().flatten()
        return importance.masked_fill(wrapper.weight_mask.flatten() == 0, -math.inf), 1

    def _allocate_global(self) -> None:
        """Rank every unit of a group together; set each layer's sparsity to the share it loses (capped)."""
        wrappers = {w.name: (i, w) for i, w in enumerate(self.modules_wrapper)}  # type: ignore[attr-defined]
        for group in self._groups:
            names = [n for n in group.layers if n in wrappers]
            if not names:
                continue
            found = [self._unit_importance(wrappers[n][1], wrappers[n][0]) for n in names]
            scores, sizes = [score for score, _ in found], [size for _, size in found]
            owner = torch.cat([torch.full_like(s, float(i)) for i, s in enumerate(scores)])
            units = [s.numel() for s in scores]
            budget = group.total_sparsity * sum(u * size for u, size in zip(units, sizes, strict=True))
            limit = [min(units[i] - 1, math.floor(group.cap(n) * units[i] + 1e-6)) for i, n in enumerate(names)]
            pruned = [0] * len(names)
            removed = 0.0
            for position in torch.argsort(torch.cat(scores), stable=True).tolist():
                if removed >= budget - 1e-9:
                    break
                layer = int(owner[position])
                if pruned[layer] < limit[layer]:
                    pruned[layer] += 1
                    removed += sizes[layer]
            for i, name in enumerate(names):
                wrappers[name][1].config["sparsity"] = (pruned[i] + 0.5) / units[i]  # num_to_prune floors to pruned
