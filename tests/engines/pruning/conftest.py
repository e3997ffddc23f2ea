"""Tiny models and real data (sklearn digits, offline) for the pruning tests."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.zoo.mobilenet_v2 import ConvBNAct, InvertedResidual


class ConvNet(nn.Module):
    """Conv-BN-ReLU x2 + Linear classifier for 8x8 digits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(dim=(2, 3)))


class TinyMobileNet(nn.Module):
    """Stem, a residual inverted block, a strided one and a 1x1 head: MobileNetV2's layer kinds, small.

    ``widths``: the stem (and first block's) channels, the second block's output, the head's.
    """

    def __init__(self, widths: tuple[int, int, int] = (16, 24, 64)) -> None:
        super().__init__()
        stem, mid, head = widths
        self.features = nn.Sequential(ConvBNAct(3, stem, stride=2), InvertedResidual(stem, stem, 1, 6),
                                      InvertedResidual(stem, mid, 2, 6), ConvBNAct(mid, head, kernel=1))
        self.classifier = nn.Linear(head, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 20)
        self.head = nn.Linear(20, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        return self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


@pytest.fixture
def convnet() -> ConvNet:
    torch.manual_seed(0)
    return ConvNet().eval()


@pytest.fixture
def mlp() -> MLP:
    torch.manual_seed(0)
    return MLP()


@pytest.fixture(scope="session")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    return x, y


@pytest.fixture(scope="session")
def digit_batches(digits) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = digits
    return [(x[i : i + 64], y[i : i + 64]) for i in range(0, 256, 64)]


@pytest.fixture
def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
        num_hidden_layers=2, vocab_size=256,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def tiny_bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=32, num_attention_heads=4, intermediate_size=64, num_hidden_layers=2, vocab_size=100
    )
    return BertModel(config).eval()

