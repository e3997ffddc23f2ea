"""``count_flops_params``: NNI's per-layer FLOPs / parameter table, computed by slimkit.

``flops, params, results = count_flops_params(model, (1, 1, 28, 28))`` runs one forward (on zeros of that
shape, or on the tensor(s) given), prints a table with one row per counted layer (index, name, type, weight
shape, input and output size, FLOPs, parameters) and returns the totals and the rows. As in NNI, a "FLOP" of
a Conv or Linear layer is one multiply-accumulate, counted per sample (the batch size does not change it),
and a pruner's masks are respected: a layer still wrapped by a pruner counts only its kept output channels.
``mode="full"`` also counts BatchNorm, activations, pooling and upsampling (and the biases).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError
from slimkit.evaluation.runtime import eval_mode
from slimkit.utils import model_device, run_model

__all__ = ["count_flops_params", "format_flops_table"]

CustomOp = Callable[[nn.Module, tuple, Any], Mapping[str, Any]]
_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
_RNN_GATES = {nn.RNN: 1, nn.GRU: 3, nn.LSTM: 4, nn.RNNCell: 1, nn.GRUCell: 3, nn.LSTMCell: 4}
_FULL = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.ReLU, nn.ReLU6, nn.LeakyReLU,
         nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d, nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d,
         nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.Upsample)
_UPSAMPLE_OPS = {"nearest": 0, "linear": 5, "bilinear": 11, "bicubic": 259, "trilinear": 31}


def _first(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and value:
        return _first(value[0])
    return None


def _per_sample(tensor: torch.Tensor) -> int:
    return tensor[0].numel() if tensor.dim() > 0 and tensor.shape[0] > 0 else tensor.numel()


def _kept_rows(module: nn.Module, mask: torch.Tensor | None) -> float:
    """The fraction of output channels a pruning mask keeps (1 without a mask)."""
    if mask is None or mask.dim() == 0:
        return 1.0
    rows = mask.reshape(mask.shape[0], -1).ne(0).any(dim=1)
    return float(rows.float().mean())


def _layer_flops(module: nn.Module, inputs: tuple, output: Any, mask: torch.Tensor | None, full: bool) -> float:
    out, inp = _first(output), _first(inputs)
    if out is None:
        return 0.0
    bias = 1 if full and getattr(module, "bias", None) is not None else 0
    if isinstance(module, _CONV):
        weight = module.weight
        per_out = weight[0].numel() if not isinstance(module, (nn.ConvTranspose1d, nn.ConvTranspose2d,
                                                                nn.ConvTranspose3d)) else \
            weight.shape[0] * math.prod(weight.shape[2:]) // module.groups
        return _per_sample(out) * _kept_rows(module, mask) * (per_out + bias)
    if isinstance(module, nn.Linear):
        return _per_sample(out) * _kept_rows(module, mask) * (module.in_features + bias)
    for kind, gates in _RNN_GATES.items():
        if isinstance(module, kind):
            hidden, size = module.hidden_size, module.input_size
            layers = getattr(module, "num_layers", 1)
            directions = 2 if getattr(module, "bidirectional", False) else 1
            steps = 1 if isinstance(module, (nn.RNNCell, nn.GRUCell, nn.LSTMCell)) or inp is None else (
                inp.shape[0 if not getattr(module, "batch_first", False) else 1] if inp.dim() == 3 else inp.shape[0])
            cell = gates * hidden * (size + hidden + 1)
            deeper = gates * hidden * (hidden * directions + hidden + 1)
            return float(steps * directions * (cell + (layers - 1) * deeper))
    if full and inp is not None:
        if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm)):
            return 2.0 * _per_sample(inp)
        if isinstance(module, nn.Upsample):
            return float(_per_sample(out) * _UPSAMPLE_OPS.get(module.mode, 0))
        if isinstance(module, (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d)):
            window = max(1, _per_sample(inp) // max(1, _per_sample(out)))
            return float(_per_sample(out) * (window + 1))
        if isinstance(module, _FULL):
            return float(_per_sample(out) if "Pool" in type(module).__name__ else _per_sample(inp))
    return 0.0


def _inputs(model: nn.Module, x: Any) -> Any:
    device = model_device(model)
    if isinstance(x, (tuple, list)) and x and all(isinstance(d, int) and not isinstance(d, bool) for d in x):
        return torch.zeros(tuple(x), device=device)
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, Mapping):
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in x.items()}
    if isinstance(x, (tuple, list)) and x and all(isinstance(t, torch.Tensor) for t in x):
        return tuple(t.to(device) for t in x)
    raise ConfigError(f"count_flops_params needs the input shape as a tuple of ints, e.g. (1, 3, 224, 224), a "
                      f"tensor, a tuple of tensors or a dict of keyword tensors; got {x!r:.80}.")


def _masks_of(model: nn.Module) -> dict[int, torch.Tensor]:
    """``id(inner layer) -> weight_mask`` for every layer wrapped by a pruner."""
    return {id(m.module): m._buffers["weight_mask"] for m in model.modules()
            if isinstance(getattr(m, "module", None), nn.Module)
            and isinstance(m._buffers.get("weight_mask"), torch.Tensor)}


def count_flops_params(model: nn.Module, x: Any, custom_ops: Mapping[type, CustomOp] | None = None,
                       verbose: bool = True, mode: str = "default") -> tuple[int, int, list[dict[str, Any]]]:
    """Count per-sample FLOPs (multiply-accumulates) and parameters of ``model`` layer by layer, NNI-style.

    ``x`` is an input shape (a tuple of ints: zeros of that shape are fed), a tensor, a tuple of tensors or a
    dict of keyword tensors. ``custom_ops`` maps a module class to ``fn(module, inputs, output)`` returning
    ``{"flops": ..., "params": ..., "weight_shape": ...}`` (overriding the built-in count). ``mode="full"``
    also counts BatchNorm/LayerNorm, activations, pooling, upsampling and biases. With ``verbose`` the table
    and the totals are printed. Returns ``(total_flops, total_params, rows)``; each row has ``name``,
    ``module_type``, ``weight_shape``, ``input_size``, ``output_size``, ``flops`` and ``params``. Layers still
    wrapped by a pruner count their kept output channels only; shared layers are counted once per call.
    """
    if not isinstance(model, nn.Module):
        raise ConfigError(f"count_flops_params needs a torch.nn.Module, got {type(model).__name__}.")
    if mode not in ("default", "full"):
        raise ConfigError(f"count_flops_params mode must be 'default' or 'full', got {mode!r}.")
    custom = dict(custom_ops or {})
    counted = (*_CONV, nn.Linear, *_RNN_GATES, *(_FULL if mode == "full" else ()), *custom)
    masks = _masks_of(model)
    rows: list[dict[str, Any]] = []

    def hook(name: str, layer: nn.Module) -> Callable[[nn.Module, tuple, Any], None]:
        def record(_: nn.Module, inputs: tuple, output: Any) -> None:
            inp, out = _first(inputs), _first(output)
            weight = getattr(layer, "weight", None)
            row = {"name": name, "module_type": type(layer).__name__,
                   "weight_shape": tuple(weight.shape) if isinstance(weight, torch.Tensor) else 0,
                   "input_size": tuple(inp.shape) if inp is not None else (),
                   "output_size": tuple(out.shape) if out is not None else (),
                   "params": sum(p.numel() for p in layer.parameters())}
            op = next((fn for cls, fn in custom.items() if isinstance(layer, cls)), None)
            if op is not None:
                row.update(op(layer, inputs, output))
            else:
                row["flops"] = _layer_flops(layer, inputs, output, masks.get(id(layer)), mode == "full")
            row["flops"] = int(round(float(row.get("flops", 0))))
            rows.append(row)
        return record

    # a layer wrapped by a pruner or quantizer is counted at its wrapper (which may not call it as a module)
    wrappers = {id(m.module): m for m in model.modules() if isinstance(getattr(m, "module", None), counted)
                and not isinstance(m, counted)}
    handles = []
    for name, module in model.named_modules():
        if id(module) in wrappers:
            continue
        inner = getattr(module, "module", None) if any(module is w for w in wrappers.values()) else module
        if isinstance(inner, counted):
            handles.append(module.register_forward_hook(hook(name or type(inner).__name__, inner)))
    try:
        with eval_mode(model), torch.no_grad():
            run_model(model, _inputs(model, x))
    finally:
        for handle in handles:
            handle.remove()
    flops = sum(r["flops"] for r in rows)
    params = sum({r["name"]: r["params"] for r in rows}.values())
    if verbose:
        print(format_flops_table(rows))
        print(f"FLOPs total: {flops}")
        print(f"#Params total: {params}")
    return flops, params, rows


def _grid(headers: Sequence[str], table: list[list[str]], left: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in table)) if table else len(h) for i, h in enumerate(headers)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def fmt(cells: Sequence[str]) -> str:
        return "|" + "|".join(f" {c:<{w}} " if i in left else f" {c:^{w}} "
                              for i, (c, w) in enumerate(zip(cells, widths, strict=True))) + "|"

    return "\n".join([line, fmt(headers), line, *(fmt(r) for r in table), line])


def format_flops_table(rows: list[dict[str, Any]]) -> str:
    """The printed table of :func:`count_flops_params` (a ``#Call`` column appears when a layer runs twice)."""
    calls = Counter(r["name"] for r in rows)
    repeated = any(n > 1 for n in calls.values())
    headers = ["Index", "Name", "Type", "Weight Shape", "Input Size", "Output Size", "FLOPs", "#Params"]
    headers += ["#Call"] if repeated else []
    seen: Counter[str] = Counter()
    table = []
    for i, r in enumerate(rows):
        seen[r["name"]] += 1
        cells = [str(i), r["name"], r["module_type"], str(r["weight_shape"]), str(r["input_size"]),
                 str(r["output_size"]), str(r["flops"]), str(r["params"])]
        table.append(cells + ([str(seen[r["name"]])] if repeated else []))
    return _grid(headers, table, left={1})
