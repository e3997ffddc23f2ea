"""Folding the constants that removed channels carry into the layers that read them.

A pruned filter has zero weights, but its channel is not zero downstream when a bias or a trained BatchNorm
follows it: the masked model feeds the constant ``beta - mean * gamma / sqrt(var + eps)`` (through ReLU,
pooling, flatten...) into the next layer, while the shrunk model drops the channel. So before shrinking,
the masked model runs on ``dummy_input`` (and on a noisy copy of its float tensors) with a hook on every
Conv (groups=1) / Linear layer that loses input channels. A removed input channel that is the same for every
input (data-free) has its contribution folded into the layer:

* Linear: ``W[:, c] * v`` for every folded feature (it must be the same at every leading position) — exact.
* Conv, channel constant over positions: ``v * W[:, c].sum(kernel)`` — exact wherever the kernel window lies
  inside the input, so everywhere without zero padding (``padding=0``, 1x1 kernels, or a ``reflect`` /
  ``replicate`` / ``circular`` ``padding_mode``). With zero padding the border outputs of the masked model
  saw 0 instead of ``v`` for the taps on the padding: there the fold is an approximation (``Fold.exact`` is
  False), still far closer than dropping the channel.
* Conv, data-free but uneven channel (e.g. after a zero-padded depthwise conv): the mean over positions of
  its contribution at ``dummy_input``'s size (the least-squares bias) — approximate.
* Transposed conv (groups=1): a stride spreads even a constant map unevenly over the output, so always the mean
  of its contribution over positions — approximate (exact only where that contribution is flat).

The contribution goes into the layer's bias; a layer without bias whose output feeds only a BatchNorm
shifts that norm's ``running_mean`` instead (exact in eval mode, and in training mode the batch mean absorbs
the shift anyway); otherwise a bias is added (recorded as ``"add_bias": True`` in the layer's
``kept_channels`` entry so a replay rebuilds it). Channels that depend on the data are dropped as before
(``Fold.unfolded`` counts them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.overrides import TorchFunctionMode

from slimkit.evaluation.runtime import eval_mode
from slimkit.utils import run_model

from .graph import tensors_in
from .layers import CONV_TYPES, DECONV_TYPES, out_dim, out_major
from .tracer import _as_tree, _primary_input

_RTOL = 1e-5
_CONVS = (*CONV_TYPES, *DECONV_TYPES)


@dataclass
class Fold:
    """What ``layer`` gets for its removed input channels.

    ``channels`` data-free channels (the same for every input) were folded into ``target`` (``"bias"``, ``"new
    bias"`` or the name of the norm after it) as ``delta`` per output channel; ``exact`` says whether that
    reproduces their contribution at every output position. ``unfolded`` non-zero channels depend on the data
    and were dropped as they are.
    """

    layer: str
    channels: int
    target: str
    exact: bool
    delta: torch.Tensor
    unfolded: int = 0


class _Capture(TorchFunctionMode):
    """One forward pass: removed input channels of the consumers, and which consumer feeds only a BatchNorm."""

    def __init__(self, model: nn.Module, removed: Mapping[str, tuple[torch.Tensor, int]]) -> None:
        super().__init__()
        self.removed = removed
        self.values: dict[str, list[torch.Tensor]] = {name: [] for name in removed}
        self.outputs: dict[int, tuple[str, torch.Tensor]] = {}  # id -> (consumer, its output), kept alive
        self.escaped: set[str] = set()  # consumers whose output is used outside one BatchNorm
        self.feeds: dict[str, str] = {}  # consumer -> the BatchNorm its output goes into
        self._inside: list[str] = []
        self._off = False
        modules = dict(model.named_modules())
        self.handles = [modules[n].register_forward_pre_hook(self._pre(n)) for n in removed]
        self.handles += [modules[n].register_forward_hook(self._post(n)) for n in removed]
        for name, module in modules.items():
            if isinstance(module, _BatchNorm):
                self.handles.append(module.register_forward_pre_hook(self._enter(name)))
                self.handles.append(module.register_forward_hook(self._leave))

    def _pre(self, name: str) -> Any:
        def hook(module: nn.Module, args: tuple) -> None:
            self._off = True
            x = _primary_input(args, {})
            idx, dim = self.removed[name]
            if x is not None:
                self.values[name].append(x.detach().index_select(dim, idx.to(x.device)).double().cpu())
            self._off = False
        return hook

    def _post(self, name: str) -> Any:
        def hook(module: nn.Module, args: tuple, out: Any) -> None:
            if isinstance(out, torch.Tensor):
                self._off = True
                if out.dim() != 2 and not isinstance(module, _CONVS):  # BatchNorm1d reads dim 1, Linear the last
                    self.escaped.add(name)
                self._off = False
                self.outputs[id(out)] = (name, out)
        return hook

    def _enter(self, bn_name: str) -> Any:
        def hook(module: nn.Module, args: tuple) -> None:
            self._inside.append(bn_name)
            x = _primary_input(args, {})
            owner = self.outputs.get(id(x)) if x is not None else None
            if owner is not None and owner[1] is x:
                if self.feeds.setdefault(owner[0], bn_name) != bn_name:
                    self.escaped.add(owner[0])
        return hook

    def _leave(self, module: nn.Module, args: tuple, out: Any) -> None:
        self._inside.pop()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if not self._off:
            for t in tensors_in((args, kwargs or {})):
                owner = self.outputs.get(id(t))
                if owner is not None and owner[1] is t and self.feeds.get(owner[0]) not in self._inside:
                    self.escaped.add(owner[0])
        return func(*args, **(kwargs or {}))

    def run(self, model: nn.Module, inputs: Any) -> None:
        """Run ``model`` on ``inputs`` with the hooks and the use counting on."""
        with torch.no_grad(), self:
            output = run_model(model, inputs)
        for t in tensors_in(_as_tree(output)):  # a consumer output that is also a model output: no norm fold
            if id(t) in self.outputs:
                self.escaped.add(self.outputs[id(t)][0])

    def reset(self) -> None:
        """Forget a failed run's stack state (its captured values stay valid observations)."""
        self._inside.clear()
        self._off = False

    def close(self) -> None:
        """Remove the hooks."""
        for handle in self.handles:
            handle.remove()


def _noisy(inputs: Any, seed: int = 0) -> Any | None:
    """``inputs`` with noise added to every float tensor (None when there is none: no second run)."""
    gen = torch.Generator().manual_seed(seed)
    found = False

    def noisy(t: Any) -> Any:
        nonlocal found
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return t
        found = True
        scale = float(t.detach().float().std()) if t.numel() > 1 else 1.0
        return t + torch.randn(t.shape, generator=gen).to(t) * max(scale, 1e-3)

    if isinstance(inputs, Mapping):
        out: Any = {k: noisy(v) for k, v in inputs.items()}
    elif isinstance(inputs, (tuple, list)):
        out = type(inputs)(noisy(v) for v in inputs)
    else:
        out = noisy(inputs)
    return out if found else None


def _consumers(modules: Mapping[str, nn.Module], kept: Mapping[str, Any]) -> dict[str, tuple[torch.Tensor, int]]:
    """Conv, transposed conv (groups=1) and Linear layers losing input channels: removed indices, channel dim."""
    out = {}
    for name, entry in kept.items():
        module = modules.get(name)
        if not isinstance(entry, Mapping) or "in" not in entry:
            continue
        if isinstance(module, _CONVS) and module.groups == 1:
            size, dim = module.in_channels, 1
        elif isinstance(module, nn.Linear):
            size, dim = module.in_features, -1
        else:
            continue
        removed = sorted(set(range(size)) - set(entry["in"]))
        if removed:
            out[name] = (torch.tensor(removed, dtype=torch.long), dim)
    return out


def _close(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a - b).abs() <= _RTOL * (1.0 + b.abs())


def _contribution(module: nn.Module, part: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``module``'s output (no bias) for the input channels ``part`` of one sample read through ``weight``."""
    if isinstance(module, DECONV_TYPES):
        fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[part.dim() - 2]
        out = fn(part.unsqueeze(0), weight, None, module.stride, module.padding, module.output_padding, 1,
                 module.dilation)
    else:
        out = module._conv_forward(part.unsqueeze(0), weight, None)
    return out[0].flatten(1)


def _decide(module: nn.Module, idx: torch.Tensor, samples: list[torch.Tensor], dim: int) -> Fold | None:
    """The fold of one consumer from its removed input channels as captured (None: nothing to decide)."""
    if dim == 1:  # conv input [N, R, *spatial]: a sample is one image (the map may vary over positions)
        flat = torch.cat([s for s in samples if s.shape[1:] == samples[0].shape[1:]])
    else:  # Linear input [..., R]: every leading position is a sample (a bias adds the same at each)
        flat = torch.cat([s.reshape(-1, s.shape[-1]) for s in samples])
    ref = flat[0]
    rows = ref.reshape(ref.shape[0], -1)
    if flat.shape[0] >= 2:  # the same in every sample: it does not depend on the data
        same = _close(flat, ref).reshape(flat.shape[0], ref.shape[0], -1).all(2).all(0)
    elif rows.shape[1] >= 2:  # one image: only channels constant over its positions count as data-free
        same = _close(rows, rows[:, :1]).all(1)
    else:
        return None
    nonzero = rows.abs().amax(1) > 0
    use = same & nonzero
    unfolded = int((nonzero & ~same).sum())
    if not bool(use.any()):
        return Fold("", 0, "", True, torch.zeros(out_major(module, module.weight).shape[0], dtype=torch.float64),
                    unfolded)
    weight = module.weight.detach().double().cpu().index_select(1 - out_dim(module), idx[use])
    part = ref[use]
    if dim != 1:
        return Fold("", int(use.sum()), "", True, weight @ part, unfolded)
    contribution = _contribution(module, part, weight)
    if isinstance(module, DECONV_TYPES):
        delta = contribution.mean(1)
        return Fold("", int(use.sum()), "", bool(_close(contribution, delta[:, None]).all()), delta, unfolded)
    maps = part.flatten(1)
    flat_map = _close(maps, maps[:, :1]).all(1)  # constant over positions: the sum of the kernel taps
    delta = weight[:, flat_map].flatten(2).sum(2) @ maps[flat_map, 0]
    if not bool(flat_map.all()):  # uneven (but data-free) maps: their mean contribution, the least-squares bias
        delta = delta + module._conv_forward(part[~flat_map].unsqueeze(0), weight[:, ~flat_map], None)[0].flatten(
            1).mean(1)
    exact = bool(_close(contribution, delta[:, None]).all())
    return Fold("", int(use.sum()), "", exact, delta, unfolded)


def find_folds(model: nn.Module, dummy_input: Any, kept: Mapping[str, Any]) -> list[Fold]:
    """Constant removed input channels of every shrinking Conv/Linear layer, and where they fold (no change)."""
    modules = dict(model.named_modules())
    removed = _consumers(modules, kept)
    if not removed:
        return []
    capture = _Capture(model, removed)
    try:
        with eval_mode(model):
            capture.run(model, dummy_input)
            noisy = _noisy(dummy_input)
            if noisy is not None:
                try:
                    capture.run(model, noisy)
                except Exception:  # noqa: BLE001 - a model that rejects the noisy copy is judged on dummy_input alone
                    capture.reset()
    finally:
        capture.close()
    folds = []
    for name, (idx, dim) in removed.items():
        fold = _decide(modules[name], idx, capture.values[name], dim) if capture.values[name] else None
        if fold is None or not (fold.channels or fold.unfolded):
            continue
        fold.layer, module = name, modules[name]
        fold.target = "bias" if module.bias is not None else "new bias"
        bn = modules.get(capture.feeds.get(name, ""))
        if fold.target == "new bias" and name not in capture.escaped and isinstance(bn, _BatchNorm) and (
            bn.num_features == fold.delta.numel()
        ):
            fold.target = capture.feeds[name]
        folds.append(fold)
    return folds


@torch.no_grad()
def apply_folds(model: nn.Module, folds: list[Fold], kept: dict[str, Any]) -> None:
    """Add each fold's contribution (new tensors, so a snapshot can undo it); mark added biases in ``kept``."""
    modules = dict(model.named_modules())
    for fold in folds:
        if not fold.channels:
            continue
        module = modules[fold.layer]
        if fold.target in ("bias", "new bias"):
            base = module.bias if module.bias is not None else torch.zeros_like(fold.delta)
            module.bias = nn.Parameter((base.double().cpu() + fold.delta).to(module.weight),
                                       requires_grad=module.weight.requires_grad)
            if fold.target == "new bias":
                kept[fold.layer]["add_bias"] = True
            continue
        bn = modules[fold.target]
        if bn.running_mean is not None:  # without running stats the batch mean absorbs the shift
            bn._buffers["running_mean"] = (bn.running_mean.double().cpu() - fold.delta).to(bn.running_mean)
