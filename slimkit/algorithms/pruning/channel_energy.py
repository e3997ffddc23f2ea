"""channel_energy: remove the channels that deliver the least energy to the layers reading them, on real data."""

from __future__ import annotations

from torch import nn

from slimkit.algorithms.pruning._data import batch_hyperparameters, statistics_batches
from slimkit.algorithms.pruning._framework import FrameworkPruner
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.pruning import ChannelEnergyPruner, Pruner


@register
class ChannelEnergy(FrameworkPruner):
    """Channel-energy filter pruning: importance measured where each channel is consumed, on data.

    A channel's importance is ``E[x^2] * ||W[:, k]||^2`` summed over the Conv/Linear layers that read it (``x``
    their input channel carrying it, ``W[:, k]`` their weights on it), over ``batches`` train batches of
    ``cfg.data``: what the readers' outputs lose when it goes. In a gated MLP (Llama, Qwen, Mistral) that is the
    input of ``down_proj``, ``act(gate) * up``, so the activation and the gate count, which statistics of
    each projection's own output miss. Selection, ``dims`` and speedup as ``l1_filter``; a MoE expert's
    intermediate channels are ranked on the tokens the router sent to it.
    """

    algorithm_name = "channel_energy"
    aliases = ("energy",)
    references = {"Wanda (Sun et al. 2023)": "https://arxiv.org/abs/2306.11695",
                  "FLAP (An et al. 2024)": "https://arxiv.org/abs/2312.11983"}
    dataset_required = True
    engine = ChannelEnergyPruner

    def extra_hyperparameters(self) -> list:
        """Number of batches and batch size."""
        return batch_hyperparameters()

    def build_pruner(self, model: nn.Module, config_list: list, smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """The energy pruner fed the first train batches (forward passes only; the first one is traced)."""
        batches = statistics_batches(self.algorithm_name, model, smash_config)
        return ChannelEnergyPruner(model, config_list, dataloader=batches, statistics_batch_num=len(batches))
