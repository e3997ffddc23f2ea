"""Recorders: capture what a model computes, by name, while it runs (MMRazor's recorders, leak-free).

A recorder watches one *source*: a module's outputs (``ModuleOutputs``, source = a name from
``model.named_modules()``, ``""`` for the model itself), a module's inputs (``ModuleInputs``), the outputs of a
method of a class (``MethodOutputs``, source = ``"package.module.Class.method"``), or of a function
(``FunctionOutputs``, source = ``"package.module.function"``, patched where it is defined). Hooks and patches
exist only inside ``with recorder:`` (or a :class:`RecorderManager`), so nothing stays attached to a model
after a step, an error or a save. Entering clears what was recorded before.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError, closest
from slimkit.utils import main_tensor


def _import_attr(path: str, what: str) -> tuple[Any, str, Any]:
    """(owner object, attribute name, attribute) for ``"pkg.module[.Class].attr"``; clear error otherwise."""
    if not isinstance(path, str) or "." not in path:
        raise ConfigError(f"A {what} source must be a dotted path such as 'torch.nn.functional.relu', got {path!r}.")
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:-1]:
                owner = getattr(owner, part)
            return owner, parts[-1], getattr(owner, parts[-1])
        except AttributeError:
            names = [n for n in dir(owner) if not n.startswith("_")]
            raise ConfigError(f"{what} source {path!r} does not exist.{closest(parts[-1], names)}") from None
    raise ConfigError(f"{what} source {path!r}: no importable module at its start.")


class BaseRecorder:
    """Base of the recorders: ``data`` holds one entry per call of the source since the last ``with``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.data: list[Any] = []
        self._active = False

    def initialize(self, model: nn.Module | None = None) -> None:
        """Bind to ``model`` (module recorders); check the source exists."""

    def _attach(self) -> None:
        """Install the hook or patch (each recorder kind implements it)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _attach() (install its hook or patch).")

    def _detach(self) -> None:
        """Remove what :meth:`_attach` installed."""
        raise NotImplementedError(f"{type(self).__name__} must implement _detach() (remove its hook or patch).")

    def __enter__(self) -> BaseRecorder:
        """Clear the data and attach the hook or patch."""
        if self._active:
            raise ConfigError(f"{type(self).__name__}({self.source!r}) is already recording; do not nest it.")
        self.data = []
        self._attach()
        self._active = True
        return self

    def __exit__(self, *exc: object) -> None:
        """Remove the hook or patch (also when the block raised)."""
        self._active = False
        self._detach()

    def get_record_data(self, record_idx: int = 0, data_idx: int | None = None) -> Any:
        """The ``record_idx``-th recorded call; ``data_idx`` picks an element of a tuple output."""
        if not self.data:
            raise ConfigError(f"{type(self).__name__}({self.source!r}) recorded nothing: the source did not run "
                              "inside the recording block (is it on the model's forward path?).")
        if record_idx >= len(self.data):
            raise ConfigError(f"{type(self).__name__}({self.source!r}) has {len(self.data)} record(s); "
                              f"record_idx={record_idx} is out of range.")
        value = self.data[record_idx]
        if data_idx is not None:
            if not isinstance(value, (tuple, list)) or data_idx >= len(value):
                size = len(value) if isinstance(value, (tuple, list)) else "not a tuple"
                raise ConfigError(f"{type(self).__name__}({self.source!r}): data_idx={data_idx} but the record is "
                                  f"{size}.")
            value = value[data_idx]
        elif not isinstance(value, torch.Tensor):
            value = main_tensor(value)
        return value


class _ModuleRecorder(BaseRecorder):
    def __init__(self, source: str) -> None:
        super().__init__(source)
        self._module: nn.Module | None = None
        self._handle: Any = None

    def initialize(self, model: nn.Module | None = None) -> None:
        """Find the source module in ``model`` (unknown names list the closest real ones)."""
        if model is None:
            raise ConfigError(f"{type(self).__name__}({self.source!r}) needs the model to find its module in.")
        names = [n for n, _ in model.named_modules()]
        if self.source not in names:
            raise ConfigError(f"{type(self).__name__}: the model has no module {self.source!r}."
                              f"{closest(self.source, names)} Modules: {', '.join(n for n in names[:40] if n)}"
                              f"{' ...' if len(names) > 40 else ''}.")
        self._module = model.get_submodule(self.source)

    def _check_bound(self) -> nn.Module:
        if self._module is None:
            raise ConfigError(f"{type(self).__name__}({self.source!r}) is not bound: call initialize(model) first.")
        return self._module

    def _detach(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


class ModuleOutputsRecorder(_ModuleRecorder):
    """Records the outputs of module ``source`` (a ``model.named_modules()`` name) on every call."""

    def _attach(self) -> None:
        self._handle = self._check_bound().register_forward_hook(lambda m, i, o: self.data.append(o))


class ModuleInputsRecorder(_ModuleRecorder):
    """Records the positional inputs of module ``source`` on every call (a tuple; ``data_idx=0`` the first).

    Two sources read what MMRazor's models are called with rather than what slimkit calls them with (slimkit
    runs ``model(inputs)``; MMEngine runs ``model(inputs, data_samples, mode)`` and a classifier's head runs
    ``loss_module(cls_score, gt_label)``): ``""`` (the whole model) records ``(inputs, data_samples)``, and a
    ``...loss_module`` records ``(output, labels)`` -- hooked when the model has it and runs it (a model with
    MMEngine's ``loss(inputs, data_samples)``, which the algorithms call in loss mode), else handed over by the
    algorithm after the forward (a model without it, or whose forward never reaches it). The algorithm hands
    these over with :meth:`RecorderManager.feed`, so configs that read the labels with ``data_idx=1`` (DKD,
    WSLD, CRD, BYOT) work as shipped.
    """

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.virtual: str | None = None  # "model" / "loss": fed instead of a hook; "loss_hooked": fed when silent

    def initialize(self, model: nn.Module | None = None) -> None:
        """Find the source module, or take the data samples (see the class doc)."""
        names = [n for n, _ in model.named_modules()] if model is not None else []
        if self.source == "":
            self.virtual = "model"
        elif self.source.split(".")[-1] == "loss_module":
            self.virtual = "loss" if self.source not in names else "loss_hooked"
            if self.virtual == "loss_hooked":
                super().initialize(model)
        else:
            super().initialize(model)

    def _attach(self) -> None:
        if self.virtual in (None, "loss_hooked"):
            self._handle = self._check_bound().register_forward_pre_hook(lambda m, i: self.data.append(i))

    def feed(self, inputs: Any, data_samples: Any, output: Any, labels: Any) -> None:
        """Record what MMEngine would have passed (only for the ``""`` and ``loss_module`` sources)."""
        if self._active and self.virtual == "model":
            self.data.append((inputs, data_samples))
        elif self._active and (self.virtual == "loss" or (self.virtual == "loss_hooked" and not self.data)):
            self.data.append((main_tensor(output) if output is not None else None, labels))


class _PatchRecorder(BaseRecorder):
    what = "function"

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self._owner, self._attr, self._original = _import_attr(source, self.what)
        if not callable(self._original):
            raise ConfigError(f"{self.what} source {source!r} is a {type(self._original).__name__}, not callable.")

    def _attach(self) -> None:
        original, data = self._original, self.data

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            data.append(self._entry(args, kwargs, out))
            return out

        setattr(self._owner, self._attr, wrapped)

    def _entry(self, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
        """What one call records (the outputs; the inputs recorders override it)."""
        return out

    def _detach(self) -> None:
        setattr(self._owner, self._attr, self._original)


class MethodOutputsRecorder(_PatchRecorder):
    """Records the outputs of method ``source`` = ``"package.module.Class.method"`` (every instance's calls)."""

    what = "method"


class FunctionOutputsRecorder(_PatchRecorder):
    """Records the outputs of function ``source`` = ``"package.module.function"``, patched in that module.

    Only calls that look the function up in its module at call time are seen (``F.relu(x)`` is; a name
    imported with ``from module import function`` before recording is not).
    """


RECORDERS: dict[str, type[BaseRecorder]] = {}


def register_recorder(name: str, cls: type[BaseRecorder]) -> type[BaseRecorder]:
    """Make ``cls`` the recorder type ``name`` (``dict(type=name, source=...)`` in a distiller's recorders)."""
    RECORDERS[name] = cls
    register_component(cls, "recorder", name)
    return cls


for _name, _cls in {"ModuleOutputs": ModuleOutputsRecorder, "ModuleInputs": ModuleInputsRecorder,
                    "MethodOutputs": MethodOutputsRecorder, "FunctionOutputs": FunctionOutputsRecorder}.items():
    register_recorder(_name, _cls)


class RecorderManager:
    """Several named recorders recorded together: ``with manager: model(x)`` then ``manager.get(name)``.

    ``recorders``: name -> a recorder or ``dict(type="ModuleOutputs", source="fc")`` (types: ModuleOutputs,
    ModuleInputs, MethodOutputs, FunctionOutputs, and MethodInputs, FunctionInputs, Parameter from
    :mod:`~slimkit.training.distill.input_recorders`).
    """

    def __init__(self, recorders: Mapping[str, Any] | None = None) -> None:
        self.recorders: dict[str, BaseRecorder] = {}
        self._started = contextlib.ExitStack()
        for name, spec in (recorders or {}).items():
            if isinstance(spec, Mapping):
                spec = dict(spec)
                spec.pop("_scope_", None)
                kind = spec.pop("type", None)
                if kind not in RECORDERS:
                    raise ConfigError(f"recorder {name!r}: unknown type {kind!r}.{closest(str(kind), RECORDERS)} "
                                      f"Types: {', '.join(RECORDERS)}.")
                if set(spec) != {"source"}:
                    raise ConfigError(f"recorder {name!r} ({kind}) takes exactly the field 'source', got "
                                      f"{sorted(spec)}.")
                spec = RECORDERS[kind](spec["source"])
            if not isinstance(spec, BaseRecorder):
                raise ConfigError(f"recorder {name!r} must be a recorder or a dict(type=..., source=...), got "
                                  f"{type(spec).__name__}.")
            self.recorders[name] = spec

    def initialize(self, model: nn.Module) -> None:
        """Bind every module recorder to ``model``."""
        for recorder in self.recorders.values():
            recorder.initialize(model)

    def __enter__(self) -> RecorderManager:
        """Start every recorder; if one fails to start, those already started are stopped."""
        with contextlib.ExitStack() as stack:
            for recorder in self.recorders.values():
                stack.enter_context(recorder)
            self._started = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop every recorder (in reverse order)."""
        self._started.close()

    def feed(self, inputs: Any, data_samples: Any, output: Any = None, labels: Any = None) -> None:
        """Hand the batch's inputs, data samples, output and labels to the recorders that read them.

        Those are :class:`ModuleInputsRecorder` on ``""`` or on a ``loss_module``; call it inside the block.
        """
        for recorder in self.recorders.values():
            if isinstance(recorder, ModuleInputsRecorder):
                recorder.feed(inputs, data_samples, output, labels)

    def get(self, name: str, record_idx: int = 0, data_idx: int | None = None) -> Any:
        """What recorder ``name`` captured (see :meth:`BaseRecorder.get_record_data`)."""
        if name not in self.recorders:
            raise ConfigError(f"No recorder named {name!r}.{closest(name, self.recorders)} Recorders: "
                              f"{', '.join(self.recorders) or 'none'}.")
        return self.recorders[name].get_record_data(record_idx, data_idx)
