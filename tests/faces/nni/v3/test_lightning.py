"""NNI 3.0's ``LightningEvaluator`` over a real Lightning trainer (our own 3.0-style script, as its
``evaluator/lightning_evaluator.py`` example builds one): a Taylor pruner and a QAT quantizer trained through it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.compression.pruning import TaylorPruner
from slimkit.compression.quantization import QATQuantizer
from slimkit.compression.utils import LightningEvaluator
from slimkit.errors import ConfigError
from slimkit.faces.nni import trace
from tests.faces.nni.digits import DigitCNN, PlainCNN

pytestmark = pytest.mark.slow  # importing Lightning alone takes seconds


def _lightning_parts(digits, net: nn.Module, steps: list[int]):
    pl = pytest.importorskip("pytorch_lightning")

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch, batch_idx):
            steps.append(batch_idx)
            return nn.functional.cross_entropy(self(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("default", (self(batch[0]).argmax(1) == batch[1]).float().mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    def loader(batches):
        x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64)

    class Data(pl.LightningDataModule):
        def train_dataloader(self):
            return loader(digits[0][:4])

        def val_dataloader(self):
            return loader(digits[1][:2])

    trainer = trace(pl.Trainer)(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, accelerator="cpu", devices=1)
    return Module(), LightningEvaluator(trainer, Data(), dummy_input=torch.rand(2, 1, 8, 8)), pl


def test_taylor_pruner_collects_its_statistics_through_a_lightning_trainer(cnn, digits):
    steps: list[int] = []
    module, evaluator, _ = _lightning_parts(digits, cnn, steps)
    pruner = TaylorPruner(module, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}], evaluator, training_steps=3)
    _, masks = pruner.compress()
    assert len(steps) == 3 and sorted(masks) == ["net.conv1", "net.conv2"]
    assert all(int(m["weight"].flatten(1).any(1).sum()) == m["weight"].shape[0] // 2 for m in masks.values())
    assert not torch.equal(pruner.get_modules_wrapper()[0].contribution, torch.zeros(16))
    evaluator.bind_model(module)
    default, metrics = evaluator.evaluate()
    assert default == metrics["default"] and 0.0 <= default <= 1.0


def test_qat_quantizer_trains_through_a_lightning_trainer(digits):
    steps: list[int] = []
    module, evaluator, _ = _lightning_parts(digits, PlainCNN(), steps)
    config = [{"op_types": ["Conv2d", "Linear"], "target_names": ["_input_", "weight"], "quant_dtype": "int8"}]
    quantizer = QATQuantizer(module, config, evaluator)
    _, calibration = quantizer.compress(max_steps=2, max_epochs=None)
    assert len(steps) == 2 and quantizer.steps == 2
    assert calibration["net.conv1"]["_input_0"]["quant_bits"] == 8


def test_lightning_evaluator_refuses_what_is_not_lightning(digits):
    _, evaluator, pl = _lightning_parts(digits, DigitCNN(), [])
    with pytest.raises(ConfigError, match="needs a Lightning Trainer"):
        LightningEvaluator(object())
    with pytest.raises(ConfigError, match="trains a LightningModule"):
        evaluator.bind_model(DigitCNN())
    assert isinstance(evaluator.trainer, pl.Trainer)
