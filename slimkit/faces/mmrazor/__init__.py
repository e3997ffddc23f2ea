"""The MMRazor-shaped face: ``BaseAlgorithm``, ``register_module()``, ``build(dict(type=...))``, configs.

>>> algo = build(dict(type="SingleTeacherDistill", architecture=student, teacher=teacher, distiller=dict(...)))
>>> losses = algo(x, y, mode="loss")   # {"student.loss": ..., "distill.loss_kl": ...}

The builder reads the one registry's component table (:mod:`slimkit.core.registry`): distillation losses,
recorders and connectors from :mod:`slimkit.training.distill`, ``ZooModel`` architectures, and the algorithms
here. One-shot NAS: the engines of :mod:`slimkit.engines.nas` (mutables, ``EvolutionSearchLoop``, subnet
export) and MMRazor's ``SPOS`` and search spaces (:mod:`slimkit.faces.mmrazor.nas`).
Configs load from dicts, JSON or YAML with ``_base_`` inheritance (:func:`load_config`).
"""

from slimkit.engines.nas import (
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
    read_subnet,
    save_subnet,
    write_subnet,
)
from slimkit.faces.mmrazor.base import MODES, BaseAlgorithm, batch_loss, task_loss
from slimkit.faces.mmrazor.builder import build, build_module, register_module, zoo_model
from slimkit.faces.mmrazor.config import ConfigDict, SkippedBase, load_config, merge_configs, skipped_bases
from slimkit.faces.mmrazor.datafree import DAFLDataFreeDistillation, DataFreeDistillation, separate_optimizers
from slimkit.faces.mmrazor.distill import SingleTeacherDistill
from slimkit.faces.mmrazor.distill_variants import FpnTeacherDistill, OverhaulFeatureDistillation
from slimkit.faces.mmrazor.nas import (
    DSNAS,
    SPOS,
    AttentiveMobileNetV3,
    Autoformer,
    AutoformerBackbone,
    AutoSlim,
    BigNAS,
    Darts,
    DartsBackbone,
    MBBlock,
    SearchableCNN,
    SearchableImageClassifier,
    SearchableMobileNetV2,
    SearchableShuffleNetV2,
    ShuffleBlock,
    ShuffleXception,
    sub_model,
)
from slimkit.faces.mmrazor.preprocess import ImgDataPreprocessor
from slimkit.faces.mmrazor.pruning import (
    DCFF,
    DMCP,
    ChannelMutator,
    DCFFChannelMutator,
    DMCPChannelMutator,
    GroupFisherAlgorithm,
    GroupFisherChannelMutator,
    ItePruneAlgorithm,
    OneShotChannelMutator,
    SlimmableChannelMutator,
    SlimmableNetwork,
)
from slimkit.faces.mmrazor.quantization import MMArchitectureQuant
from slimkit.faces.mmrazor.self_distill import SelfDistill

__all__ = [
    "AttentiveMobileNetV3",
    "AutoSlim",
    "Autoformer",
    "AutoformerBackbone",
    "BaseAlgorithm",
    "BigNAS",
    "ChannelMutator",
    "ConfigDict",
    "DAFLDataFreeDistillation",
    "DCFF",
    "DCFFChannelMutator",
    "DMCP",
    "DMCPChannelMutator",
    "DSNAS",
    "Darts",
    "DartsBackbone",
    "DataFreeDistillation",
    "DynamicBatchNorm2d",
    "DynamicConv2d",
    "DynamicLinear",
    "EvolutionSearchLoop",
    "FpnTeacherDistill",
    "GroupFisherAlgorithm",
    "GroupFisherChannelMutator",
    "ImgDataPreprocessor",
    "ItePruneAlgorithm",
    "MBBlock",
    "MMArchitectureQuant",
    "MODES",
    "MutableChannels",
    "MutableSequential",
    "NasMutator",
    "OneShotChannelMutator",
    "OneShotMutableOP",
    "OverhaulFeatureDistillation",
    "SPOS",
    "SearchResult",
    "SearchableCNN",
    "SearchableImageClassifier",
    "SearchableMobileNetV2",
    "SearchableShuffleNetV2",
    "SelfDistill",
    "ShuffleBlock",
    "ShuffleXception",
    "SingleTeacherDistill",
    "SkippedBase",
    "SlimmableChannelMutator",
    "SlimmableNetwork",
    "batch_loss",
    "build",
    "build_module",
    "calibrate_bn",
    "export_subnet",
    "load_config",
    "load_subnet",
    "merge_configs",
    "read_subnet",
    "register_module",
    "save_subnet",
    "separate_optimizers",
    "skipped_bases",
    "sub_model",
    "task_loss",
    "write_subnet",
    "zoo_model",
]
