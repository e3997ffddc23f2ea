"""Flatten a state dict into plain tensors that safetensors can store, and back — no pickle.

PyTorch state dicts may hold quantized tensors, tuples (packed params), dtypes, ``None`` and tensors that
share storage (tied weights). safetensors stores only plain named tensors, so each of those is encoded
in the key names:

- quantized tensor ``k``      -> ``k.__q__.int_repr``, ``k.__q__.scale``, ``k.__q__.zero_point``
                                 (+ ``k.__q__.axis`` for per-channel), dtype in ``k.__q__.dtype.<name>``
- tuple/list ``k``            -> ``k.__tuple__.<i>...`` recursively, plus ``k.__tuple__.len`` (its length)
- ``torch.dtype`` value ``k``  -> ``k.__dtype__.<name>`` (an empty tensor)
- ``None`` value ``k``         -> ``k.__none__`` (an empty tensor)
- tensor sharing storage with an earlier key ``a`` -> ``k.__alias__`` (the UTF-8 bytes of ``a``)
"""

from __future__ import annotations

from typing import Any

import torch

_EMPTY = torch.zeros(0, dtype=torch.uint8)
_QDTYPES = {"qint8": torch.qint8, "quint8": torch.quint8, "qint32": torch.qint32}
_SUFFIXES = (".__q__.", ".__tuple__.", ".__dtype__.", ".__none__", ".__alias__")


def _storage_key(t: torch.Tensor) -> tuple[int, int, tuple[int, ...], tuple[int, ...], torch.dtype] | None:
    if t.is_quantized or t.device.type == "meta" or t.numel() == 0:
        return None
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def _flatten_value(key: str, value: Any, out: dict[str, torch.Tensor], seen: dict) -> None:
    if isinstance(value, torch.Tensor) and value.is_quantized:
        value = value.detach().cpu()
        out[f"{key}.__q__.int_repr"] = value.int_repr().contiguous()
        out[f"{key}.__q__.dtype.{str(value.dtype).split('.')[-1]}"] = _EMPTY
        if value.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
            out[f"{key}.__q__.scale"] = value.q_per_channel_scales().contiguous()
            out[f"{key}.__q__.zero_point"] = value.q_per_channel_zero_points().contiguous()
            out[f"{key}.__q__.axis"] = torch.tensor([value.q_per_channel_axis()])
        else:
            out[f"{key}.__q__.scale"] = torch.tensor([value.q_scale()], dtype=torch.float64)
            out[f"{key}.__q__.zero_point"] = torch.tensor([value.q_zero_point()], dtype=torch.int64)
    elif isinstance(value, torch.Tensor):
        skey = _storage_key(value)
        if skey is not None and skey in seen:
            out.update(alias_entry(key, seen[skey]))
            return
        if skey is not None:
            seen[skey] = key
        out[key] = value.detach().cpu().contiguous()
    elif isinstance(value, (tuple, list)):
        out[f"{key}.__tuple__.len"] = torch.tensor([len(value)])
        for i, item in enumerate(value):
            _flatten_value(f"{key}.__tuple__.{i}", item, out, seen)
    elif isinstance(value, torch.dtype):
        out[f"{key}.__dtype__.{str(value).split('.')[-1]}"] = _EMPTY
    elif value is None:
        out[f"{key}.__none__"] = _EMPTY
    else:
        raise TypeError(
            f"State entry {key!r} holds a {type(value).__name__}, which cannot be stored without pickle. "
            "Give the module a tensor-only state_dict, or save with allow_pickle=True."
        )


def flatten_state_dict(model_or_state: torch.nn.Module | dict[str, Any]) -> dict[str, torch.Tensor]:
    """Return a dict of plain contiguous CPU tensors that ``safetensors`` can save, encoding non-tensor entries."""
    state = model_or_state.state_dict() if isinstance(model_or_state, torch.nn.Module) else model_or_state
    out: dict[str, torch.Tensor] = {}
    seen: dict = {}
    for key, value in state.items():
        _flatten_value(key, value, out, seen)
    return out


def _base_key(flat_key: str) -> str:
    return flat_key[:min((i for s in _SUFFIXES if (i := flat_key.find(s)) != -1), default=len(flat_key))]


def _rebuild(key: str, flat: dict[str, torch.Tensor], keys: list[str]) -> Any:
    if key in flat:
        return flat[key]
    if f"{key}.__none__" in flat:
        return None
    if f"{key}.__alias__" in flat:
        return _rebuild(bytes(flat[f"{key}.__alias__"].tolist()).decode(), flat, keys)
    dtype_keys = [k for k in keys if k.startswith(f"{key}.__dtype__.")]
    if dtype_keys:
        return getattr(torch, dtype_keys[0].rsplit(".", 1)[-1])
    if f"{key}.__tuple__.len" in flat:
        n = int(flat[f"{key}.__tuple__.len"].item())
        return tuple(_rebuild(f"{key}.__tuple__.{i}", flat, keys) for i in range(n))
    if f"{key}.__q__.int_repr" in flat:
        qdt = [k for k in keys if k.startswith(f"{key}.__q__.dtype.")][0].rsplit(".", 1)[-1]
        ints, scale, zp = (flat[f"{key}.__q__.{n}"] for n in ("int_repr", "scale", "zero_point"))
        if f"{key}.__q__.axis" in flat:
            axis = int(flat[f"{key}.__q__.axis"].item())
            q = torch._make_per_channel_quantized_tensor(ints, scale.double(), zp.long(), axis)
        else:
            q = torch._make_per_tensor_quantized_tensor(ints, float(scale.item()), int(zp.item()))
        if q.dtype != _QDTYPES[qdt]:
            raise ValueError(f"Stored quantized tensor {key!r} has dtype {q.dtype}, expected {qdt}.")
        return q
    raise KeyError(key)


def unflatten_state_dict(flat: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Invert :func:`flatten_state_dict`: rebuild quantized tensors, tuples, dtypes, ``None`` and aliases."""
    keys = list(flat)
    return {base: _rebuild(base, flat, keys) for base in dict.fromkeys(map(_base_key, keys))}


def _tied_parameters(model: torch.nn.Module) -> list[list[tuple[torch.nn.Module, str]]]:
    """Groups of (module, name) slots that hold one and the same Parameter object (tied weights)."""
    groups: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                groups.setdefault(id(param), []).append((module, name))
    return [slots for slots in groups.values() if len(slots) > 1]


def _retie(groups: list[list[tuple[torch.nn.Module, str]]]) -> None:
    """After an assign-load, make each tied group one Parameter again where the loaded tensors share their data.

    ``assign=True`` wraps each loaded tensor in its own Parameter, so ``lm_head.weight is embed.weight`` would
    no longer hold even though both came from the same saved tensor (an ``__alias__`` entry).
    """
    for (module0, name0), *others in groups:
        first = module0._parameters[name0]
        for module, name in others:
            param = module._parameters[name]
            same = (
                param is not None and first is not None and param.data_ptr() == first.data_ptr()
                and param.shape == first.shape and param.stride() == first.stride() and param.dtype == first.dtype
            )
            if same:
                module._parameters[name] = first


def _to_model_dtypes(state: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """Cast loaded tensors to the model's dtype per key, as a copying load would (aliases stay shared)."""
    cast: dict[int, torch.Tensor] = {}
    out = {}
    for key, value in state.items():
        target = current.get(key)
        if (
            isinstance(value, torch.Tensor) and isinstance(target, torch.Tensor) and value.dtype != target.dtype
            and not value.is_quantized and not target.is_quantized
        ):
            if id(value) not in cast:
                cast[id(value)] = value.to(target.dtype)
            value = cast[id(value)]
        out[key] = value
    return out


def load_flat_state_dict(
    model: torch.nn.Module, flat: dict[str, torch.Tensor], strict: bool = True, assign: bool = False
) -> None:
    """Load a flattened state dict into ``model`` (strict by default), keeping the model's version metadata.

    Quantized modules read the state-dict version from ``_metadata``; it comes from the freshly rebuilt model.
    ``assign=True`` puts the loaded tensors into the model instead of copying them into its own (which may
    be on the meta device: a skeleton that never held weights). Tensors are cast to the model's dtype per key
    as a copying load does, and parameters tied in ``model`` (one Parameter in several places) are tied again.
    """
    from collections import OrderedDict

    current = model.state_dict()
    loaded = unflatten_state_dict(flat)
    state = OrderedDict(_to_model_dtypes(loaded, current) if assign else loaded)
    state._metadata = getattr(current, "_metadata", None)  # type: ignore[attr-defined]
    if not assign:
        model.load_state_dict(state, strict=strict)
        return
    tied = _tied_parameters(model)
    model.load_state_dict(state, strict=strict, assign=True)
    _retie(tied)


def alias_entry(key: str, target: str) -> dict[str, torch.Tensor]:
    """The flattened entry saying that ``key`` is the same tensor as ``target`` (a tied weight stored once)."""
    return {f"{key}.__alias__": torch.tensor(list(target.encode()), dtype=torch.uint8)}
