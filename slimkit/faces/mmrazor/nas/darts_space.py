"""The DARTS search space (Liu, Simonyan & Yang, ICLR 2019) buildable from MMRazor's configs: ``DartsBackbone``.

A stem conv, then ``num_layers`` cells (reduction cells at 1/3 and 2/3 of the depth double the width and halve the
resolution). A cell preprocesses its two inputs (the outputs of the two cells before it) to its width, then builds
``num_nodes`` nodes: node ``k`` (named ``normal_n{k}`` / ``reduce_n{k}``, k = 2, 3, ...) is a
:class:`~slimkit.engines.nas.DiffChoiceRoute` over one edge per earlier tensor (edge ``{node}_p{i}``, each built
from ``mutable_cfg``: a :class:`~slimkit.engines.nas.DiffMutableOP` over the candidate ops). The cell's output is
its nodes concatenated. Node and edge names are the routes' and ops' ``alias``: every normal cell shares one set
of architecture logits and every reduction cell another, as in the paper.

The candidate ops: ``DartsZero``, ``DartsSkipConnect`` (a factorized reduce when strided), ``DartsPoolBN``,
``DartsSepConv``, ``DartsDilConv``; ``use_drop_path`` drops an op's output per sample in training (probability
``drop_prob``, 0.1 by default).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.core.registry import build_component
from slimkit.errors import ConfigError, check_int, check_number
from slimkit.faces.mmrazor.builder import register_module
from slimkit.training.layers import norm_layer

_BN: dict[str, Any] = {"type": "BN"}


class _DartsOp(nn.Module):
    """in/out channels and stride (what a cell's ``module_kwargs`` give every candidate), and drop-path."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, use_drop_path: bool = False,
                 drop_prob: float = 0.1) -> None:
        super().__init__()
        owner = type(self).__name__
        if isinstance(stride, bool) or stride not in (1, 2):
            raise ConfigError(f"{owner} stride must be 1 or 2, got {stride!r}.")
        check_number(f"{owner} drop_prob", drop_prob, 0, 1, open_high=True)
        self.in_channels = check_int(f"{owner}: in_channels", in_channels)
        self.out_channels = check_int(f"{owner}: out_channels", out_channels)
        self.stride = int(stride)
        self.drop_prob = float(drop_prob) if use_drop_path else 0.0

    def drop_path(self, out: torch.Tensor) -> torch.Tensor:
        """Zero whole samples with probability ``drop_prob`` in training (the kept ones scaled up)."""
        if not self.training or self.drop_prob <= 0:
            return out
        keep = 1.0 - self.drop_prob
        mask = torch.empty(out.shape[0], *([1] * (out.dim() - 1)), device=out.device).bernoulli_(keep)
        return out * mask / keep


class FactorizedReduce(nn.Module):
    """Halve the resolution with two strided 1x1 convs, the second shifted by one pixel, concatenated."""

    def __init__(self, in_channels: int, out_channels: int, norm_cfg: Mapping[str, Any] | None = _BN) -> None:
        super().__init__()
        if out_channels % 2:
            raise ConfigError(f"A factorized reduce needs an even out_channels, got {out_channels}.")
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(in_channels, out_channels // 2, 1, 2, bias=False)
        self.conv2 = nn.Conv2d(in_channels, out_channels // 2, 1, 2, bias=False)
        self.bn = norm_layer(norm_cfg, out_channels) or nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """ReLU, the two strided convs (even and odd pixel grids), concatenated, normalised."""
        x = self.relu(x)
        return self.bn(torch.cat([self.conv1(x), self.conv2(x[:, :, 1:, 1:])], dim=1))


@register_module()
class DartsZero(_DartsOp):
    """The 'none' op: zeros of the output's shape (strided like the others)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Zeros shaped like the op's output."""
        return x[:, :, :: self.stride, :: self.stride] * 0.0


@register_module()
class DartsSkipConnect(_DartsOp):
    """The identity; a factorized reduce when strided."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, use_drop_path: bool = False,
                 norm_cfg: Mapping[str, Any] | None = _BN, drop_prob: float = 0.1) -> None:
        super().__init__(in_channels, out_channels, stride, use_drop_path, drop_prob)
        self.reduce = FactorizedReduce(in_channels, out_channels, norm_cfg) if stride > 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``, or its factorized reduction (with drop-path)."""
        return x if self.reduce is None else self.drop_path(self.reduce(x))


@register_module()
class DartsPoolBN(_DartsOp):
    """3x3 max or average pooling (``pool_type``) then batch norm."""

    def __init__(self, in_channels: int, out_channels: int, pool_type: str, stride: int = 1, kernel_size: int = 3,
                 use_drop_path: bool = False, norm_cfg: Mapping[str, Any] | None = _BN, drop_prob: float = 0.1) -> None:
        super().__init__(in_channels, out_channels, stride, use_drop_path, drop_prob)
        check_int("DartsPoolBN: kernel_size", kernel_size)
        if kernel_size % 2 == 0:
            raise ConfigError(f"DartsPoolBN kernel_size must be odd (it keeps the size), got {kernel_size!r}.")
        if pool_type == "max":
            self.pool: nn.Module = nn.MaxPool2d(kernel_size, stride, kernel_size // 2)
        elif pool_type == "avg":
            self.pool = nn.AvgPool2d(kernel_size, stride, kernel_size // 2, count_include_pad=False)
        else:
            raise ConfigError(f"DartsPoolBN pool_type must be 'max' or 'avg', got {pool_type!r}.")
        self.bn = norm_layer(norm_cfg, out_channels) or nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pool, normalise, drop-path."""
        return self.drop_path(self.bn(self.pool(x)))


def _relu_dw_pw(cin: int, cout: int, kernel: int, stride: int, dilation: int,
                norm_cfg: Mapping[str, Any] | None) -> nn.Sequential:
    """ReLU, a ``kernel`` depthwise conv (dilated), a pointwise conv to ``cout``, norm."""
    if isinstance(kernel, bool) or kernel not in (3, 5):
        raise ConfigError(f"DARTS convolutions take kernel_size 3 or 5, got {kernel!r}.")
    return nn.Sequential(nn.ReLU(), nn.Conv2d(cin, cin, kernel, stride, kernel // 2 * dilation, dilation=dilation,
                                              groups=cin, bias=False),
                         nn.Conv2d(cin, cout, 1, bias=False), norm_layer(norm_cfg, cout) or nn.Identity())


@register_module()
class DartsSepConv(_DartsOp):
    """Two stacked separable convs (ReLU, depthwise ``kernel_size``, pointwise, norm); the first one strided."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 use_drop_path: bool = False, norm_cfg: Mapping[str, Any] | None = _BN, drop_prob: float = 0.1) -> None:
        super().__init__(in_channels, out_channels, stride, use_drop_path, drop_prob)
        self.conv1 = _relu_dw_pw(in_channels, in_channels, kernel_size, stride, 1, norm_cfg)
        self.conv2 = _relu_dw_pw(in_channels, out_channels, kernel_size, 1, 1, norm_cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Both separable convs, drop-path."""
        return self.drop_path(self.conv2(self.conv1(x)))


@register_module()
class DartsDilConv(_DartsOp):
    """One dilated (2) separable conv: ReLU, depthwise ``kernel_size``, pointwise, norm."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 use_drop_path: bool = False, norm_cfg: Mapping[str, Any] | None = _BN, drop_prob: float = 0.1) -> None:
        super().__init__(in_channels, out_channels, stride, use_drop_path, drop_prob)
        self.conv1 = _relu_dw_pw(in_channels, out_channels, kernel_size, stride, 2, norm_cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The dilated separable conv, drop-path."""
        return self.drop_path(self.conv1(x))


def _relu_conv_bn(cin: int, cout: int, norm_cfg: Mapping[str, Any] | None) -> nn.Sequential:
    return nn.Sequential(nn.ReLU(), nn.Conv2d(cin, cout, 1, bias=False), norm_layer(norm_cfg, cout) or nn.Identity())


class DartsCell(nn.Module):
    """Two preprocessed inputs, ``num_nodes`` routed nodes, the nodes concatenated (see the module doc)."""

    def __init__(self, num_nodes: int, channels: int, prev_channels: int, prev_prev_channels: int, reduction: bool,
                 prev_reduction: bool, mutable_cfg: Mapping[str, Any], route_cfg: Mapping[str, Any],
                 norm_cfg: Mapping[str, Any] | None) -> None:
        super().__init__()
        self.reduction = reduction
        self.preproc0 = (FactorizedReduce(prev_prev_channels, channels, norm_cfg) if prev_reduction
                         else _relu_conv_bn(prev_prev_channels, channels, norm_cfg))
        self.preproc1 = _relu_conv_bn(prev_channels, channels, norm_cfg)
        kind = "reduce" if reduction else "normal"
        self.nodes = nn.ModuleList()
        for depth in range(2, num_nodes + 2):
            node = f"{kind}_n{depth}"
            edges = {f"{node}_p{i}": build_component({
                **copy.deepcopy(dict(mutable_cfg)), "alias": f"{node}_p{i}",
                "module_kwargs": {"in_channels": channels, "out_channels": channels,
                                  "stride": 2 if reduction and i < 2 else 1}}) for i in range(depth)}
            self.nodes.append(build_component({**dict(route_cfg), "edges": edges, "alias": node}))

    def forward(self, s0: torch.Tensor, s1: torch.Tensor) -> torch.Tensor:
        """The nodes, each on every tensor before it, concatenated."""
        tensors = [self.preproc0(s0), self.preproc1(s1)]
        for node in self.nodes:
            tensors.append(node(tensors))
        return torch.cat(tensors[2:], dim=1)


@register_module()
class DartsBackbone(nn.Module):
    """DARTS's supernet backbone (see the module doc); returns the outputs of the cells in ``out_indices``.

    ``auxliary`` (MMRazor's spelling) adds the paper's auxiliary head input at 2/3 of the depth (``aux_channels``
    -> ``aux_out_channels``), prepended to the outputs in training.
    """

    def __init__(self, in_channels: int, base_channels: int, mutable_cfg: Mapping[str, Any],
                 route_cfg: Mapping[str, Any], num_layers: int = 8, num_nodes: int = 4, stem_multiplier: int = 3,
                 out_indices: Sequence[int] = (7,), auxliary: bool = False, aux_channels: int | None = None,
                 aux_out_channels: int | None = None, act_cfg: Mapping[str, Any] | None = None,
                 norm_cfg: Mapping[str, Any] | None = _BN) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("base_channels", base_channels), ("num_layers", num_layers),
                            ("num_nodes", num_nodes), ("stem_multiplier", stem_multiplier)):
            check_int(f"DartsBackbone: {name}", value)
        for name, value in (("mutable_cfg", mutable_cfg), ("route_cfg", route_cfg)):
            if not isinstance(value, Mapping) or "type" not in value:
                raise ConfigError(f"DartsBackbone: {name} must be a config dict with a 'type', got {value!r}.")
        if not isinstance(out_indices, Sequence) or isinstance(out_indices, str) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_layers for i in out_indices):
            raise ConfigError(f"DartsBackbone out_indices must be cell indices in 0..{num_layers - 1}, got "
                              f"{out_indices!r}.")
        if act_cfg is not None and (not isinstance(act_cfg, Mapping) or act_cfg.get("type") != "ReLU"):
            raise ConfigError(f"DartsBackbone: act_cfg={act_cfg!r} is not supported (the DARTS ops use ReLU).")
        out_indices = tuple(out_indices)
        if not out_indices or out_indices[-1] != num_layers - 1:
            raise ConfigError(f"DartsBackbone out_indices must end with the last cell ({num_layers - 1}), got "
                              f"{out_indices!r}.")
        if auxliary:
            if aux_channels is None or aux_out_channels is None:
                raise ConfigError("DartsBackbone auxliary=True needs aux_channels= and aux_out_channels=.")
            check_int("DartsBackbone: aux_channels", aux_channels)
            check_int("DartsBackbone: aux_out_channels", aux_out_channels)
        self.out_indices, self.aux_index = out_indices, 2 * num_layers // 3 if auxliary else -1
        stem = stem_multiplier * base_channels
        self.stem = nn.Sequential(nn.Conv2d(in_channels, stem, 3, 1, 1, bias=False),
                                  norm_layer(norm_cfg, stem) or nn.Identity())
        prev_prev, prev, channels = stem, stem, base_channels
        self.cells = nn.ModuleList()
        reduction = False
        for i in range(num_layers):
            prev_reduction, reduction = reduction, i in (num_layers // 3, 2 * num_layers // 3)
            channels *= 2 if reduction else 1
            self.cells.append(DartsCell(num_nodes, channels, prev, prev_prev, reduction, prev_reduction, mutable_cfg,
                                        route_cfg, norm_cfg))
            prev_prev, prev = prev, channels * num_nodes
            if i == self.aux_index:
                self.auxliary_module = nn.Sequential(
                    nn.ReLU(), nn.AvgPool2d(5, 2, 0, count_include_pad=False), nn.Conv2d(prev, aux_channels, 1,
                                                                                         bias=False),
                    norm_layer(norm_cfg, aux_channels) or nn.Identity(), nn.ReLU(),
                    nn.Conv2d(aux_channels, aux_out_channels, 2, bias=False),
                    norm_layer(norm_cfg, aux_out_channels) or nn.Identity(), nn.ReLU())
        self.out_channels = prev

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The stem, every cell on the two outputs before it; the outputs of ``out_indices`` (aux first)."""
        outs: list[torch.Tensor] = []
        s0 = s1 = self.stem(x)
        for i, cell in enumerate(self.cells):
            s0, s1 = s1, cell(s0, s1)
            if i in self.out_indices:
                outs.append(s1)
            if i == self.aux_index and self.training:
                outs.insert(0, self.auxliary_module(s1))
        return tuple(outs)
