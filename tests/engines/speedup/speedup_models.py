"""Test models, L1 masks and independent counters for the speedup tests (no downloads)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import torch
from safetensors.torch import load_model, save_model
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from slimkit.engines.speedup import ModelSpeedup, apply_kept_channels
from slimkit.engines.speedup.layers import out_major
from slimkit.utils import main_tensor, run_model


class Block(nn.Module):
    """conv-bn-relu-conv-bn + shortcut (identity, or 1x1 conv + bn when the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNetTiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU())
        self.l1 = Block(16, 16, 1)
        self.l2 = Block(16, 32, 2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.l2(self.l1(self.stem(x)))), 1))


class ConcatNet(nn.Module):
    """Two branches concatenated with the raw input along channels, then a fusing conv."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.bn_a = nn.BatchNorm2d(8)
        self.b = nn.Conv2d(3, 8, 1)
        self.fuse = nn.Conv2d(19, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([x, torch.relu(self.bn_a(self.a(x))), torch.tanh(self.b(x))], dim=1)
        return self.fc(torch.relu(self.fuse(y)).mean(dim=(2, 3)))


class FlattenNet(nn.Module):
    """conv -> relu -> maxpool -> flatten -> Linear: conv channels map to blocks of flattened features."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(8 * 3 * 3, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv(x)))
        return self.fc2(torch.relu(self.fc1(x.view(x.size(0), -1))))


class HeatmapNet(nn.Module):
    """A pose-style net: a strided conv backbone, a head of transposed convs (mmpose's ``deconv_layers``; the second
    with ``output_padding``) and a 1x1 ``final_layer``; 16x16 in, 5 heatmaps of 16x16 out."""

    def __init__(self, groups: int = 1) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16)
        self.d1, self.b3 = nn.ConvTranspose2d(16, 12, 4, 2, 1, bias=False, groups=groups), nn.BatchNorm2d(12)
        self.d2 = nn.ConvTranspose2d(12, 8, 3, 2, 1, output_padding=1)
        self.final = nn.Conv2d(8, 5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))
        return self.final(torch.relu(self.d2(torch.relu(self.b3(self.d1(h))))))


def seeded(factory: Callable[[], nn.Module], seed: int = 0) -> nn.Module:
    """Build a model with a fixed seed and random BN statistics (so BN is not the identity)."""
    torch.manual_seed(seed)
    model = factory()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.5, 0.5)
    return model.eval()


def l1_rows(weight: torch.Tensor, keep: int) -> list[int]:
    """Indices of the ``keep`` output rows with the largest L1 norm, sorted."""
    return sorted(weight.detach().reshape(weight.shape[0], -1).abs().sum(1).argsort(descending=True)[:keep].tolist())


def row_mask(module: nn.Module, rows: list[int]) -> dict[str, torch.Tensor | None]:
    """A filter mask keeping output channels ``rows`` (zero elsewhere), bias masked alike (a transposed conv's
    output channels are its weight's dim 1)."""
    wm = torch.zeros_like(module.weight)
    out_major(module, wm)[rows] = 1
    bm = None if getattr(module, "bias", None) is None else out_major(module, wm).reshape(len(module.bias), -1)[
        :, 0].clone()
    return {"weight_mask": wm, "bias_mask": bm}


def ones_masks(model: nn.Module) -> dict[str, dict[str, torch.Tensor | None]]:
    """All-ones masks (sparsity 0) for every Conv/ConvTranspose/Linear layer."""
    return {n: row_mask(m, list(range(out_major(m, m.weight).shape[0]))) for n, m in model.named_modules()
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear))}


def zeroed_reference(model: nn.Module, masks: dict, kept: dict) -> nn.Module:
    """The masked model: masks applied, and every removed channel's weights, biases and norm affine zeroed."""
    ref = copy.deepcopy(model)
    modules = dict(ref.named_modules())
    with torch.no_grad():
        for name, mask in masks.items():
            modules[name].weight.mul_(mask["weight_mask"])
            if mask.get("bias_mask") is not None:
                modules[name].bias.mul_(mask["bias_mask"])
        for name, entry in kept.items():
            m = modules[name]
            if "out" not in entry or isinstance(m, nn.Embedding):
                continue
            drop = [i for i in range(out_major(m, m.weight).shape[0]) if i not in set(entry["out"])]
            for attr in ("weight", "bias"):
                if getattr(m, attr, None) is not None:
                    (out_major(m, m.weight) if attr == "weight" else m.bias)[drop] = 0
    return ref


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def layer_macs(model: nn.Module, inputs: object) -> dict[str, int]:
    """Per-layer MACs of Conv/Linear layers from their output shapes (independent of FlopCounterMode)."""
    macs: dict[str, int] = {}
    hooks = []
    for name, m in model.named_modules():
        if isinstance(m, nn.Conv2d):
            k = m.kernel_size[0] * m.kernel_size[1] * m.in_channels // m.groups
            hooks.append(m.register_forward_hook(lambda mod, i, o, n=name, k=k: macs.__setitem__(n, o.numel() * k)))
        elif isinstance(m, nn.ConvTranspose2d):  # every input element is spread over out/groups x kernel outputs
            k = m.kernel_size[0] * m.kernel_size[1] * m.out_channels // m.groups
            hooks.append(m.register_forward_hook(lambda mod, i, o, n=name, k=k: macs.__setitem__(n, i[0].numel() * k)))
        elif isinstance(m, nn.Linear):
            hooks.append(m.register_forward_hook(
                lambda mod, i, o, n=name: macs.__setitem__(n, o.numel() * mod.in_features)))
    with torch.no_grad():
        run_model(model, inputs)
    for h in hooks:
        h.remove()
    return macs


def flop_counter_macs(model: nn.Module, inputs: object, ops: tuple[str, ...] | None = None) -> int:
    """MACs measured by torch.utils.flop_counter.FlopCounterMode (flops / 2), optionally only some aten ops."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        run_model(model, inputs)
    if ops is None:
        return counter.get_total_flops() // 2
    return sum(v for k, v in counter.get_flop_counts()["Global"].items() if str(k).split(".")[1] in ops) // 2


def predicted_macs(before: dict[str, int], model: nn.Module, kept: dict) -> int:
    """MACs after the shrink: each layer's MACs scaled by its kept output and input fractions."""
    modules = dict(model.named_modules())
    total = 0
    for name, macs in before.items():
        entry, m = kept.get(name), modules[name]
        if entry is None:
            total += macs
            continue
        conv = isinstance(m, (nn.Conv2d, nn.ConvTranspose2d))
        n_out = m.out_channels if conv else m.out_features
        n_in = m.in_channels if conv else m.in_features
        frac_in = 1 if isinstance(m, nn.Conv2d) and m.groups == m.in_channels > 1 else len(entry["in"]) / n_in
        total += round(macs * len(entry["out"]) / n_out * frac_in)
    return total


def predicted_params(model: nn.Module, kept: dict) -> int:
    """Parameter count after the shrink, from the unshrunk shapes and the kept lengths."""
    total = 0
    for name, m in model.named_modules():
        entry = kept.get(name)
        for p in m._parameters.values():
            if p is None:
                continue
            if entry is None or "out" not in entry:
                total += p.numel()
            elif isinstance(m, nn.Embedding):
                total += p.numel() // p.shape[1] * len(entry["out"])
            elif p.dim() == 1:
                total += len(entry["out"])
            else:
                depthwise = isinstance(m, nn.Conv2d) and m.groups == m.in_channels > 1
                fan = p.numel() // (p.shape[0] * p.shape[1])
                total += fan * len(entry["out"]) * (p.shape[1] if depthwise else len(entry["in"]))
    return total


def run_speedup(model: nn.Module, inputs: object, masks: dict, **options: object) -> tuple[nn.Module, ModelSpeedup]:
    speedup = ModelSpeedup(model, inputs, masks, **options)
    out = speedup.speedup_model()
    assert out is model  # in place, same object
    return out, speedup


def replay_matches(factory: Callable[[], nn.Module], small: nn.Module, kept: dict, inputs: object, tmp_path) -> None:
    """Rebuild from the base architecture + JSON record, load safetensors strictly, compare outputs exactly."""
    path = tmp_path / "model.safetensors"
    save_model(small, str(path))
    fresh = factory().eval()
    apply_kept_channels(fresh, json.loads(json.dumps(kept)))
    load_model(fresh, str(path), strict=True)
    with torch.no_grad():
        assert torch.equal(main_tensor(run_model(fresh, inputs)), main_tensor(run_model(small, inputs)))


def masked_reference(model: nn.Module, masks: dict) -> nn.Module:
    """The masked model as a pruner runs it: masks multiplied into weights and biases, nothing else changed."""
    ref = copy.deepcopy(model)
    modules = dict(ref.named_modules())
    with torch.no_grad():
        for name, mask in masks.items():
            modules[name].weight.mul_(mask["weight_mask"])
            if mask.get("bias_mask") is not None:
                modules[name].bias.mul_(mask["bias_mask"])
    return ref


def check_folding(factory, model, before, x, masks, plain_out, plain_kept, tmp_path) -> ModelSpeedup:
    """The default speedup (constants folded) is never further from the masked model than plain removal, equals
    it when every fold is exact and complete, removes the same channels and replays exactly."""
    small, speedup = run_speedup(model, x, masks)
    with torch.no_grad():
        out = main_tensor(run_model(small, x))
        ref = main_tensor(run_model(masked_reference(before, masks), x))
    err_fold, err_plain = (out - ref).abs().max().item(), (plain_out - ref).abs().max().item()
    assert err_fold <= err_plain + 1e-5, (err_fold, err_plain)
    if all(f.exact and not f.unfolded for f in speedup.folds):
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    strip = {n: {k: v for k, v in e.items() if k != "add_bias"} for n, e in speedup.kept_channels.items()}
    assert strip == plain_kept
    replay_matches(factory, small, speedup.kept_channels, x, tmp_path)
    return speedup


def check_equivalence(factory, model, x, masks, tmp_path):
    """Without folding: output shape kept, output equal to the model whose removed channels are zero, params as
    predicted, exact replay. Then :func:`check_folding` on a copy (the default path)."""
    before = copy.deepcopy(model)
    folded = copy.deepcopy(model)
    with torch.no_grad():
        base_out = main_tensor(run_model(model, x))
    small, speedup = run_speedup(model, x, masks, fold_constants=False)
    kept = speedup.kept_channels
    with torch.no_grad():
        out = main_tensor(run_model(small, x))
        ref = main_tensor(run_model(zeroed_reference(before, masks, kept), x))
    assert out.shape == base_out.shape
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert param_count(small) == predicted_params(before, kept) < param_count(before)
    replay_matches(factory, small, kept, x, tmp_path)
    check_folding(factory, folded, before, x, masks, out, kept, tmp_path)
    return speedup, before


def check_speedup(factory, model, x, masks, tmp_path, expect_params=None, anchor=True):
    """check_equivalence plus MACs: FlopCounterMode after the shrink equals the per-layer prediction."""
    base_macs = layer_macs(model, x)
    if anchor:  # the hook count agrees with FlopCounterMode on the unpruned model
        assert sum(base_macs.values()) == flop_counter_macs(model, x)
    speedup, before = check_equivalence(factory, model, x, masks, tmp_path)
    if expect_params is not None:
        assert param_count(model) == expect_params
    assert flop_counter_macs(model, x) == predicted_macs(base_macs, before, speedup.kept_channels) < sum(
        base_macs.values())
    return speedup, before


def check_sparsity_zero(model, x):
    """All-ones masks change nothing: no kept_channels, the output bit-identical."""
    with torch.no_grad():
        base = model(x)
    small, speedup = run_speedup(model, x, ones_masks(model))
    assert speedup.kept_channels == {}
    with torch.no_grad():
        assert torch.equal(small(x), base)
