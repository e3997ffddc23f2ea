from __future__ import annotations

import pytest
import torch

from slimkit.engines.quantization import QuantizedLayer
from slimkit.evaluation import count_parameters, size_on_disk
from slimkit.zoo.digits_cnn import accuracy, digits_split
from tests.algorithms.testers.base import AlgorithmTesterBase

_LAYERS = (torch.nn.Linear, torch.nn.Conv2d)


def _max_levels_per_channel(layer: QuantizedLayer) -> int:
    codes = layer.weight_codes.reshape(layer.weight_codes.shape[0], -1)
    return max(int(torch.unique(row).numel()) for row in codes)


class _TrainingQuantChecks:
    """Shared settings and checks (a mixin, so the harness does not take it for a tester of its own):
    every Linear/Conv is frozen at the right width, the model is smaller on disk and still accurate."""

    models = ["digits_cnn"]
    reject_models = ["no_weights", "not_a_module"]
    bits = 8
    #: accuracy on the digits test split may drop at most this much below the fp32 model
    max_accuracy_drop = 0.02
    excluded: tuple[str, ...] = ()

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_data("Digits")

    def post_smash_hook(self, smashed, base, inputs):
        expected = [n for n, m in base.named_modules() if isinstance(m, _LAYERS) and n not in self.excluded]
        frozen = {n: m for n, m in smashed.model.named_modules() if isinstance(m, QuantizedLayer)}
        assert sorted(n for n in frozen if "weight" in frozen[n].bits) == sorted(expected)
        for name in self.excluded:
            assert isinstance(smashed.model.get_submodule(name), _LAYERS)
        for name in expected:
            layer = frozen[name]
            assert layer.weight_codes.dtype == torch.uint8
            assert int(layer.weight_codes.max()) <= 2 ** self.bits - 1
            assert _max_levels_per_channel(layer) <= 2 ** self.bits
            assert layer.bits["weight"] == self.bits
        record = smashed.applied[0]["state"]
        assert sorted(record["layers"]) == sorted(frozen) and record["train_steps"] > 0
        linears = [n for n in expected if isinstance(base.get_submodule(n), torch.nn.Linear)]
        assert record["coverage"]["quantized_layers"] == len(linears)  # coverage counts the Linear-like layers
        left = [n for n in self.excluded if isinstance(base.get_submodule(n), torch.nn.Linear)]
        assert [x["name"] for x in record["coverage"]["left"]] == left
        assert count_parameters(smashed.model) == count_parameters(base)
        assert size_on_disk(smashed) < 0.45 * size_on_disk(base)
        # a sanity check: the harness trains on the Digits DataModule's split, which overlaps the zoo's test
        # split; the clean within-one-point measurement is tests/engines/quantization/test_quant_digits.py
        _, _, x_test, y_test = digits_split()
        assert accuracy(smashed.model, x_test, y_test) >= accuracy(base, x_test, y_test) - self.max_accuracy_drop


class TestQAT(_TrainingQuantChecks, AlgorithmTesterBase):
    algorithm = "qat"
    hyperparameters = {"bits": 8, "epochs": 1, "num_threads": 1}

    def post_smash_hook(self, smashed, base, inputs):
        super().post_smash_hook(smashed, base, inputs)
        first = smashed.model.get_submodule("features.0")
        assert first.bits == {"weight": 8, "input": 8}
        assert first.weight_scale.shape == (32, 1, 1, 1)  # per output channel
        # the first layer sees digits in [0, 1]: the observed input range maps 0 to code 0
        assert float(first.input_zero_point) == 0.0
        assert abs(float(first.input_scale) * 255 - 1.0) < 0.05


class TestQATPerTensor4Bit(_TrainingQuantChecks, AlgorithmTesterBase):
    algorithm = "qat"
    bits = 4
    excluded = ("classifier.3",)
    max_accuracy_drop = 0.03
    hyperparameters = {"bits": 4, "per_channel": False, "quantize_activations": False, "epochs": 2,
                       "exclude": ["classifier.3"], "num_threads": 1}

    def post_smash_hook(self, smashed, base, inputs):
        super().post_smash_hook(smashed, base, inputs)
        layer = smashed.model.get_submodule("features.4")
        assert layer.weight_scale.numel() == 1 and set(layer.bits) == {"weight"}
        assert int(torch.unique(layer.weight_codes).numel()) <= 16


class TestDoReFa(_TrainingQuantChecks, AlgorithmTesterBase):
    algorithm = "dorefa"
    hyperparameters = {"bits": 8, "epochs": 1, "num_threads": 1}

    def post_smash_hook(self, smashed, base, inputs):
        super().post_smash_hook(smashed, base, inputs)
        for layer in smashed.model.modules():
            if isinstance(layer, QuantizedLayer):
                # DoReFa's symmetric grid: zero point (2**8 - 1) / 2; the largest |w| lands on an end of the grid
                assert float(layer.weight_zero_point) == 127.5
                assert int(layer.weight_codes.min()) == 0 or int(layer.weight_codes.max()) == 255


class TestBNN(_TrainingQuantChecks, AlgorithmTesterBase):
    algorithm = "bnn"
    bits = 1
    # Binarizing the pretrained digits_cnn drops it to ~10% accuracy; training must re-fit the weights and the
    # BatchNorm running statistics. The old setting (1 epoch = 23 steps at Adam lr 1e-3) ended on that recovery
    # slope (0.88 after 12 steps, 0.94 after 16, 0.96 after 23), so CPU rounding decided the 2-point check
    # (drops of 1.6 to 3.6 points over seeds 0-4). Adam moves every latent weight by ~lr per step whatever its
    # gradient, and these layers' weights average |w| = 0.03-0.04, so at 1e-3 signs keep flipping (6% of weights
    # by step 69, 3.5% at 3e-4) and even 3 epochs ended between -1.6 and +0.9 points (seeds 0-5, 1 and 2 threads).
    # The default 3 epochs at lr 3e-4 ended +0.7 to +0.9 points above the fp32 model in all 12 of those runs.
    hyperparameters = {"num_threads": 1}  # the defaults: 3 epochs at lr 3e-4

    def post_smash_hook(self, smashed, base, inputs):
        super().post_smash_hook(smashed, base, inputs)
        layer = smashed.model.get_submodule("features.0")
        values = layer.weight()
        alpha = layer.weight_scale.flatten() / 2
        assert torch.equal(values.abs(), alpha.view(-1, 1, 1, 1).expand_as(values))  # +-alpha per channel


class TestLSQ(_TrainingQuantChecks, AlgorithmTesterBase):
    algorithm = "lsq"
    hyperparameters = {"bits": 8, "epochs": 1, "num_threads": 1}

    def post_smash_hook(self, smashed, base, inputs):
        super().post_smash_hook(smashed, base, inputs)
        layer = smashed.model.get_submodule("classifier.3")
        assert float(layer.weight_zero_point) == 128.0  # signed weights
        assert float(layer.input_zero_point) == 0.0  # input follows a ReLU: unsigned


class TestNaive(AlgorithmTesterBase):
    """NNI's naive quantizer: no data, symmetric per-tensor 8-bit codes, the digits CNN still accurate."""

    algorithm = "naive"
    models = ["digits_cnn"]
    reject_models = ["no_weights", "not_a_module"]
    hyperparameters = {"bits": 8}

    def post_smash_hook(self, smashed, base, inputs):
        expected = [n for n, m in base.named_modules() if isinstance(m, _LAYERS)]
        frozen = {n: m for n, m in smashed.model.named_modules() if isinstance(m, QuantizedLayer)}
        assert sorted(frozen) == sorted(expected) and sorted(smashed.applied[0]["state"]["layers"]) == sorted(frozen)
        for name in expected:
            layer, weight = frozen[name], base.get_submodule(name).weight.detach()
            assert layer.weight_codes.dtype == torch.uint8 and set(layer.bits) == {"weight"}
            assert float(layer.weight_zero_point) == 128.0 and layer.weight_scale.numel() == 1  # symmetric, per tensor
            assert float(layer.weight_scale) == pytest.approx(float(weight.abs().max()) / 127.5, rel=1e-5)
            assert (layer.weight() - weight).abs().max() <= float(layer.weight_scale) / 2 + 1e-6  # rounded, not cut
        assert size_on_disk(smashed) < 0.45 * size_on_disk(base)
        _, _, x_test, y_test = digits_split()
        assert accuracy(smashed.model, x_test, y_test) >= accuracy(base, x_test, y_test) - 0.01
