"""MMRazor's one-shot search spaces, buildable from its configs: ShuffleNetV2 and MobileNetV2 (SPOS)."""

from .mobilenet import MBBlock, SearchableIdentity, SearchableMobileNetV2, make_divisible
from .shufflenet import SearchableShuffleNetV2, ShuffleBlock, ShuffleXception, channel_shuffle

__all__ = [
    "MBBlock",
    "SearchableIdentity",
    "SearchableMobileNetV2",
    "SearchableShuffleNetV2",
    "ShuffleBlock",
    "ShuffleXception",
    "channel_shuffle",
    "make_divisible",
]
