"""NAS in MMRazor's terms: ``SPOS``, ``AutoSlim``, ``BigNAS``, ``Darts``, ``DSNAS``, search spaces, ``sub_model``.

The search spaces: ``SearchableCNN`` and MMRazor's ShuffleNetV2, MobileNetV2 and DARTS cells (``DartsBackbone``),
buildable from its configs.

The engines (mutables, dynamic layers, the mutator, evolution search, subnet export) live in
:mod:`slimkit.engines.nas`, where smash algorithms use them too; :mod:`slimkit.faces.mmrazor` re-exports them.

>>> spos = build(dict(type="SPOS", architecture=dict(type="SearchableCNN")))
>>> fit(spos, batches, loss=batch_loss, epochs=5)                  # one random path per step
>>> loop = EvolutionSearchLoop(spos, score_fn, example_inputs=x[:1], constraints_range=dict(flops=0.2))
>>> result = loop.run()                                            # result.best_subnet: {name: {"chosen": ...}}
>>> small = save_subnet(spos, "subnet/")                           # plain nn.Module; load_subnet("subnet/")
"""

from slimkit.faces.mmrazor.nas.autoformer import Autoformer
from slimkit.faces.mmrazor.nas.autoformer_space import AutoformerBackbone
from slimkit.faces.mmrazor.nas.autoslim import AutoSlim
from slimkit.faces.mmrazor.nas.bignas import BigNAS
from slimkit.faces.mmrazor.nas.darts import Darts
from slimkit.faces.mmrazor.nas.darts_space import DartsBackbone
from slimkit.faces.mmrazor.nas.dsnas import DSNAS
from slimkit.faces.mmrazor.nas.mobilenet import MBBlock, SearchableIdentity, SearchableMobileNetV2
from slimkit.faces.mmrazor.nas.searchable_cnn import SearchableCNN
from slimkit.faces.mmrazor.nas.shufflenet import SearchableShuffleNetV2, ShuffleBlock, ShuffleXception
from slimkit.faces.mmrazor.nas.spos import SPOS
from slimkit.faces.mmrazor.nas.sub_model import sub_model

__all__ = [
    "AutoSlim",
    "Autoformer",
    "AutoformerBackbone",
    "BigNAS",
    "DSNAS",
    "Darts",
    "DartsBackbone",
    "MBBlock",
    "SPOS",
    "SearchableCNN",
    "SearchableIdentity",
    "SearchableMobileNetV2",
    "SearchableShuffleNetV2",
    "ShuffleBlock",
    "ShuffleXception",
    "sub_model",
]
