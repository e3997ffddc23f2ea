"""The single shared implementations: union-find, BatchNorm -> producer masks, subclass-aware op_types."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from slimkit.engines._union_find import UnionFind
from slimkit.engines.config_list import class_names, select_layers
from slimkit.engines.pruning import L1FilterPruner, PruningConfigError, SlimEngine, resolve_config_list
from slimkit.engines.pruning.coupling import has_norm_masks, norm_producer_masks
from slimkit.engines.quantization import QuantizationConfigError, resolve_quant_config_list
from slimkit.engines.speedup import ModelSpeedup
from slimkit.engines.speedup.graph import UnionFind as GraphUnionFind


def test_one_union_find_for_ids_and_ad_hoc_keys():
    assert GraphUnionFind is UnionFind
    uf = UnionFind()
    assert uf.allocate(3).tolist() == [0, 1, 2]
    uf.union_arrays(np.array([0, -1]), np.array([2, 1]))
    uf.union_all([7, 4])  # keys past the allocated ones are created on first use
    assert uf.roots().tolist() == [0, 1, 0, 3, 4, 5, 6, 4] and len(uf) == 8
    with pytest.raises(ValueError, match="non-negative"):
        uf.find(-2)


class Residual(nn.Module):
    """Two convs added: their shared channels follow one BatchNorm; a third conv has its own."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 6, 1), nn.Conv2d(3, 6, 1)
        self.bn = nn.BatchNorm2d(6)
        self.c = nn.Conv2d(6, 4, 1)
        self.bn_c = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.bn_c(self.c(torch.relu(self.bn(self.a(x) + self.b(x))))).mean((2, 3)))


def test_norm_masks_become_producer_masks_that_the_speedup_removes():
    torch.manual_seed(0)
    model, x = Residual().eval(), torch.randn(2, 3, 4, 4)
    with torch.no_grad():
        model.bn.weight.copy_(torch.tensor([1.0, 0.01, 1.0, 0.02, 1.0, 0.03]))
        model.bn_c.weight.copy_(torch.tensor([0.5, 0.01, 0.6, 0.02]))
    pruner = SlimEngine(model, [{"sparsity": 0.5}], scope="layer")
    pruner.compress()
    masks = pruner.get_masks()
    plain = pruner.unwrap_model(apply_masks=True)
    assert has_norm_masks(plain, masks) and not has_norm_masks(plain, {"a": masks["bn"]})
    extra = {"head": {"weight_mask": torch.ones(2, 4), "bias_mask": None}}
    out = norm_producer_masks(plain, x[:1], {**masks, **extra})
    assert out["head"] is extra["head"]  # other masks pass through
    assert out["a"]["out_channels"].tolist() == out["b"]["out_channels"].tolist() == [0, 2, 4]
    assert out["c"]["out_channels"].tolist() == [0, 2] and "bn" not in out
    speedup = ModelSpeedup(plain, x[:1], out)
    small = speedup.speedup_model()
    assert (small.a.out_channels, small.b.out_channels, small.bn.num_features, small.c.in_channels) == (3, 3, 3, 3)


class Conv2dSame(nn.Conv2d):
    """A TF-"SAME"-padding conv (its forward is irrelevant to layer selection)."""


class SubclassNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = Conv2dSame(3, 4, 3)
        self.conv = nn.Conv2d(4, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 2)


def test_op_types_match_subclasses_in_pruning_and_quantization():
    model = SubclassNet()
    assert {"Conv2dSame", "Conv2d", "Module"} <= class_names(model.stem)
    resolved = resolve_config_list(model, [{"sparsity": 0.5, "op_types": ["Conv2d"]}], ("Conv2d", "Linear"))
    assert list(resolved) == ["stem", "conv"] and resolved["stem"]["op_type"] == "Conv2dSame"
    only_sub = resolve_config_list(model, [{"sparsity": 0.5, "op_types": ["Conv2dSame"]}], ("Conv2d",))
    assert list(only_sub) == ["stem"]
    assert list(resolve_config_list(model, [{"sparsity": 0.5}], ("Conv2d",))) == ["stem", "conv"]  # "default"
    pruner = L1FilterPruner(model, [{"sparsity": 0.5, "op_types": ["Conv2dSame"]}])  # supported via nn.Conv2d
    assert [w.name for w in pruner.get_modules_wrapper()] == ["stem"]
    pruner.unwrap_model()
    quant = resolve_quant_config_list(model, [{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Conv2d"]}],
                                      ("Conv2d", "Linear"))
    assert list(quant) == ["stem", "conv"]
    assert select_layers(model, [{"op_types": ["Conv2d"]}, {"exclude": True, "op_names": ["stem"]}], (),
                         PruningConfigError) == {"conv": 0}


def test_selection_errors_use_the_family_error():
    model = SubclassNet()
    with pytest.raises(PruningConfigError, match="Types in this model: BatchNorm2d, Conv2d, Conv2dSame, Linear"):
        resolve_config_list(model, [{"sparsity": 0.5, "op_types": ["Conv3d"]}], ("Conv2d",))
    with pytest.raises(QuantizationConfigError, match=r"op_type 'Conv2dsame' is not .*Did you mean 'Conv2dSame'"):
        resolve_quant_config_list(model, [{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Conv2dsame"]}],
                                  ("Conv2d",))
