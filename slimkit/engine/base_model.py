"""Describe the model a smash started from, and rebuild that architecture on load without pickle."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from slimkit import zoo
from slimkit.engines.quantization.lowbit.layers import replay_layers
from slimkit.engines.quantization.lowbit.linear import PackedLinear
from slimkit.errors import SaveLoadError
from slimkit.zoo.sources import FACTORY_ATTR, rebuild_from_factory

#: base kinds slimkit builds itself (so it may build them on the meta device); "user" needs ``model=``
REBUILT_KINDS = ("zoo", "hf")


def _unsaved_buffer_dtypes(model: torch.nn.Module) -> dict[str, str]:
    """The dtype of each floating buffer not in the state dict (rotary ``inv_freq``...), restored by a rebuild."""
    try:
        saved = set(model.state_dict(keep_vars=True))
    except Exception:  # noqa: BLE001 - a custom state_dict hook may fail on odd modules: nothing to record then
        return {}
    return {name: str(b.dtype).split(".")[-1] for name, b in model.named_buffers()
            if name not in saved and b.is_floating_point()}


def describe_base(model: torch.nn.Module) -> dict[str, Any]:
    """JSON-able recipe for rebuilding ``model``'s architecture.

    A zoo entry, a Hugging Face config, a factory (``package.module:fn``, run on load only with
    ``trust_code=True``), or user code (loading needs ``model=``). Packed low-bit layers the model already has
    (an imported compressed-tensors or GPTQ checkpoint) are recorded under ``"packed"`` and rebuilt on load.
    """
    cls_path = f"{type(model).__module__}.{type(model).__qualname__}"
    dtype = next((str(p.dtype).split(".")[-1] for p in model.parameters() if p.is_floating_point()), None)
    spec: dict[str, Any] = {"dtype": dtype, "class": cls_path}
    packed = {n: m.spec() for n, m in model.named_modules() if isinstance(m, PackedLinear)}
    if packed:  # a model that arrived with packed layers (an imported checkpoint): part of its architecture
        spec["packed"] = packed
    buffers = _unsaved_buffer_dtypes(model)
    if buffers:
        spec["buffer_dtypes"] = buffers
    zoo_name = getattr(model, "slimkit_zoo_name", None)
    if zoo_name:
        return {**spec, "kind": "zoo", "name": zoo_name, "kwargs": dict(getattr(model, "slimkit_zoo_kwargs", {}) or {})}
    factory = getattr(model, FACTORY_ATTR, None)
    if factory:
        return {**spec, "kind": "factory", "factory": str(factory)}
    try:
        import transformers
    except ImportError:  # pragma: no cover - transformers is a dependency
        transformers = None
    if transformers is not None and isinstance(model, transformers.PreTrainedModel):
        return {**spec, "kind": "hf", "hf_class": type(model).__name__, "config": model.config.to_dict()}
    return {**spec, "kind": "user"}


@contextlib.contextmanager
def meta_parameters() -> Iterator[None]:
    """Inside the block, every plain ``nn.Parameter`` a module registers is moved to the meta device at once.

    Buffers stay real, so non-persistent buffers computed at init (rotary ``inv_freq``, position ids) are
    right without a state-dict entry. The parameters' init then runs on meta (no memory, no time); a skeleton
    built this way must receive every parameter from ``load_state_dict(..., assign=True)``. Each layer still
    allocates its weight uninitialised for a moment (``torch.empty``), one layer at a time. The patch is on
    ``nn.Module.register_parameter`` and is process-wide while the block runs: build nothing else in other
    threads meanwhile. Parameter subclasses (lazy, sharded...) are left untouched.
    """
    original = nn.Module.register_parameter

    def register(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(module, name, param)
        if type(param) is nn.Parameter and not param.is_meta:
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = register  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype | None) -> Iterator[None]:
    """Inside the block, new floating tensors default to ``dtype`` (None: unchanged), as transformers' loader does.

    Building a model this way (rather than casting it afterwards) leaves the tensors its code creates in an
    explicit dtype as they are: rotary ``inv_freq`` buffers stay float32 in a bfloat16 model, exactly as
    ``from_pretrained(dtype=...)`` makes them. Process-wide while the block runs.
    """
    if dtype is None:
        yield
        return
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def meta_tensors(model: nn.Module) -> list[str]:
    """Names of the parameters and buffers of ``model`` that are still on the meta device (have no data)."""
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return [name for name, t in named if t.is_meta]


def rebuild_base(spec: dict[str, Any], model: Any = None, on_meta: bool = False,
                 trust_code: bool = False) -> torch.nn.Module:
    """Build a fresh base model from ``spec``; ``model`` (an instance or a factory) overrides the recipe.

    ``on_meta`` builds a zoo or Hugging Face recipe with its parameters on the meta device (see
    :func:`meta_parameters`): a skeleton that costs no memory, for weights loaded with ``assign=True``. A model
    whose init fails on meta parameters is built in full instead. ``on_meta`` has no effect with ``model=``
    (the user's model is used as given). A factory-made base is rebuilt by calling the factory only when
    ``trust_code`` is True.
    """
    if model is not None:
        built = model if isinstance(model, torch.nn.Module) else model()
        if not isinstance(built, torch.nn.Module):
            raise SaveLoadError(f"model= must be an nn.Module or a callable returning one, got {type(built).__name__}.")
        return replay_layers(built, spec["packed"]) if spec.get("packed") else built
    kind = spec.get("kind")
    if kind == "factory":
        return rebuild_from_factory(str(spec.get("factory")), trust_code)
    built = None
    # a Hugging Face model is built in its dtype (as from_pretrained does), so buffers its code keeps in float32
    # (rotary inv_freq) stay float32; casting the built model would round them and change its outputs
    dtype = getattr(torch, spec["dtype"]) if spec.get("dtype") else None
    build_dtype = dtype if kind == "hf" and dtype is not None and dtype.is_floating_point else None
    if on_meta and kind in REBUILT_KINDS:
        try:
            with meta_parameters(), default_dtype(build_dtype):
                built = _build_recipe(spec, kind)
        except SaveLoadError:
            raise
        except Exception:  # init code that needs real weights: build in full (an assign-load still fits it)
            built = None
    if built is None:
        with default_dtype(build_dtype):
            built = _build_recipe(spec, kind)
    if dtype is not None and build_dtype is None:
        built = built.to(dtype)
    _restore_buffer_dtypes(built, spec.get("buffer_dtypes") or {})
    if spec.get("packed"):
        built = replay_layers(built, spec["packed"])
    return built.eval()


def _restore_buffer_dtypes(model: torch.nn.Module, dtypes: dict[str, str]) -> None:
    """Give the unsaved buffers the dtypes they had when the model was smashed (see :func:`describe_base`)."""
    for name, dtype in dtypes.items():
        owner, _, leaf = name.rpartition(".")
        try:
            module = model.get_submodule(owner) if owner else model
        except AttributeError:
            continue
        buffer = module._buffers.get(leaf)
        wanted = getattr(torch, dtype)
        if isinstance(buffer, torch.Tensor) and buffer.is_floating_point() and buffer.dtype != wanted:
            module._buffers[leaf] = buffer.to(wanted)


def _build_recipe(spec: dict[str, Any], kind: Any) -> torch.nn.Module:
    """The zoo or Hugging Face model ``spec`` describes (random init); SaveLoadError for user code."""
    if kind == "zoo":
        built = zoo.build(spec["name"], **spec.get("kwargs", {}))
    elif kind == "hf":
        import transformers

        cls = getattr(transformers, str(spec["hf_class"]), None)
        if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):  # never call anything else
            raise SaveLoadError(
                f"transformers has no model class {spec['hf_class']!r} (saved with another version?). "
                "Pass model=<an instance of the original architecture> to from_pretrained."
            )
        built = cls(cls.config_class.from_dict(spec["config"]))
    else:
        raise SaveLoadError(
            f"This model was built by your own code ({spec.get('class')}), so slimkit cannot rebuild it alone. "
            "Pass model=<a fresh instance> or model=<a function returning one> to from_pretrained."
        )
    return built
