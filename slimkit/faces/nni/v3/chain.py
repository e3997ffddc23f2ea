"""NNI 3.0's ``Compressor.from_compressor`` chaining and the evaluator-driven ``compress(max_steps, max_epochs)``.

``quantizer = QATQuantizer.from_compressor(pruner, q_config_list, quant_start_step=100)`` and
``distiller = DynamicLayerwiseDistiller.from_compressor(quantizer, d_config_list, teacher, teacher_predict)``
build compressors on the same model with the first compressor's evaluator; ``distiller.compress(max_steps,
max_epochs)`` then runs the whole chain:

1. each pruner of the chain first, with its own steps (a scheduled pruner's ``interval_steps * total_times``, a
   Taylor or Slim pruner's ``training_steps``; a one-shot pruner none); its masks are left in the weights;
2. the rest of ``max_steps`` (or ``max_epochs``) as one run of the evaluator's training with every quantizer
   and distiller of the chain active together: fake quantization in the forward pass, the distillation loss
   added to the user's loss, and the pruning masks multiplied into the weights after each optimizer step so
   pruned weights stay zero.

NNI 3.0 interleaves the pruners' steps with the others in one loop; slimkit prunes first, then trains the
quantizers and distillers on the pruned model, so the pruners' masks are final before quantization ranges are
learned. A lone quantizer's or distiller's ``compress`` is the same run with a chain of one.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError
from slimkit.faces.nni.v2.base import V2Pruner, v2_masks
from slimkit.faces.nni.v3.evaluator import Evaluator

__all__ = ["V3Compressor", "evaluator_of"]


def evaluator_of(compressor: Any) -> Evaluator | None:
    """The NNI 3.0 evaluator a compressor (or a scheduled pruner) was built with, else ``None``."""
    for name in ("evaluator", "_evaluator"):
        found = getattr(compressor, name, None)
        if isinstance(found, Evaluator):
            return found
    return None


def _is_pruner(compressor: Any) -> bool:
    return isinstance(compressor, V2Pruner) or isinstance(getattr(compressor, "_sub", None), V2Pruner)


def _pruner_steps(pruner: Any) -> int:
    """The optimizer steps a pruner's own ``compress()`` trains."""
    if getattr(pruner, "_sub", None) is not None:
        return int(pruner.interval_steps) * int(pruner.total_iteration)
    steps = getattr(pruner, "training_steps", 0) if getattr(pruner, "evaluator", None) is not None else 0
    return steps if isinstance(steps, int) else 0


def _restore(compressor: Any) -> None:
    """Put a member's original layers back (its wrappers are kept for re-wrapping)."""
    target = getattr(compressor, "_sub", None) or compressor
    restore = getattr(target, "_restore_layers", None)
    if callable(restore):
        restore()


def _run_pruner(pruner: Any) -> dict[str, dict[str, torch.Tensor]]:
    """Compute a pruner's masks (its own training included); leave them in the weights; return them."""
    sub = getattr(pruner, "_sub", None) or pruner
    sub._wrap_model()
    pruner.compress()
    sub._unwrap_model()  # NNI 2.x/3.0: the layers come back holding weight * mask
    return v2_masks(sub)


def _mask_keeper(model: nn.Module, masks: Mapping[str, Mapping[str, torch.Tensor]]) -> Callable[[], None] | None:
    """A task multiplying every mask into its (plain) layer's parameter again, run after each optimizer step."""
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
    for name, entry in masks.items():
        layer = model.get_submodule(name)
        for key, mask in entry.items():
            param = getattr(layer, key, None)
            if isinstance(param, torch.Tensor) and mask is not None and param.shape == mask.shape:
                pairs.append((param, mask.to(param.device, param.dtype)))
    if not pairs:
        return None

    def keep() -> None:
        with torch.no_grad():
            for param, mask in pairs:
                param.mul_(mask)

    return keep


class V3Compressor:
    """Mixin of NNI 3.0's quantizers and distillers: ``from_compressor`` and the chain's ``compress``.

    A member implements ``_fuse_preprocess(evaluator)`` (wrap, patch the loss or the optimizer step) and
    ``_fuse_postprocess(evaluator)`` (remove its hooks), run around the chain's one training run.
    """

    bound_model: nn.Module
    evaluator: Evaluator | None = None
    #: the compressors this one was built from with ``from_compressor``, the first first
    _previous: Sequence[Any] = ()

    @classmethod
    def from_compressor(cls, compressor: Any, new_config_list: Sequence[Mapping[str, Any]], *args: Any,
                        evaluator: Evaluator | None = None, **kwargs: Any) -> Any:
        """A new compressor on ``compressor``'s model and evaluator (``evaluator`` when it has none).

        ``args`` and ``kwargs`` go to the new class's constructor after ``(model, config_list, evaluator)``;
        ``compress(max_steps, max_epochs)`` of the new compressor runs the chain (see the module docstring).
        """
        own = evaluator_of(compressor)
        if own is not None and evaluator is not None and evaluator is not own:
            warnings.warn(f"{cls.__name__}.from_compressor: {type(compressor).__name__} already has an evaluator; "
                          "the evaluator passed here is ignored (as in NNI).", UserWarning, stacklevel=2)
        chosen = own if own is not None else evaluator
        if chosen is None:
            raise ConfigError(f"{cls.__name__}.from_compressor needs an evaluator: {type(compressor).__name__} has "
                              "none, so pass evaluator=TorchEvaluator(...).")
        model = getattr(compressor, "bound_model", None)
        if not isinstance(model, nn.Module):
            raise ConfigError(f"{cls.__name__}.from_compressor takes a compressor (pruner, quantizer, distiller), "
                              f"got {type(compressor).__name__}.")
        chain = [*getattr(compressor, "_previous", ()), compressor]
        for member in chain:
            _restore(member)
        new = cls(model, new_config_list, chosen, *args, **kwargs)
        new._previous = chain
        return new

    def chain(self) -> list[Any]:
        """Every compressor this one runs, in order: those it was built from, then itself."""
        return [*self._previous, self]

    def _fuse_preprocess(self, evaluator: Evaluator) -> None:
        raise NotImplementedError(f"{type(self).__name__} must say how it joins the chain's training.")

    def _fuse_postprocess(self, evaluator: Evaluator) -> None:
        """Nothing to undo by default."""

    def _run_chain(self, max_steps: int | None, max_epochs: int | None) -> None:
        """Run the pruners of the chain, then one training run with the others active (module docstring)."""
        evaluator = self.evaluator
        if not isinstance(evaluator, Evaluator):
            raise ConfigError(f"{type(self).__name__}.compress(max_steps, max_epochs) trains through an NNI 3.0 "
                              "evaluator; build it with one (TorchEvaluator, TransformersEvaluator).")
        if max_steps is None and max_epochs is None:
            raise ConfigError(f"{type(self).__name__}.compress needs max_steps or max_epochs: how long the "
                              "evaluator trains with compression active.")
        members = self.chain()
        for member in members:
            _restore(member)
        used, masks = 0, {}
        for member in members:
            if _is_pruner(member):
                used += _pruner_steps(member)
                masks.update(_run_pruner(member))
        rest = None if max_steps is None else max_steps - used
        if rest is not None and rest < 1:
            raise ConfigError(f"compress(max_steps={max_steps}) leaves no step for {type(self).__name__}: the "
                              f"pruners of the chain train {used} steps first; give more max_steps.")
        trainers = [m for m in members if not _is_pruner(m)]
        keep = _mask_keeper(self.bound_model, masks)
        with evaluator.bound(self.bound_model):
            if keep is not None:
                evaluator.patch_optimizer_step([], [keep])
            try:
                for member in trainers:
                    member._fuse_preprocess(evaluator)
                evaluator.train(max_steps=rest, max_epochs=max_epochs)
            finally:
                for member in trainers:
                    member._fuse_postprocess(evaluator)

    def unwrap_model(self) -> nn.Module:
        """Put the original layers of every compressor of the chain back; return the model."""
        for member in self.chain():
            _restore(member)
        own = getattr(super(), "unwrap_model", None)
        if callable(own):  # an engine's: also gives the optimizer its own step back
            own()
        return self.bound_model
