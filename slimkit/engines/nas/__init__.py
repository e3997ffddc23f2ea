"""NAS engines: mutables, dynamic layers, the mutator, evolution and greedy search, constraints, subnet export.

Mutables are one-shot (one candidate runs) or differentiable (:class:`DiffMutableOP` and the DARTS cell's
:class:`DiffChoiceRoute`).

The razor face (:mod:`slimkit.razor.nas`) re-exports these beside ``SPOS`` and ``SearchableCNN``; the smash
algorithm ``spos_search`` builds a supernet from a plain CNN (:func:`make_searchable`) and uses the same
loop and export.
"""

from slimkit.engines.nas.constraints import METRICS, calibrate_bn, measure_subnet
from slimkit.engines.nas.diff_mutable import ArchLogits, DiffMutableOP, OneHotMutableOP
from slimkit.engines.nas.diff_route import ChosenEdges, DiffChoiceRoute
from slimkit.engines.nas.dynamic_ops import DynamicBatchNorm2d, DynamicConv2d, DynamicLinear
from slimkit.engines.nas.export import export_subnet, load_subnet, read_subnet, save_subnet, write_subnet
from slimkit.engines.nas.greedy import GreedyChannelSearch, GreedySubnet
from slimkit.engines.nas.mutables import BaseMutable, MutableChannels, MutableSequential, OneShotMutableOP
from slimkit.engines.nas.mutator import NasMutator, subnet_key
from slimkit.engines.nas.search import EvolutionSearchLoop, SearchResult
from slimkit.engines.nas.searchable import ChannelSupernet, make_searchable

__all__ = [
    "ArchLogits",
    "BaseMutable",
    "ChannelSupernet",
    "ChosenEdges",
    "DiffChoiceRoute",
    "DiffMutableOP",
    "DynamicBatchNorm2d",
    "DynamicConv2d",
    "DynamicLinear",
    "EvolutionSearchLoop",
    "GreedyChannelSearch",
    "GreedySubnet",
    "METRICS",
    "MutableChannels",
    "MutableSequential",
    "NasMutator",
    "OneHotMutableOP",
    "OneShotMutableOP",
    "SearchResult",
    "calibrate_bn",
    "export_subnet",
    "load_subnet",
    "make_searchable",
    "measure_subnet",
    "read_subnet",
    "save_subnet",
    "subnet_key",
    "write_subnet",
]
