"""The ``Compressor`` base shared by ``Pruner`` and ``Quantizer``: argument checks, wrapping, optimizer hook, export.

Both NNI-shaped engines work the same way: resolve ``config_list`` to layers, put a module wrapper in place of
each layer (the wrapper changes the forward pass), optionally run code around every ``optimizer.step()``, and
export a plain state dict of the unwrapped model. What differs (which wrapper, what happens on a step, what
the exported weights are) is left to the subclasses through a few hooks.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import torch
from torch import nn

from slimkit.engines._io import export_onnx
from slimkit.errors import ConfigError
from slimkit.utils import model_device

W = TypeVar("W", bound=nn.Module)


class Compressor(Generic[W]):
    """Wrap the layers ``config_list`` selects in ``wrapper_class`` modules and manage them.

    Subclasses set ``wrapper_class``, ``config_error`` (the error raised on bad arguments), ``role`` (the word
    used in messages: "pruner", "quantizer") and implement :meth:`_create_wrappers`; they may override
    :meth:`_init_state`, :meth:`_before_optimizer_step`, :meth:`_on_optimizer_step` and :meth:`_buffer_device`.
    """

    wrapper_class: ClassVar[type[nn.Module]] = nn.Module
    config_error: ClassVar[type[ConfigError]] = ConfigError
    role: ClassVar[str] = "compressor"
    #: The name users know this class by when it differs from the class name: an engine whose NNI 1.x name went
    #: to NNI 2.x's class (``LevelEngine`` is NNI 1.x's ``LevelPruner``). Read through :meth:`display_name`,
    #: which honours it only on the class that sets it (a subclass is called by its own name).
    user_name: ClassVar[str | None] = None

    @classmethod
    def display_name(cls) -> str:
        """The name messages (and the registry's NNI alias) call this class by: its own ``user_name``, else its name."""
        return vars(cls).get("user_name") or cls.__name__

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
    ) -> None:
        self._check_arguments(model, optimizer)
        self.bound_model = model
        self.config_list = config_list
        self.optimizer = optimizer
        self.dummy_input = dummy_input
        self._original_step: Callable[..., Any] | None = None
        self._step_was_instance_attr = False
        self.is_wrapped = False
        self.modules_wrapper: list[W] = []
        self._init_state()
        self.modules_wrapper = self._create_wrappers()
        self._wrap_model()
        if optimizer is not None:
            self.patch_optimizer()

    def _check_arguments(self, model: Any, optimizer: Any) -> None:
        error, role = self.config_error, self.role
        if not isinstance(model, nn.Module):
            raise error(f"model must be a torch.nn.Module, got {type(model).__name__}.")
        if any(isinstance(m, self.wrapper_class) for m in model.modules()):
            raise error(f"This model is already wrapped by a {role}; call that {role}'s unwrap_model() first.")
        if optimizer is not None and not callable(getattr(optimizer, "step", None)):
            raise error(f"optimizer must have a step() method, got {type(optimizer).__name__}.")

    # --- hooks for subclasses --------------------------------------------------------------------------
    def _init_state(self) -> None:
        """Set the subclass's own attributes (called after the argument checks, before the wrappers exist)."""

    def _create_wrappers(self) -> list[W]:
        """Resolve ``config_list`` and return one wrapper per selected layer, in model order."""
        raise NotImplementedError(f"{self.display_name()} must implement _create_wrappers().")

    def _buffer_device(self, wrapper: W) -> torch.device:
        """Where :meth:`set_wrappers_attribute` puts tensor attributes of ``wrapper``."""
        return model_device(wrapper)

    # --- wrapping ----------------------------------------------------------------------------------------
    def _wrap_model(self) -> None:
        """Put every wrapper in place of its layer (idempotent)."""
        if not self.is_wrapped:
            for wrapper in self.modules_wrapper:
                self.bound_model.set_submodule(wrapper.name, wrapper)
            self.is_wrapped = True

    def _restore_layers(self) -> None:
        """Put the original layers back as they are, keeping the wrappers for re-wrapping (idempotent).

        What the engine itself uses to look at the plain model (export, analyses): it never changes a weight.
        """
        if self.is_wrapped:
            for wrapper in self.modules_wrapper:
                self.bound_model.set_submodule(wrapper.name, wrapper.module)
            self.is_wrapped = False

    def _unwrap_model(self) -> None:
        """NNI's ``_unwrap_model()``: put the original layers back, keeping the wrappers for :meth:`_wrap_model`.

        NNI 1.x semantics: the layers come back as they are stored (a pruner's dense weights; masks are applied
        only by ``unwrap_model(apply_masks=True)`` or after an optimizer step). NNI 2.x's pruners override this
        to leave the masked weights in the layers, as NNI 2.x does.
        """
        self._restore_layers()

    def unwrap_model(self) -> nn.Module:
        """Put the original layers back and restore the optimizer's ``step``; returns the model."""
        self._restore_layers()
        self.restore_optimizer()
        return self.bound_model

    def get_modules_wrapper(self) -> list[W]:
        """The wrappers, in model order."""
        return list(self.modules_wrapper)

    def set_wrappers_attribute(self, name: str, value: Any) -> None:
        """Give every wrapper attribute ``name``: tensors become buffers (a copy each), containers are copied."""
        for wrapper in self.modules_wrapper:
            if isinstance(value, torch.Tensor):
                if hasattr(wrapper, name) and name not in wrapper._buffers:
                    delattr(wrapper, name)
                wrapper.register_buffer(name, value.detach().clone().to(self._buffer_device(wrapper)))
            else:
                setattr(wrapper, name, copy.copy(value) if isinstance(value, (list, dict, set)) else value)

    def compress(self) -> nn.Module:
        """Return the wrapped model (subclasses compute what they need first)."""
        return self.bound_model

    def update_epoch(self, epoch: int) -> None:
        """Tell the compressor a new epoch starts (epoch-scheduled subclasses override this)."""

    # --- optimizer hook ----------------------------------------------------------------------------------
    def patch_optimizer(self) -> None:
        """Make ``optimizer.step()`` run the before-hook, the original step, then :meth:`_on_optimizer_step`."""
        if self.optimizer is None or self._original_step is not None:
            return
        original = self.optimizer.step

        def step(opt: Any, *args: Any, **kwargs: Any) -> Any:
            self._before_optimizer_step()
            result = original(*args, **kwargs)
            self._on_optimizer_step()
            return result

        self._original_step = original
        self._step_was_instance_attr = "step" in vars(self.optimizer)
        self.optimizer.step = types.MethodType(step, self.optimizer)

    def restore_optimizer(self) -> None:
        """Undo :meth:`patch_optimizer`."""
        if self.optimizer is not None and self._original_step is not None:
            if self._step_was_instance_attr:
                self.optimizer.step = self._original_step
            else:
                del self.optimizer.step  # back to the class's own step
            self._original_step = None

    def _before_optimizer_step(self) -> None:
        """Run before each optimizer step (nothing by default)."""

    def _on_optimizer_step(self) -> None:
        """Run after each optimizer step (nothing by default)."""

    # --- export helpers ----------------------------------------------------------------------------------
    def _unwrapped_state_dict(self) -> dict[str, torch.Tensor]:
        """A detached copy of the unwrapped model's state dict (the model is re-wrapped if it was)."""
        was_wrapped = self.is_wrapped
        self._restore_layers()
        try:
            return {k: v.detach().clone() for k, v in self.bound_model.state_dict().items()}
        finally:
            if was_wrapped:
                self._wrap_model()

    def _export_onnx(self, path: str | Path, input_shape: Sequence[int] | None, state: Mapping[str, torch.Tensor],
                     shape_hint: str = "(N, C, ...)") -> None:
        """Export a plain copy of the model holding ``state`` to ONNX at ``path``."""
        if input_shape is not None:
            dummy: Any = torch.randn(*input_shape)
        elif self.dummy_input is not None:
            dummy = self.dummy_input
        else:
            raise self.config_error(
                f"export_model(onnx_path=...) needs input_shape={shape_hint} or a {self.role} built with "
                "dummy_input=..."
            )
        was_wrapped = self.is_wrapped
        self._restore_layers()
        try:
            plain = copy.deepcopy(self.bound_model)
        finally:
            if was_wrapped:
                self._wrap_model()
        plain.load_state_dict(dict(state))
        export_onnx(plain, dummy, Path(path))
