"""Autoformer (Chen et al., ICCV 2021): a transformer supernet trained one random subnet per step (MMRazor's type).

AutoFormer's weight entanglement is the supernet's (:class:`~.autoformer_space.AutoformerBackbone`: every choice
uses the first channels of the widest weights); training samples a uniformly random subnet per step, as SPOS
does, and the search is :class:`~slimkit.engines.nas.EvolutionSearchLoop` under a parameter or FLOPs budget.
"""

from __future__ import annotations

from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.nas.spos import SPOS


@register_module()
class Autoformer(SPOS):
    """A random subnet per training step over a weight-entangled supernet (``architecture``, ``mutator``)."""
