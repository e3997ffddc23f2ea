"""Dependency-aware speedup: physically remove pruned channels so the pruned model is smaller and faster.

``ModelSpeedup(model, dummy_input, masks).speedup_model()`` traces the model once, finds which layers'
channels are coupled (residual adds, concatenations, depthwise convs, norms, flatten -> Linear, attention
heads), reconciles the masks within each group, and rebuilds the layers with only the kept slices.
Constants that removed channels still carry in the masked model (a trained BatchNorm's shift after a zeroed
filter, a bias) are folded into the layers that read them (see :mod:`.fold`), so the shrunk model computes
what the masked one did (exactly, but near the zero-padded borders of convs). ``apply_kept_channels``
replays the recorded shrink on a fresh base model so a saved pruned model can be rebuilt and loaded
strictly. ``channel_dependency_report`` shows the groups before you prune.

Besides Conv/Linear/norms it shrinks transformers' GPT-style ``Conv1D`` (a transposed Linear), embeddings
(their columns), attention blocks by whole heads (separate or fused q/k/v, GQA-consistent), MoE experts
stored as 3-D parameters (each expert its own intermediate channels), grouped convs by whole groups,
transposed convs with ``groups=1`` (a heatmap head's ``deconv_layers``: their inputs along weight dim 0, their
outputs along dim 1; grouped ones keep their channels), and
per-channel parameters a module uses directly (layer scales, class tokens, position tables) with the
channels they touch; a weight tied between an embedding and a head is sliced alike and tied again.

Limits: only the path the dummy input takes is analysed; channels must sit in dim 1 (convs, norms over
NCHW) or the last dim (Linear, LayerNorm); ops whose result depends on the channel count (a mean over
channels, a slice at a fixed offset, an unknown function) keep their channels, and a mask that wants them
removed raises UnsupportedOpError with the config_list entry that avoids it. Norms over a pruned hidden
width compute their statistics over the kept channels (the shrunk model then differs from the masked one).
"""

from .errors import SpeedupError, UnsupportedOpError
from .graph import ChannelGraph
from .planner import KeptChannels
from .report import ChannelGroups, channel_dependency_report
from .speedup import ModelSpeedup, SpeedupWarning, apply_kept_channels
from .tracer import trace_channels

__all__ = [
    "ChannelGraph",
    "ChannelGroups",
    "KeptChannels",
    "ModelSpeedup",
    "SpeedupError",
    "SpeedupWarning",
    "UnsupportedOpError",
    "apply_kept_channels",
    "channel_dependency_report",
    "trace_channels",
]
