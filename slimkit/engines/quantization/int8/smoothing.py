"""SmoothQuant-style activation smoothing, folded into the op that produces a Linear's input.

For ``y = x W^T`` and per-input-channel scales ``s``, ``y = (x / s) (W diag(s))^T``: dividing the activation
by ``s`` shrinks its outlier channels (which ruin per-tensor int8 activations) and moves them into the weight
(which per-channel int8 handles well). The division is free only when it can be folded into the op that
produced ``x``: a LayerNorm/RMSNorm's affine weight (and bias), or the rows of a Linear whose output reaches
the consumer through ops that commute with per-channel scaling (attention's ``softmax(QK^T) V`` for the value
projection, ``act(gate) * up`` for a gated MLP's up projection).

Producers are found, never assumed from layer names: a forward pass records which Linear layers read the very
same tensor (Q/K/V share one input) and the nearest earlier Linear or norm of matching width is proposed; the
fold is then *verified*: random scales are folded in and the fp32 output must not change. That rejects e.g.
BERT's post-LN LayerNorms, whose outputs also feed a residual branch (folding there would change the model).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from slimkit.core.weights import DENSE, target_kind, weight_of
from slimkit.engines.quantization.int8.calibration import accepts_kwarg
from slimkit.engines.quantization.int8.linear import Int8Linear
from slimkit.utils import Inputs, run_model


@dataclass
class FoldGroup:
    """Linear layers that read one tensor (``consumers``), and the module that produced it (``producer``)."""

    consumers: list[str]
    producer: str | None = None
    amax: torch.Tensor | None = None  # per-channel max |x| over the calibration data
    sample: torch.Tensor | None = None  # a row subset of the calibration inputs, for choosing alpha
    alpha: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def _is_norm(module: torch.nn.Module) -> bool:
    name = type(module).__name__
    weight = getattr(module, "weight", None)
    return ("LayerNorm" in name or "RMSNorm" in name) and isinstance(weight, torch.Tensor) and weight.dim() == 1


def _out_width(module: torch.nn.Module) -> int | None:
    if target_kind(module) in DENSE:  # Linear (and subclasses), Conv1D: weight_of gives [out, in]
        return int(weight_of(module).shape[0])
    if _is_norm(module):
        return int(module.weight.shape[0])
    return None


def discover_groups(model: torch.nn.Module, linear_names: list[str], batch: Inputs) -> list[FoldGroup]:
    """Group ``linear_names`` by shared input tensor and propose each group's nearest producer (one forward)."""
    modules = dict(model.named_modules())
    wanted = set(linear_names)
    order: list[str] = []
    groups: list[tuple[torch.Tensor, FoldGroup]] = []
    handles = []

    def pre_hook(name: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: tuple) -> None:
            if name in wanted and args and isinstance(args[0], torch.Tensor):
                for tensor, group in groups:
                    if tensor is args[0]:
                        group.consumers.append(name)
                        break
                else:
                    width = weight_of(modules[name]).shape[1]
                    producer = next((p for p in reversed(order) if _out_width(modules[p]) == width), None)
                    groups.append((args[0], FoldGroup([name], producer)))
            order.append(name)

        return hook

    for name, module in modules.items():
        if name and (name in wanted or _out_width(module) is not None):
            handles.append(module.register_forward_pre_hook(pre_hook(name)))
    try:
        with torch.no_grad():
            run_model(model, batch)
    finally:
        for h in handles:
            h.remove()
    return [g for _, g in groups if g.producer is not None and g.producer not in g.consumers]


def fold(model: torch.nn.Module, group: FoldGroup, scales: torch.Tensor) -> None:
    """Divide the producer's output channels by ``scales`` and multiply the consumers' input columns by them."""
    producer = model.get_submodule(group.producer)
    with torch.no_grad():
        if target_kind(producer) in DENSE:
            rows = weight_of(producer)  # a view: dividing it divides the stored weight (transposed for Conv1D)
            rows.div_(scales.to(rows)[:, None])
        else:
            producer.weight.div_(scales.to(producer.weight))
        bias = getattr(producer, "bias", None)
        if isinstance(bias, torch.Tensor):
            bias.div_(scales.to(bias))
        for name in group.consumers:
            weight = weight_of(model.get_submodule(name))
            weight.mul_(scales.to(weight)[None, :])


def _float_tensors(output: Any) -> list[torch.Tensor]:
    """Every floating tensor in a model output (tensors, tuples, lists, dicts, Hugging Face ModelOutputs)."""
    if isinstance(output, torch.Tensor):
        return [output.float()] if output.is_floating_point() else []
    if isinstance(output, Mapping):
        return [t for v in output.values() for t in _float_tensors(v)]
    if isinstance(output, (tuple, list)):
        return [t for v in output for t in _float_tensors(v)]
    return []


def _max_rel_change(reference: list[torch.Tensor], outputs: list[torch.Tensor]) -> float:
    if len(reference) != len(outputs) or any(a.shape != b.shape for a, b in zip(reference, outputs, strict=True)):
        return float("inf")
    return max((float((a - b).abs().max() / a.abs().max().clamp_min(1e-12)) for a, b in
                zip(reference, outputs, strict=True)), default=0.0)


def _fold_changes_output(model: torch.nn.Module, groups: list[FoldGroup], batch: Inputs,
                         reference: list[torch.Tensor], gen: torch.Generator, tol: float) -> bool:
    """Fold random scales into all ``groups`` at once, run ``batch``, undo; whether any output moved."""
    scales = [torch.empty(weight_of(model.get_submodule(g.consumers[0])).shape[1]).uniform_(0.5, 2.0, generator=gen)
              for g in groups]
    for group, s in zip(groups, scales, strict=True):
        fold(model, group, s)
    try:
        outputs = _float_tensors(run_model(model, batch))
    finally:
        for group, s in zip(reversed(groups), reversed(scales), strict=True):
            fold(model, group, 1.0 / s)
    return _max_rel_change(reference, outputs) >= tol


def _pattern(group: FoldGroup) -> str:
    """The group's names with layer indices blanked: repeated blocks share one pattern."""
    return re.sub(r"\.\d+\.", ".#.", " ".join([group.producer or "", *group.consumers]))


def verify_groups(model: torch.nn.Module, groups: list[FoldGroup], batch: Inputs, tol: float = 1e-3) -> list[FoldGroup]:
    """Keep the groups whose fold leaves every fp32 output unchanged under random scales (rel. error < ``tol``).

    Each forward streams the whole model, so the check is shared: one representative per repeated block
    pattern is tried alone, then every accepted group is folded at once and must leave the outputs unchanged
    (else each is checked alone). A pattern whose representative fails is dropped: that loses smoothing
    opportunities, never exactness.
    """
    gen = torch.Generator().manual_seed(0)
    if isinstance(batch, Mapping) and accepts_kwarg(model, "output_hidden_states"):
        batch = {**batch, "output_hidden_states": True}  # hidden states are outputs too: keep them exact
    with torch.no_grad():
        reference = _float_tensors(run_model(model, batch))
        by_pattern: dict[str, list[FoldGroup]] = {}
        for group in groups:
            by_pattern.setdefault(_pattern(group), []).append(group)
        kept = [g for members in by_pattern.values()
                if not _fold_changes_output(model, members[:1], batch, reference, gen, tol) for g in members]
        if kept and _fold_changes_output(model, kept, batch, reference, gen, tol):
            kept = [g for g in kept if not _fold_changes_output(model, [g], batch, reference, gen, tol)]
    return kept


def collect_statistics(
    model: torch.nn.Module, groups: list[FoldGroup], batches: list[Inputs], sample_rows: int = 256,
    on_output: Callable[[Any], None] | None = None,
) -> None:
    """Fill each group's per-channel input max |x| and a seeded sample of input rows (one pass over ``batches``).

    ``on_output`` receives each batch's model output, so the same pass can also serve as the fp32 reference.
    """
    by_name = {g.consumers[0]: g for g in groups}
    rows: dict[str, list[torch.Tensor]] = {n: [] for n in by_name}
    gen = torch.Generator().manual_seed(0)

    def hook(name: str) -> Callable[..., None]:
        def record(module: torch.nn.Module, args: tuple) -> None:
            x = args[0].detach().reshape(-1, args[0].shape[-1]).float()
            group = by_name[name]
            amax = x.abs().amax(dim=0)
            group.amax = amax if group.amax is None else torch.maximum(group.amax, amax)
            pick = torch.randperm(x.shape[0], generator=gen)[:sample_rows]
            rows[name].append(x[pick.to(x.device)].cpu())

        return record

    handles = [model.get_submodule(n).register_forward_pre_hook(hook(n)) for n in by_name]
    try:
        with torch.no_grad():
            for batch in batches:
                output = run_model(model, batch)
                if on_output is not None:
                    on_output(output)
    finally:
        for h in handles:
            h.remove()
    for name, group in by_name.items():
        pool = torch.cat(rows[name])
        pick = torch.randperm(pool.shape[0], generator=gen)[:sample_rows]
        group.sample = pool[pick]


def smoothing_scales(model: torch.nn.Module, group: FoldGroup, alpha: float) -> torch.Tensor:
    """SmoothQuant scales ``s_j = max|x_j|^alpha / max|W_j|^(1-alpha)`` (weights: all consumers of the group)."""
    wmax = torch.stack([weight_of(model.get_submodule(n)).detach().abs().amax(dim=0).float().cpu()
                        for n in group.consumers]).amax(dim=0)
    amax = group.amax.float().cpu().clamp_min(1e-5)
    scales = amax.pow(alpha) / wmax.clamp_min(1e-5).pow(1.0 - alpha)
    return scales.clamp(min=1e-4, max=1e4)


def int8_error(model: torch.nn.Module, group: FoldGroup, scales: torch.Tensor | None, reduce_range: bool,
               saturation_safe: bool = False) -> float:
    """Relative squared error of the group's int8 outputs on its sampled inputs, with ``scales`` folded in.

    ``saturation_safe`` quantizes the weights with the pair-safe levels, so smoothing is chosen for the recipe
    that will run (smoothing flattens weight columns, which costs pair-safe weights levels).
    """
    x = group.sample
    total, norm = 0.0, 0.0
    with torch.no_grad():
        for name in group.consumers:
            weight = weight_of(model.get_submodule(name)).detach().float().cpu()
            reference = group.extras.get(name)
            if reference is None:
                reference = group.extras[name] = torch.nn.functional.linear(x, weight)
            if scales is not None:
                weight, x_in = weight * scales[None, :], x / scales[None, :]
            else:
                x_in = x
            out = Int8Linear.from_weight(weight, None, reduce_range, saturation_safe)(x_in)
            total += float((out - reference).pow(2).sum())
            norm += float(reference.pow(2).sum())
    return total / max(norm, 1e-30)


def choose_alpha(
    model: torch.nn.Module, group: FoldGroup, alphas: list[float], reduce_range: bool, margin: float = 0.9,
    saturation_safe: bool = False,
) -> tuple[float | None, torch.Tensor | None]:
    """The alpha (or ``None``: no smoothing) whose smoothing gives the lowest int8 error on the group's sample.

    Smoothing is kept only when it lowers the error below ``margin`` times the unsmoothed error, so noise in a
    small calibration set does not buy a change that helps nowhere else.
    """
    best_err = int8_error(model, group, None, reduce_range, saturation_safe) * margin
    best: tuple[float | None, torch.Tensor | None] = (None, None)
    for alpha in alphas:
        scales = smoothing_scales(model, group, alpha)
        err = int8_error(model, group, scales, reduce_range, saturation_safe)
        if err < best_err:
            best_err, best = err, (alpha, scales)
    return best
