"""Make a plain CNN a width-search supernet: one :class:`MutableChannels` per group of coupled channels.

One trace of the model (the pruning engine's :class:`~slimkit.engines.pruning.ChannelCoupling`) says which
output channels are tied (a residual add ties its inputs' channels) and who reads them. A group is searchable
when every layer that produces or reads its channels is a plain ``nn.Conv2d`` (``groups=1``, zero padding),
``nn.Linear`` (also after a channel-major ``Flatten``) or affine ``nn.BatchNorm2d``, and nothing pins it (the
model output, an op the speedup cannot shrink). Its channels are first sorted by importance (summed L1 norm of
the producing filters), so the first ``k`` channels that the dynamic layers keep are the strongest ones; the
reordered model computes exactly what the original did. Then those layers become ``Dynamic*`` layers sharing
the group's width. :func:`layer_shapes` / :func:`resize_layers` record and rebuild the shapes of an exported
subnet (the replay of a saved one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from slimkit.core.devices import accumulator_dtype
from slimkit.engines.nas.dynamic_ops import DynamicBatchNorm2d, DynamicConv2d, DynamicLinear
from slimkit.engines.nas.mutables import MutableChannels
from slimkit.engines.pruning.coupling import ChannelCoupling
from slimkit.errors import ConfigError, check_int

#: what :func:`make_searchable` can search, for error messages
SUPPORTED_SHAPES = ("CNNs whose channels flow through plain nn.Conv2d (groups=1, zero padding), affine "
                    "nn.BatchNorm2d and nn.Linear layers joined by parameter-free ops (ReLU, pooling, Flatten, "
                    "residual additions), e.g. slimkit's zoo model digits_cnn; depthwise or grouped convs, other "
                    "norms, attention and channels that reach the model output keep their width")


@dataclass
class WidthGroup:
    """Channels that move together: their producers, the norms and the readers (name -> inputs per channel)."""

    name: str
    channels: int
    producers: list[str]
    norms: list[str] = field(default_factory=list)
    readers: dict[str, int] = field(default_factory=dict)


class ChannelSupernet(nn.Module):
    """``model`` with dynamic layers plus ``widths``, one :class:`MutableChannels` per searchable group.

    Its mutables are named ``widths.<group>`` (the group's first producer, dots as underscores); the forward is
    the model's. ``export_subnet(supernet).model`` is the plain narrowed model.
    """

    def __init__(self, model: nn.Module, widths: Mapping[str, MutableChannels]) -> None:
        super().__init__()
        self.widths = nn.ModuleDict(dict(widths))  # registered first: the mutables are named here
        self.model = model

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The model's forward on the active widths."""
        return self.model(*args, **kwargs)


def _plain(module: nn.Module, role: str) -> str:
    """Why ``module`` cannot take part in a width search as ``role`` ('' when it can)."""
    kind = type(module)
    if kind is nn.Conv2d:
        if module.groups != 1:
            return f"a grouped/depthwise Conv2d (groups={module.groups})"
        return "" if module.padding_mode == "zeros" else f"a Conv2d with padding_mode={module.padding_mode!r}"
    if kind is nn.Linear:
        return ""
    if kind is nn.BatchNorm2d and role == "norm":
        ok = module.affine and module.track_running_stats
        return "" if ok else "a BatchNorm2d without affine weights or running statistics"
    return f"a {kind.__name__}"


def find_width_groups(model: nn.Module, example_inputs: Any) -> tuple[list[WidthGroup], dict[str, str]]:
    """The searchable channel groups of ``model`` on ``example_inputs``, and why each other producer is not."""
    coupling = ChannelCoupling(model, example_inputs)
    graph = coupling.graph
    roots = graph.uf.roots()
    modules = dict(model.named_modules())
    candidates: dict[bytes, WidthGroup] = {}
    skipped: dict[str, str] = {}
    for space in graph.spaces.values():
        if space.kind != "out" or space.owner not in modules:
            continue
        classes = roots[space.ids]
        problem = _plain(modules[space.owner], "producer")
        if problem:
            skipped[space.owner] = f"it is {problem}"
            continue
        key = classes.tobytes()
        if key not in candidates:
            candidates[key] = WidthGroup(space.owner.replace(".", "_"), len(classes), [])
        candidates[key].producers.append(space.owner)
    bad: dict[bytes, str] = {}
    followed = {int(r): p.name for p in graph.params.values() for r in roots[p.ids].tolist()}
    owners: dict[int, set[bytes]] = {}
    for k in candidates:
        for r in np.frombuffer(k, dtype=roots.dtype).tolist():
            owners.setdefault(r, set()).add(k)
    for key, group in candidates.items():
        classes = np.frombuffer(key, dtype=roots.dtype)
        if len(np.unique(classes)) != len(classes):
            bad[key] = "its output channels are tied to each other"
        elif coupling.pinned_classes.intersection(classes.tolist()):
            bad[key] = "its channels reach the model output or an op the speedup cannot shrink"
        elif followed.keys() & set(classes.tolist()):
            bad[key] = f"parameter {followed[next(iter(followed.keys() & set(classes.tolist())))]} follows its channels"
        elif any(len(owners[r]) > 1 for r in classes.tolist()) or any(
                p not in group.producers for p in graph.owners_of(classes, roots)):
            bad[key] = "its channels are tied to other layers' channels in another order"
    for name, rec in graph.leaves.items():
        if rec.in_ids is None:
            continue
        ids = np.where(rec.in_ids >= 0, roots[np.maximum(rec.in_ids, 0)], -1)
        for key, group in candidates.items():
            classes = np.frombuffer(key, dtype=roots.dtype)
            if key in bad or not np.isin(ids, classes).any():
                continue
            factor = len(ids) // len(classes)
            problem = _plain(rec.module, rec.kind) if rec.kind in ("conv", "linear", "norm") else f"a {rec.kind} op"
            if not problem and (factor * len(classes) != len(ids) or not np.array_equal(ids, np.repeat(classes, factor))
                                or (rec.kind == "norm" and factor != 1)):
                problem = "a layer reading them mixed with other channels or reordered"
            if problem:
                bad[key] = f"{name} reads them and is {problem}"
            elif rec.kind == "norm":
                group.norms.append(name)
            else:
                group.readers[name] = factor
    groups = []
    for key, group in candidates.items():
        if key in bad:
            skipped.update({p: bad[key] for p in group.producers})
        else:
            groups.append(group)
    return groups, skipped


def _permute(model: nn.Module, group: WidthGroup, order: torch.Tensor) -> None:
    """Reorder ``group``'s channels by ``order`` in its producers, norms and readers (same function)."""
    with torch.no_grad():
        for name in group.producers:
            layer = model.get_submodule(name)
            layer.weight.copy_(layer.weight[order])
            if layer.bias is not None:
                layer.bias.copy_(layer.bias[order])
        for name in group.norms:
            norm = model.get_submodule(name)
            for attr in ("weight", "bias", "running_mean", "running_var"):
                getattr(norm, attr).copy_(getattr(norm, attr)[order])
        for name, factor in group.readers.items():
            w = model.get_submodule(name).weight
            blocks = w.view(w.shape[0], group.channels, factor, *w.shape[2:]) if factor > 1 else w
            blocks.copy_(blocks[:, order].clone())


def _importance(model: nn.Module, group: WidthGroup) -> torch.Tensor:
    """Per channel: the sum over the group's producers of its filter's L1 norm over their mean (on their device)."""
    device = model.get_submodule(group.producers[0]).weight.device
    dtype = accumulator_dtype(device)
    total = torch.zeros(group.channels, dtype=dtype, device=device)
    for name in group.producers:
        w = model.get_submodule(name).weight.detach().to(dtype)
        norms = w.reshape(w.shape[0], -1).abs().sum(1)
        total += norms / norms.mean().clamp_min(1e-12)
    return total


def width_choices(channels: int, ratios: Sequence[float], divisor: int = 1) -> list[int]:
    """Channel counts for ``ratios`` of ``channels`` (at least 1 each; the full width is always one).

    ``divisor``: each count is rounded to a multiple of it (at least ``divisor``, at most ``channels``).
    """
    if not ratios or any(isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r <= 1 for r in ratios):
        raise ConfigError(f"Width ratios must be numbers in (0, 1], got {list(ratios)!r}; e.g. [0.25, 0.5, 0.75, 1].")
    check_int("divisor", divisor)
    counts = {min(channels, max(divisor, round(float(r) * channels / divisor) * divisor)) for r in ratios}
    return sorted(counts | {channels})


def _dynamic(module: nn.Module, width_in: Any, width_out: Any, factor: int) -> nn.Module:
    if isinstance(module, nn.Conv2d):
        new = DynamicConv2d(width_in, width_out, module.kernel_size, module.stride, module.padding, module.dilation,
                            module.bias is not None)
    else:
        new = DynamicLinear(width_in, width_out, module.bias is not None, in_factor=factor)
    with torch.no_grad():
        new.weight.copy_(module.weight)
        if module.bias is not None:
            new.bias.copy_(module.bias)
    return new.to(module.weight.device, module.weight.dtype).train(module.training)


def _norm(module: nn.BatchNorm2d, width: MutableChannels) -> DynamicBatchNorm2d:
    new = DynamicBatchNorm2d(width, module.eps, module.momentum).to(module.weight.device, module.weight.dtype)
    new.load_state_dict(module.state_dict())
    return new.train(module.training)


def make_searchable(model: nn.Module, example_inputs: Any, ratios: Sequence[float] = (0.25, 0.5, 0.75, 1.0),
                    sort_channels: bool = True, divisor: int = 1) -> ChannelSupernet:
    """A :class:`ChannelSupernet` over ``model`` (changed in place; deep-copy it first to keep the original).

    Every searchable group (see the module doc) gets a width choice among ``ratios`` of its channels (rounded to
    multiples of ``divisor``). With all widths at their maximum the supernet computes what ``model`` did.
    Raises ConfigError naming the supported model shapes and why each layer was left out when no group is
    searchable.
    """
    groups, skipped = find_width_groups(model, example_inputs)
    groups = [g for g in groups if len(width_choices(g.channels, ratios, divisor)) > 1]
    if not groups:
        why = "; ".join(f"{n}: {r}" for n, r in sorted(skipped.items())) or "it has no Conv2d or Linear layer"
        raise ConfigError(f"{type(model).__name__} has no channel group whose width can be searched ({why}). "
                          f"Supported: {SUPPORTED_SHAPES}.")
    widths: dict[str, MutableChannels] = {}
    ins: dict[str, tuple[MutableChannels, int]] = {}
    outs: dict[str, MutableChannels] = {}
    norms: dict[str, MutableChannels] = {}
    for group in groups:
        if sort_channels:
            _permute(model, group, torch.argsort(_importance(model, group), descending=True, stable=True))
        name = group.name if group.name not in widths else f"{group.name}_{len(widths)}"
        width = widths[name] = MutableChannels(width_choices(group.channels, ratios, divisor))
        outs.update(dict.fromkeys(group.producers, width))
        norms.update(dict.fromkeys(group.norms, width))
        ins.update({reader: (width, factor) for reader, factor in group.readers.items()})
    for name in [*outs, *ins, *norms]:
        module = model.get_submodule(name)
        if isinstance(module, (DynamicConv2d, DynamicLinear, DynamicBatchNorm2d)):
            continue  # a layer both producing and reading searched channels is converted once
        if name in norms:
            new = _norm(module, norms[name])
        else:
            width_in, factor = ins.get(name, (module.weight.shape[1], 1))
            width_out = outs.get(name, module.weight.shape[0])
            new = _dynamic(module, width_in, width_out, factor)
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, new)
    return ChannelSupernet(model, widths)


def layer_shapes(model: nn.Module) -> dict[str, list[int]]:
    """``{name: [in, out]}`` of every Conv2d / Linear and ``{name: [features]}`` of every BatchNorm2d."""
    shapes: dict[str, list[int]] = {}
    for name, module in model.named_modules():
        if type(module) in (nn.Conv2d, nn.Linear):
            shapes[name] = [int(module.weight.shape[1] * (module.groups if isinstance(module, nn.Conv2d) else 1)),
                            int(module.weight.shape[0])]
        elif type(module) is nn.BatchNorm2d:
            shapes[name] = [module.num_features]
    return shapes


def resize_layers(model: nn.Module, shapes: Mapping[str, Sequence[int]]) -> nn.Module:
    """Give the layers named in ``shapes`` (from :func:`layer_shapes`) those shapes, in place (fresh weights)."""
    modules = dict(model.named_modules())
    for name, shape in shapes.items():
        old = modules.get(name)
        if old is None or type(old) not in (nn.Conv2d, nn.Linear, nn.BatchNorm2d):
            raise ConfigError(f"Cannot resize {name!r}: the model has no Conv2d / Linear / BatchNorm2d by that name.")
        if layer_shapes(old).get("") == list(shape):
            continue
        kw = {"device": old.weight.device, "dtype": old.weight.dtype}
        if isinstance(old, nn.Conv2d):
            new = nn.Conv2d(shape[0], shape[1], old.kernel_size, old.stride, old.padding, old.dilation, 1,
                            old.bias is not None, **kw)
        elif isinstance(old, nn.Linear):
            new = nn.Linear(shape[0], shape[1], old.bias is not None, **kw)
        else:
            new = nn.BatchNorm2d(shape[0], old.eps, old.momentum, **kw)
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, new.train(old.training))
    return model
