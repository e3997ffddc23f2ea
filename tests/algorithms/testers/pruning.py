from __future__ import annotations

import torch

from tests.algorithms.testers.base import AlgorithmTesterBase


def _zero_fraction(model: torch.nn.Module, types: tuple[type, ...]) -> list[float]:
    return [float((m.weight == 0).float().mean()) for m in model.modules() if isinstance(m, types)]


class TestLevelOnVisionModels(AlgorithmTesterBase):
    """level (once torch_unstructured) on conv and attention models: exactly half of every weight goes."""

    algorithm = "level"
    models = ["mlp", "resnet_tiny", "tiny_vit"]
    reject_models = ["no_weights", "not_a_module"]
    hyperparameters = {"sparsity": 0.5, "method": "l1", "op_types": ["Linear", "Conv2d"]}

    def post_smash_hook(self, smashed, base, inputs):
        fractions = _zero_fraction(smashed.model, (torch.nn.Linear, torch.nn.Conv2d))
        assert fractions and all(abs(f - 0.5) < 0.01 for f in fractions), fractions
        # l1 keeps the largest weights: every kept |w| >= every pruned |w| of the base layer
        base_layers = [m for m in base.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
        new_layers = [m for m in smashed.model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
        for b, n in zip(base_layers, new_layers, strict=True):
            kept = b.weight.abs()[n.weight != 0]
            pruned = b.weight.abs()[n.weight == 0]
            assert kept.min() >= pruned.max()


class TestLevelRandom(TestLevelOnVisionModels):
    models = ["mlp"]
    hyperparameters = {"sparsity": 0.3, "method": "random", "op_types": ["Linear"], "exclude": ["fc3"]}

    def post_smash_hook(self, smashed, base, inputs):
        linears = {n: m for n, m in smashed.model.named_modules() if isinstance(m, torch.nn.Linear)}
        for name, m in linears.items():
            frac = float((m.weight == 0).float().mean())
            assert abs(frac - (0.0 if name == "fc3" else 0.3)) < 0.01, (name, frac)
