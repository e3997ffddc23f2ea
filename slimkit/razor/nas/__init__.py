"""One-shot NAS: mutables, dynamic layers, the mutator, SPOS, evolution search, subnet export.

The engines live in :mod:`slimkit.compression.nas` (so smash algorithms use them too); this face adds ``SPOS``,
``SearchableCNN``, MMRazor's search spaces (``SearchableShuffleNetV2``, ``SearchableMobileNetV2`` and their
candidate blocks) and ``sub_model``, and re-exports the rest.

>>> spos = build(dict(type="SPOS", architecture=dict(type="SearchableCNN")))
>>> fit(spos, batches, loss=batch_loss, epochs=5)                  # one random path per step
>>> loop = EvolutionSearchLoop(spos, score_fn, example_inputs=x[:1], constraints_range=dict(flops=0.2))
>>> result = loop.run()                                            # result.best_subnet: {name: {"chosen": ...}}
>>> small = save_subnet(spos, "subnet/")                           # plain nn.Module; load_subnet("subnet/")
"""

from slimkit.compression.nas import (
    METRICS,
    BaseMutable,
    DynamicBatchNorm2d,
    DynamicConv2d,
    DynamicLinear,
    EvolutionSearchLoop,
    MutableChannels,
    MutableSequential,
    NasMutator,
    OneShotMutableOP,
    SearchResult,
    calibrate_bn,
    export_subnet,
    load_subnet,
    measure_subnet,
    read_subnet,
    save_subnet,
    subnet_key,
    write_subnet,
)
from slimkit.razor.nas.spaces import (
    MBBlock,
    SearchableIdentity,
    SearchableMobileNetV2,
    SearchableShuffleNetV2,
    ShuffleBlock,
    ShuffleXception,
)
from slimkit.razor.nas.sub_model import sub_model
from slimkit.razor.nas.supernet import SPOS, SearchableCNN

__all__ = [
    "BaseMutable",
    "DynamicBatchNorm2d",
    "DynamicConv2d",
    "DynamicLinear",
    "EvolutionSearchLoop",
    "MBBlock",
    "METRICS",
    "MutableChannels",
    "MutableSequential",
    "NasMutator",
    "OneShotMutableOP",
    "SPOS",
    "SearchResult",
    "SearchableCNN",
    "SearchableIdentity",
    "SearchableMobileNetV2",
    "SearchableShuffleNetV2",
    "ShuffleBlock",
    "ShuffleXception",
    "calibrate_bn",
    "export_subnet",
    "load_subnet",
    "measure_subnet",
    "read_subnet",
    "save_subnet",
    "sub_model",
    "subnet_key",
    "write_subnet",
]
