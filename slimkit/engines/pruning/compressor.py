"""The ``Pruner`` base class: layer selection, mask bookkeeping, activation collectors, masked export."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from slimkit.core.io import save_tensors_atomic
from slimkit.engines._compressor import Compressor
from slimkit.engines.pruning.config import PruningConfigError, layer_weight, resolve_config_list
from slimkit.engines.pruning.io import MODEL_FORMAT, Masks, load_masks, save_masks
from slimkit.engines.pruning.maskers import MaskDict, WeightMasker
from slimkit.engines.pruning.wrapper import PrunerModuleWrapper

Collector = Callable[[PrunerModuleWrapper, tuple, Any], None]


class Pruner(Compressor[PrunerModuleWrapper]):
    """Base pruner: wraps the layers ``config_list`` selects and keeps one mask pair per layer.

    ``Pruner(model, config_list, optimizer=None, dummy_input=None)``. Subclasses set ``masker_class`` (built
    as ``masker_class(model, pruner)``) or ``self.masker``, and the class attributes ``default_op_types``
    (what ``"default"`` means), ``supported_op_types`` (``None`` = any layer with a weight) and ``iterative``
    (recompute masks after every ``optimizer.step()``; one-shot pruners compute once in :meth:`compress`).
    """

    wrapper_class = PrunerModuleWrapper
    #: the wrapper built around each selected layer (a subclass of ``wrapper_class``, which marks a wrapped model)
    layer_wrapper: type[PrunerModuleWrapper] = PrunerModuleWrapper
    config_error = PruningConfigError
    role = "pruner"
    default_op_types: tuple[str, ...] = ("Conv2d", "Linear")
    supported_op_types: tuple[str, ...] | None = None
    extra_config_keys: tuple[str, ...] = ()
    iterative: bool = False
    masker_class: type[WeightMasker] | None = None

    def _init_state(self) -> None:
        self.masker: WeightMasker | None = getattr(self, "masker", None)
        if self.masker is None and self.masker_class is not None:
            self.masker = self.masker_class(self.bound_model, self)
        self.step_count = 0
        self._collectors: dict[int, list[RemovableHandle]] = {}
        self._next_collector_id = 0

    # --- layer selection and wrapping -------------------------------------------------------------
    def _select_layers(self) -> list[tuple[str, nn.Module, dict[str, Any]]]:
        """Resolve ``config_list`` into ``(name, module, config)`` for every layer to wrap."""
        resolved = resolve_config_list(
            self.bound_model, self.config_list, self.default_op_types, self.supported_op_types,
            self.extra_config_keys,
        )
        return [(name, self.bound_model.get_submodule(name), cfg) for name, cfg in resolved.items()]

    def _create_wrappers(self) -> list[PrunerModuleWrapper]:
        wrappers = []
        for name, module, config in self._select_layers():
            layer_weight(module, name)
            wrapper = self.layer_wrapper(module, name, type(module).__name__, config)
            wrapper.if_calculated = False
            wrappers.append(wrapper)
        return wrappers

    def _buffer_device(self, wrapper: PrunerModuleWrapper) -> torch.device:
        return wrapper.weight_mask.device

    def unwrap_model(self, apply_masks: bool = False) -> nn.Module:
        """Return the model with plain layers again; ``apply_masks=True`` multiplies masks into the weights.

        Also restores the optimizer's original ``step``. The pruner can be re-attached with ``_wrap_model()``.
        """
        if apply_masks:
            for wrapper in self.modules_wrapper:
                wrapper.apply_masks_to_module()
        return super().unwrap_model()

    # --- activation collectors ------------------------------------------------------------------------
    def add_activation_collector(self, collector: Collector) -> int:
        """Call ``collector(wrapper, inputs, output)`` after every wrapped layer's forward; returns an id."""
        if not callable(collector):
            raise PruningConfigError(f"collector must be callable(wrapper, input, output), got {collector!r}.")
        self._next_collector_id += 1
        self._collectors[self._next_collector_id] = [
            w.register_forward_hook(collector) for w in self.modules_wrapper
        ]
        return self._next_collector_id

    def remove_activation_collector(self, collector_id: int) -> None:
        """Remove the hooks of a collector added with :meth:`add_activation_collector`."""
        if collector_id not in self._collectors:
            raise PruningConfigError(
                f"No activation collector with id {collector_id!r}; active ids: {sorted(self._collectors)}."
            )
        for handle in self._collectors.pop(collector_id):
            handle.remove()

    # --- optimizer hook (patched in by Compressor.patch_optimizer) ---------------------------------------
    def _before_optimizer_step(self) -> None:
        """Hook run before each optimizer step (data-driven pruners collect gradients here)."""

    def _on_optimizer_step(self) -> None:
        """After each step: recompute masks for iterative pruners, then zero pruned weights in place."""
        self.step_count += 1
        if self.iterative:
            self.update_mask()
        for wrapper in self.modules_wrapper:
            wrapper.apply_masks_to_module()

    # --- masks ----------------------------------------------------------------------------------------
    def calc_mask(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None = None) -> MaskDict | None:
        """One-shot default: compute the layer's masks once with the masker, then return ``None``."""
        if wrapper.if_calculated:
            return None
        if self.masker is None:
            raise NotImplementedError(f"{self.display_name()} sets no masker; override calc_mask or set self.masker.")
        masks = self.masker.calc_mask(sparsity=wrapper.config["sparsity"], wrapper=wrapper, wrapper_idx=wrapper_idx)
        wrapper.if_calculated = True
        return masks

    def _store_masks(self, wrapper: PrunerModuleWrapper, masks: Mapping[str, torch.Tensor | None]) -> None:
        for key, value in masks.items():
            if key not in ("weight_mask", "bias_mask"):
                raise PruningConfigError(f"A mask dict may hold 'weight_mask' and 'bias_mask', got {key!r}.")
            current = getattr(wrapper, key)
            if value is None or current is None:
                continue
            if tuple(value.shape) != tuple(current.shape):
                raise PruningConfigError(
                    f"{key} for layer {wrapper.name!r} has shape {tuple(value.shape)}; "
                    f"the layer needs {tuple(current.shape)}."
                )
            current.copy_(value.detach().to(device=current.device, dtype=current.dtype))

    @torch.no_grad()
    def update_mask(self) -> None:
        """Ask :meth:`calc_mask` for every wrapper and store the masks it returns."""
        for idx, wrapper in enumerate(self.modules_wrapper):
            masks = self.calc_mask(wrapper, wrapper_idx=idx)
            if masks is not None:
                self._store_masks(wrapper, masks)

    def compress(self) -> nn.Module:
        """Compute the masks (one-shot pruners) and return the wrapped model."""
        self.update_mask()
        return self.bound_model

    def get_pruned_weights(self, dim: int = 0) -> list[tuple[str, int, int]]:
        """Print and return ``(layer, kept, total)`` units along ``dim`` of each pruned layer's weight (NNI 2.0-2.5)."""
        rows = []
        for wrapper in self.modules_wrapper:
            mask = wrapper.weight_mask
            if mask.dim() == 1:
                kept, total = int(mask.count_nonzero()), mask.numel()
            else:
                others = [d for d in range(mask.dim()) if d != dim]
                kept, total = int((mask.abs().sum(dim=others) != 0).sum()), mask.shape[dim]
            rows.append((wrapper.name, kept, total))
            print(f"simulated prune {wrapper.name} remain/total: {kept}/{total}")
        return rows

    def get_masks(self) -> Masks:
        """``{layer name in the unwrapped model: {"weight_mask": Tensor, "bias_mask": Tensor | None}}``."""
        return {
            w.name: {
                "weight_mask": w.weight_mask.detach().clone(),
                "bias_mask": None if w.bias_mask is None else w.bias_mask.detach().clone(),
            }
            for w in self.modules_wrapper
        }

    def apply_masks(self, masks: Mapping[str, Mapping[str, torch.Tensor | None]]) -> None:
        """Install masks in :meth:`get_masks` format and mark those layers as computed."""
        known = {w.name: w for w in self.modules_wrapper}
        for name, layer_masks in masks.items():
            if name not in known:
                raise PruningConfigError(
                    f"Masks name layer {name!r}, which this pruner does not wrap; wrapped layers: "
                    f"{', '.join(known) or '(none)'}."
                )
            with torch.no_grad():
                self._store_masks(known[name], layer_masks)
            known[name].if_calculated = True

    def load_masks(self, mask_path: str | os.PathLike) -> Masks:
        """Read masks written by :meth:`export_model` and install them; returns them."""
        masks = load_masks(mask_path)
        self.apply_masks(masks)
        return masks

    # --- weights ------------------------------------------------------------------------------------
    def weights_snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of the model's parameters and buffers without the masks (to rewind or to try candidates)."""
        skip = {f"{w.name}.{b}" for w in self.modules_wrapper for b in w._buffers} if self.is_wrapped else set()
        return {k: v.detach().clone() for k, v in self.bound_model.state_dict().items() if k not in skip}

    @torch.no_grad()
    def restore_weights(self, snapshot: Mapping[str, torch.Tensor]) -> None:
        """Copy the values of a :meth:`weights_snapshot` (taken in the same wrapped state) back into the model."""
        state = self.bound_model.state_dict()
        for key, value in snapshot.items():
            state[key].copy_(value)

    # --- export ---------------------------------------------------------------------------------------
    def masked_state_dict(self) -> dict[str, torch.Tensor]:
        """State dict of the unwrapped model with the masks multiplied into weight and bias (copies)."""
        state = self._unwrapped_state_dict()
        for wrapper in self.modules_wrapper:
            for param, mask in (("weight", wrapper.weight_mask), ("bias", wrapper.bias_mask)):
                key = f"{wrapper.name}.{param}"
                if mask is not None and key in state:
                    state[key] = state[key] * mask.to(state[key].dtype)
        return state

    def export_model(
        self,
        model_path: str | os.PathLike,
        mask_path: str | os.PathLike | None = None,
        onnx_path: str | os.PathLike | None = None,
        input_shape: Sequence[int] | None = None,
    ) -> None:
        """Write the masked weights (and optionally the masks, an ONNX graph) as safetensors, atomically.

        ``model_path`` holds a plain state dict of the unwrapped model; load it with
        :func:`slimkit.engines.pruning.io.load_state_dict_file` and ``model.load_state_dict``. The ONNX
        export needs ``input_shape`` (a random float input) or the pruner's ``dummy_input``.
        """
        save_tensors_atomic(self.masked_state_dict(), model_path, MODEL_FORMAT)
        if mask_path is not None:
            save_masks(self.get_masks(), mask_path)
        if onnx_path is not None:
            self._export_onnx(onnx_path, input_shape, self.masked_state_dict(), "(N, C, H, W, ...)")
