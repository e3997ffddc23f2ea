"""NAS in MMRazor's terms: ``SPOS``, ``AutoSlim``, ``BigNAS``, ``Darts``, ``DSNAS``, search spaces, ``sub_model``.

The search spaces: ``SearchableCNN`` and MMRazor's ShuffleNetV2, MobileNetV2, DARTS cells (``DartsBackbone``) and
BigNAS / once-for-all MobileNetV3 (``AttentiveMobileNetV3`` in a ``SearchableImageClassifier``), buildable from
its configs.

The engines (mutables, dynamic layers, the mutator, evolution search, subnet export) live in
:mod:`slimkit.engines.nas`, where smash algorithms use them too; :mod:`slimkit.faces.mmrazor` re-exports them.

>>> spos = build(dict(type="SPOS", architecture=dict(type="SearchableCNN")))
>>> fit(spos, batches, loss=batch_loss, epochs=5)                  # one random path per step
>>> loop = EvolutionSearchLoop(spos, score_fn, example_inputs=x[:1], constraints_range=dict(flops=0.2))
>>> result = loop.run()                                            # result.best_subnet: {name: {"chosen": ...}}
>>> small = save_subnet(spos, "subnet/")                           # plain nn.Module; load_subnet("subnet/")
"""

from slimkit.faces.mmrazor.nas.attentive_mobilenet import AttentiveMobileNetV3
from slimkit.faces.mmrazor.nas.autoformer import Autoformer
from slimkit.faces.mmrazor.nas.autoformer_space import AutoformerBackbone
from slimkit.faces.mmrazor.nas.autoslim import AutoSlim
from slimkit.faces.mmrazor.nas.bignas import BigNAS
from slimkit.faces.mmrazor.nas.classifier import (
    DynamicLinearClsHead,
    GlobalAveragePooling,
    LabelSmoothLoss,
    SearchableImageClassifier,
    SqueezeMeanPoolingWithDropout,
)
from slimkit.faces.mmrazor.nas.darts import Darts
from slimkit.faces.mmrazor.nas.darts_space import DartsBackbone
from slimkit.faces.mmrazor.nas.dsnas import DSNAS
from slimkit.faces.mmrazor.nas.elastic_ops import MutableValue
from slimkit.faces.mmrazor.nas.mobilenet import MBBlock, SearchableIdentity, SearchableMobileNetV2
from slimkit.faces.mmrazor.nas.searchable_cnn import SearchableCNN
from slimkit.faces.mmrazor.nas.shufflenet import SearchableShuffleNetV2, ShuffleBlock, ShuffleXception
from slimkit.faces.mmrazor.nas.spos import SPOS
from slimkit.faces.mmrazor.nas.sub_model import sub_model

__all__ = [
    "AttentiveMobileNetV3",
    "AutoSlim",
    "Autoformer",
    "AutoformerBackbone",
    "BigNAS",
    "DSNAS",
    "Darts",
    "DartsBackbone",
    "DynamicLinearClsHead",
    "GlobalAveragePooling",
    "LabelSmoothLoss",
    "MBBlock",
    "MutableValue",
    "SPOS",
    "SearchableCNN",
    "SearchableIdentity",
    "SearchableImageClassifier",
    "SearchableMobileNetV2",
    "SearchableShuffleNetV2",
    "ShuffleBlock",
    "ShuffleXception",
    "SqueezeMeanPoolingWithDropout",
    "sub_model",
]
