"""Dependency-aware speedup: physically remove pruned channels so the pruned model is smaller and faster.

``ModelSpeedup(model, dummy_input, masks).speedup_model()`` traces the model once, finds which layers'
channels are coupled (residual adds, concatenations, depthwise convs, norms, flatten -> Linear, attention
heads), reconciles the masks within each group, and rebuilds the layers with only the kept slices.
Constants that removed channels still carry in the masked model (a trained BatchNorm's shift after a zeroed
filter, a bias) are folded into the layers that read them (see :mod:`.fold`), so the shrunk model computes
what the masked one did (exactly, but near the zero-padded borders of convs). ``apply_kept_channels``
replays the recorded shrink on a fresh base model so a saved pruned model can be rebuilt and loaded
strictly. ``channel_dependency_report`` shows the groups before you prune.

Limits: only the path the dummy input takes is analysed; channels must sit in dim 1 (convs, norms over
NCHW) or the last dim (Linear, LayerNorm); grouped (non-depthwise) convs, tied weights, unknown modules
with their own parameters and ops whose result depends on the channel count keep their channels, and a
mask that wants them removed raises UnsupportedOpError with the config_list entry that avoids it.
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
