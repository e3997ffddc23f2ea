"""Done-means for dependency-aware pruning: an EfficientNet-style network really shrinks to the sparsity asked for.

Inverted residuals couple the expand conv, the depthwise conv and the squeeze-excite gate of every block, and
the residual adds couple the project convs of a stage. Per-layer L1 masks disagree inside those groups, so the
speedup can remove few channels; ``dependency_aware=True`` decides each group once and the conv parameters
shrink to about (1 - 0.5)^2 of the original.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from slimkit.engines.pruning import L1FilterPruner
from slimkit.engines.speedup import ModelSpeedup
from tests.engines.speedup.efficientnet_models import Conv2dSame, conv_params, efficientnet_lite

CONFIG = [{"sparsity": 0.5, "op_types": ["Conv2d"]}]


def prune_and_speed_up(dependency_aware: bool) -> dict:
    model, x = efficientnet_lite(), torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    before = conv_params(model)
    extra = {"dependency_aware": True, "dummy_input": x[:1]} if dependency_aware else {}
    pruner = L1FilterPruner(model, CONFIG, **extra)
    pruner.compress()
    with torch.no_grad():
        masked = model(x)
    masks = pruner.get_masks()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        speedup = ModelSpeedup(pruner.unwrap_model(apply_masks=True), x[:1], masks)
        small = speedup.speedup_model()
    with torch.no_grad():
        shrunk = small(x)
    return {"fraction": conv_params(small) / before, "masked": masked, "shrunk": shrunk, "pruner": pruner,
            "model": small, "speedup_warnings": [w for w in caught if "SpeedupWarning" in type(w.message).__name__]}


@pytest.fixture(scope="module")
def runs() -> dict[bool, dict]:
    return {flag: prune_and_speed_up(flag) for flag in (True, False)}


def test_dependency_aware_reaches_the_asked_sparsity(runs):
    aware, plain = runs[True], runs[False]
    assert aware["fraction"] <= 0.45, f"dependency_aware=True keeps {aware['fraction']:.3f} of the conv parameters"
    assert plain["fraction"] >= aware["fraction"] + 0.2, (
        f"per-layer masks keep {plain['fraction']:.3f} of the conv parameters, dependency-aware ones "
        f"{aware['fraction']:.3f}: coupled layers pruned on their own mostly cancel out in the speedup"
    )
    assert aware["speedup_warnings"] == [], "every dependency-aware mask is removable"
    assert plain["speedup_warnings"], "per-layer masks ask for channels the speedup cannot remove"


@pytest.mark.parametrize("dependency_aware", [True, False])
def test_shrunk_model_equals_masked_model(runs, dependency_aware):
    run = runs[dependency_aware]
    assert torch.isfinite(run["shrunk"]).all()
    torch.testing.assert_close(run["shrunk"], run["masked"], atol=1e-4, rtol=1e-4)


def test_groups_share_one_mask_and_subclassed_stem_keeps_its_forward(runs):
    run = runs[True]
    groups = {tuple(g.layers): g for g in run["pruner"].groups}
    block = next(layers for layers in groups if "blocks.1.expand.0" in layers)
    assert {"blocks.1.dw.0", "blocks.1.se.expand"} <= set(block)  # expand, depthwise and SE gate together
    assert groups[block].pruned == groups[block].channels // 2
    stem = run["model"].stem[0]
    assert type(stem) is Conv2dSame and stem.out_channels == 8  # 16 -> 8, shrunk in place
