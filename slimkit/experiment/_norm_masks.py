"""BatchNorm (Network Slimming) masks -> producer masks for the speedup: the compression layer's implementation.

``producer_masks(model, dummy_input, masks)`` is
:func:`slimkit.compression.pruning.coupling.norm_producer_masks`, which decides with
:meth:`ChannelCoupling.producer_masks <slimkit.compression.pruning.coupling.ChannelCoupling.producer_masks>`;
this module only keeps the names ``slimkit.experiment.compressor`` imports.
"""

from __future__ import annotations

from slimkit.compression.pruning.coupling import has_norm_masks
from slimkit.compression.pruning.coupling import norm_producer_masks as producer_masks

__all__ = ["has_norm_masks", "producer_masks"]
