"""channel_energy: remove the channels that deliver the least energy to the layers reading them, on real data."""

from __future__ import annotations

from slimkit.algorithms.pruning._data import StatisticsPruner
from slimkit.core.registry import register
from slimkit.engines.pruning import ChannelEnergyPruner


@register
class ChannelEnergy(StatisticsPruner):
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
    engine = ChannelEnergyPruner
