"""Factor-transfer connectors (Kim et al., NeurIPS 2018): the teacher's Paraphraser, the student's Translator."""

from __future__ import annotations

import torch
from torch import nn

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError


def _block(convs: list[nn.Module], channels: list[int], use_bn: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for conv, c in zip(convs, channels, strict=True):
        layers += [conv, *([nn.BatchNorm2d(c)] if use_bn else []), nn.LeakyReLU(0.1)]
    return nn.Sequential(*layers)


class Paraphraser(nn.Module):
    """An autoencoder on the teacher's feature: the encoder's output is the teacher's *factor*.

    ``phase="pretrain"``: returns the reconstruction (train it with an L2 loss against the feature itself);
    ``phase="train"``: returns the factor, without gradients (the paraphraser stays fixed while the student
    learns). Three 3x3 convs each way, LeakyReLU(0.1), BatchNorm with ``use_bn``.
    """

    def __init__(self, in_channel: int, out_channel: int, phase: str = "pretrain", use_bn: bool = False) -> None:
        super().__init__()
        if phase not in ("pretrain", "train"):
            raise ConfigError(f"Paraphraser phase must be 'pretrain' or 'train', got {phase!r}.")
        self.phase = phase
        c_in, c_out = int(in_channel), int(out_channel)
        self.encoder = _block([nn.Conv2d(c_in, c_in, 3, 1, 1), nn.Conv2d(c_in, c_out, 3, 1, 1),
                               nn.Conv2d(c_out, c_out, 3, 1, 1)], [c_in, c_out, c_out], use_bn)
        self.decoder = _block([nn.ConvTranspose2d(c_out, c_out, 3, 1, 1), nn.ConvTranspose2d(c_out, c_in, 3, 1, 1),
                               nn.ConvTranspose2d(c_in, c_in, 3, 1, 1)], [c_out, c_in, c_in], use_bn)

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        """The reconstruction (pretrain) or the factor (train)."""
        if self.phase == "pretrain":
            return self.decoder(self.encoder(feature))
        with torch.no_grad():
            return self.encoder(feature)


class Translator(nn.Module):
    """Three 3x3 convs mapping the student's feature to a factor of the paraphraser's width."""

    def __init__(self, in_channel: int, out_channel: int, use_bn: bool = True) -> None:
        super().__init__()
        c_in, c_out = int(in_channel), int(out_channel)
        self.encoder = _block([nn.Conv2d(c_in, c_in, 3, 1, 1), nn.Conv2d(c_in, c_out, 3, 1, 1),
                               nn.Conv2d(c_out, c_out, 3, 1, 1)], [c_in, c_out, c_out], use_bn)

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        """The student's factor."""
        return self.encoder(feature)


for _cls in (Paraphraser, Translator):
    register_component(_cls, "connector")
