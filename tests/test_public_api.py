"""Each face's public names are pinned: adding or dropping one is a deliberate change made here too."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "slimkit.engines.gguf": ["BLOCK", "DTYPES", "FAMILIES", "Family", "LlamaCppModule", "PACKED", "Packed",
                                 "architecture", "block_type", "export_gguf", "open_llama", "pack_blocks",
                                 "supported_names"],
    "slimkit.engines.pruning": [
        "ADMMEngine", "AGPEngine", "AMCEngine", "ActivationAPoZRankFilterPruner",
        "ActivationAPoZRankFilterPrunerMasker",
        "ActivationMeanRankFilterPruner", "ActivationMeanRankFilterPrunerMasker", "AllocationPruner",
        "AttentionHeadMasker", "AttentionHeadPruner", "AutoCompressEngine", "ChannelCoupling", "ChannelEnergyPruner",
        "ChannelEnergyPrunerMasker", "ChannelGroupPlan", "ChannelMacs", "DDPGAgent", "DependencyAwarePruner",
        "FPGMEngine", "FPGMPrunerMasker", "GroupFilterPruner", "GroupL1FilterPruner", "GroupL2FilterPruner",
        "HeadLayout", "L1FilterPruner", "L1FilterPrunerMasker", "L2FilterPruner", "L2FilterPrunerMasker",
        "LevelEngine", "LevelPrunerMasker", "LotteryTicketEngine", "MovementEngine", "NetAdaptPruner", "Pruner",
        "PrunerModuleWrapper", "PruningConfigError", "SensitivityPruner", "SimulatedAnnealingEngine", "SlimEngine",
        "SlimPrunerMasker", "StructuredWeightMasker", "TaylorFOWeightFilterPruner",
        "TaylorFOWeightFilterPrunerMasker", "WeightMasker", "agp_sparsity", "find_head_layout",
        "format_sensitivity_table", "load_masks", "load_state_dict_file", "num_to_prune", "plot_sensitivity",
        "resolve_config_list", "save_masks", "sensitivity_analysis"
    ],
    "slimkit.engines.nas": [
        "ArchLogits", "BaseMutable", "ChannelSupernet", "ChosenEdges", "DiffChoiceRoute", "DiffMutableOP",
        "DynamicBatchNorm2d", "DynamicConv2d", "DynamicLinear",
        "EvolutionSearchLoop", "GreedyChannelSearch", "GreedySubnet", "METRICS", "MutableChannels",
        "MutableSequential", "NasMutator", "OneHotMutableOP", "OneShotMutableOP", "SearchResult", "calibrate_bn",
        "export_subnet", "load_subnet", "make_searchable", "measure_subnet", "read_subnet", "save_subnet",
        "subnet_key", "write_subnet"
    ],
    "slimkit.engines.quantization": [
        "BNNEngine", "BNNGrad", "ClipGrad", "DoReFaEngine", "Int8Linear", "LsqEngine", "LsqPlusEngine",
        "NaiveQuantizer", "ObserverQuantizer", "QATEngine", "QuantGrad", "QuantType", "QuantizationConfigError",
        "QuantizedLayer",
        "Quantizer",
        "QuantizerModuleWrapper", "affine_qparams", "dequantize", "fake_quantize", "grad_scale", "load_calibration",
        "quantize_codes", "quantized_layer_specs", "rebuild_quantized_layers", "resolve_quant_config_list",
        "round_ste", "set_quant_scheme_dtype"
    ],
    "slimkit.engines.speedup": [
        "ChannelGraph", "ChannelGroups", "KeptChannels", "ModelSpeedup", "SpeedupError", "SpeedupWarning",
        "UnsupportedOpError", "apply_kept_channels", "channel_dependency_report", "trace_channels"
    ],
    "slimkit.data": [
        "COLLATE_FUNCTIONS", "DataModule", "DictDataset", "LABEL_KEYS", "audio_processing_collate",
        "image_classification_collate", "image_generation_collate", "list_datasets", "make_datamodule", "move_batch",
        "pydoc_split_topics", "pydoc_text_blocks", "question_answering_collate", "split_batch",
        "split_train_into_train_val_test", "text_generation_collate"
    ],
    "slimkit.training": [
        "BatchLoss", "Criterion", "EarlyStopping", "EpochCallback", "EvalFn", "FitResult", "LABEL_KEYS", "MODES",
        "OPTIMIZERS", "StepCallback", "criterion_loss", "cross_entropy", "default_loss", "fit", "make_optimizer",
        "model_loss", "move_batch", "split_batch"
    ],
    "slimkit": ["BasicConfig", "PrunaDataModule", "PrunaModel", "SmashConfig", "SmashConfigPrefixWrapper",
                "SmashedModel", "__version__", "aup_args", "aup_save_model", "compression", "create_compressor",
                "print_result", "smash", "smash_folder", "trace"],
    "slimkit.faces.nni.v1": ["ADMMPruner", "AGPPruner", "AMCPruner", "AutoCompressPruner", "FPGMPruner", "LevelPruner",
                             "LotteryTicketPruner", "MovementPruner", "QAT_Quantizer", "SimulatedAnnealingPruner",
                             "SlimPruner"],
    "slimkit.faces.nni.v2": [
        "ADMMPruner", "AGPPruner", "AMCPruner", "ActivationAPoZRankPruner", "ActivationMeanRankPruner",
        "AutoCompressPruner", "FPGMPruner", "L1NormPruner", "L2NormPruner", "LevelPruner", "LinearPruner",
        "LotteryTicketPruner", "ModelSpeedup", "ModelSpeedupTensorRT", "MovementPruner", "PRUNER_DICT",
        "SimulatedAnnealingPruner", "SlimPruner", "TaylorFOWeightPruner", "V2Pruner",
        "canonical_config_list", "rebuild", "show_pruned_weights", "to_v1_masks", "trace", "v2_masks"
    ],
    "slimkit.core": ["GROUPS", "KIND_OF_GROUP", "SaveFn", "SlimkitAlgorithm", "SlimkitBatcher", "SlimkitCacher",
                     "SlimkitCompiler", "SlimkitDistiller", "SlimkitPruner", "SlimkitQuantizer", "SlimkitRecoverer",
                     "SmashConfigPrefixWrapper", "register", "registry"],
    "slimkit.config": ["SCHEMA_VERSION", "SmashConfig", "SmashConfigPrefixWrapper"],
    "slimkit.engine": ["SmashedModel", "StreamResult", "check_config", "smash", "smash_folder"],
    "slimkit.engine.stream": ["StreamResult", "estimate_in_memory_bytes", "should_stream", "smash_folder"],
    "slimkit.formats": ["CheckpointFormat", "FORMATS", "FORMAT_VERSION", "FormatError", "LayerKind", "ModelWriter",
                        "RUN_FILE", "SLIMKIT", "WEIGHTS_FILE", "WriteContext", "concat_safetensors", "export_format",
                        "export_names", "get_format", "layer_kind", "read_quantization_config", "symmetric_grid"],
    "slimkit.algorithms": ["GROUP_PACKAGES", "algorithm_modules"],
    "slimkit.experiment": ["CompressorSpec", "Experiment", "ExperimentResult", "ScriptResult",
                           "available_compressors", "get_compressor_spec", "load_experiment", "parse_result",
                           "report_experiment", "run_experiment"],
    "slimkit.faces.nni.v3": ["Evaluator", "LightningEvaluator", "OptimizerRelay", "TorchEvaluator",
                             "TransformersEvaluator", "V3_KEYS", "is_v3_config", "v2_config_from_v3"],
    "slimkit.faces.nni.v3.pruning": ["AGPPruner", "FPGMPruner", "L1NormPruner", "L2NormPruner", "LevelPruner",
                                     "LinearPruner", "MovementPruner", "SlimPruner", "TaylorPruner"],
    "slimkit.faces.nni.v3.quantization": ["BNNQuantizer", "DoReFaQuantizer", "LsqPlusQuantizer", "LsqQuantizer",
                                          "PtqQuantizer", "QATQuantizer"],
    "slimkit.faces.nni.v3.distillation": ["Adaptive1dLayerwiseDistiller", "DISTILL_V3_KEYS",
                                          "DynamicLayerwiseDistiller"],
    "slimkit.compression.pruning": ["AGPPruner", "FPGMPruner", "L1NormPruner", "L2NormPruner", "LevelPruner",
                                    "LinearPruner", "MovementPruner", "SlimPruner", "TaylorPruner"],
    "slimkit.compression.quantization": ["BNNQuantizer", "DoReFaQuantizer", "LsqPlusQuantizer", "LsqQuantizer",
                                         "PtqQuantizer", "QATQuantizer"],
    "slimkit.compression.distillation": ["Adaptive1dLayerwiseDistiller", "DISTILL_V3_KEYS",
                                         "DynamicLayerwiseDistiller"],
    "slimkit.compression.speedup": ["ModelSpeedup", "auto_set_denpendency_group_ids"],
    "slimkit.compression.utils": ["Evaluator", "LightningEvaluator", "TorchEvaluator", "TransformersEvaluator",
                                  "auto_set_denpendency_group_ids", "auto_set_dependency_group_ids"],
    "slimkit.compression.quantization_speedup": ["ModelSpeedupTensorRT"],
    "slimkit.compression.base.compressor": ["Quantizer"],
    "slimkit.faces.nni.v3.speedup": ["ModelSpeedup", "auto_set_denpendency_group_ids"],
    "slimkit.faces.nni.v3.utils": ["auto_set_denpendency_group_ids", "auto_set_dependency_group_ids",
                                   "slim_norm_config"],
    "slimkit.faces.pruna": ["EvaluationAgent", "PrunaDataModule", "PrunaModel", "Task"],
    "slimkit.faces.pruna.evaluation": ["EvaluationAgent", "EvaluationResults", "MetricRegistry", "MetricResult",
                                       "Task"],
    "slimkit.faces.pruna.evaluation.metrics": [
        "BaseMetric", "CMMD", "CO2EmissionsMetric", "DinoScore", "DiskMemoryMetric", "EnergyConsumedMetric",
        "EnvironmentalImpactStats", "EvaluationResults", "InferenceMemoryMetric", "InferenceTimeStats", "LatencyMetric",
        "MetricRegistry", "MetricResult", "ModelArchitectureStats", "SharedStats", "StatefulMetric", "ThroughputMetric",
        "TorchMetricWrapper", "TotalMACsMetric", "TotalParamsMetric", "TotalTimeMetric", "TrainingMemoryMetric"],
    "slimkit.faces.auptimizer": ["BasicConfig", "CompressionSettings", "Compressor", "aup_args", "aup_save_model",
                                 "create_compressor", "load_compressed_model", "parse_compression_config",
                                 "print_result", "read_kept_channels"],
    "slimkit.evaluation": ["Accuracy", "Comparison", "Fidelity", "Latency", "MetricRow", "accuracy", "compare",
                           "count_macs", "count_macs_by_dtype", "count_parameters", "fidelity", "measure_latency",
                           "measure_latency_pair", "peak_bytes", "peak_memory",
                           "perplexity", "plot_comparison", "set_threads", "size_on_disk", "training_peak_memory"],
    "slimkit.razor": [
        "AttentiveMobileNetV3", "AutoSlim", "Autoformer", "AutoformerBackbone", "BaseAlgorithm", "BigNAS",
        "ChannelMutator", "ConfigDict",
        "DAFLDataFreeDistillation", "DCFF", "DCFFChannelMutator", "DMCP", "DMCPChannelMutator", "DSNAS", "Darts",
        "DartsBackbone", "DataFreeDistillation", "DynamicBatchNorm2d", "DynamicConv2d", "DynamicLinear",
        "EvolutionSearchLoop",
        "FpnTeacherDistill", "GroupFisherAlgorithm", "GroupFisherChannelMutator", "ImgDataPreprocessor",
        "ItePruneAlgorithm", "MBBlock", "MMArchitectureQuant", "MODES", "MutableChannels", "MutableSequential",
        "NasMutator", "OneShotChannelMutator", "OneShotMutableOP", "OverhaulFeatureDistillation", "SPOS",
        "SearchResult", "SearchableCNN", "SearchableImageClassifier", "SearchableMobileNetV2",
        "SearchableShuffleNetV2", "SelfDistill",
        "ShuffleBlock", "ShuffleXception", "SingleTeacherDistill", "SkippedBase", "SlimmableChannelMutator",
        "SlimmableNetwork", "batch_loss", "build", "build_module", "calibrate_bn", "export_subnet", "load_config",
        "load_subnet", "merge_configs", "read_subnet", "register_module", "save_subnet", "separate_optimizers",
        "skipped_bases", "sub_model", "task_loss", "write_subnet", "zoo_model"
    ],
    "slimkit.faces.mmrazor.nas": [
        "AttentiveMobileNetV3", "AutoSlim", "Autoformer", "AutoformerBackbone", "BigNAS", "DSNAS", "Darts",
        "DartsBackbone", "DynamicLinearClsHead", "GlobalAveragePooling", "LabelSmoothLoss", "MBBlock", "MutableValue",
        "SPOS", "SearchableCNN", "SearchableIdentity", "SearchableImageClassifier", "SearchableMobileNetV2",
        "SearchableShuffleNetV2", "ShuffleBlock", "ShuffleXception", "SqueezeMeanPoolingWithDropout", "sub_model"
    ],
    "slimkit.serve": ["Generator", "ModelRunner", "RequestError", "ServeMetrics", "ServedModel", "build_app", "serve"],
    "slimkit.training.distill": [
        "ABLoss", "ATLoss", "ActivationLoss", "AngleWiseRKD", "BYOTConnector", "BYOTDistiller", "BaseRecorder",
        "CRDConnector", "CRDLoss", "ChannelWiseDivergence", "ConfigurableDistiller", "Conv1x1Connector",
        "ConvModuleConnector", "CosineSimilarityLoss", "CrossEntropyLoss", "DAFLGenerator", "DISTLoss", "DKDLoss",
        "DistanceWiseRKD", "DistillLoss", "DistillObjective", "FBKDLoss", "FBKDStudentConnector",
        "FBKDTeacherConnector", "FTLoss", "FunctionInputsRecorder", "FunctionOutputsRecorder",
        "InformationEntropyLoss", "KDSoftCELoss", "KLDivergence", "L1Loss", "L2Loss", "LinearConnector",
        "MGDConnector", "MGDLoss", "MSELoss", "MethodInputsRecorder", "MethodOutputsRecorder",
        "ModuleInputsRecorder", "ModuleOutputsRecorder", "NormConnector", "OFDDistiller", "OFDLoss",
        "OFDTeacherConnector", "OnehotLikeLoss", "PKDLoss", "ParameterRecorder", "Paraphraser", "RecorderManager",
        "TorchFunctionalConnector", "TorchNNConnector", "Translator", "WSLD", "ZSKTGenerator", "connector_for",
        "forward_arguments", "frozen_teacher"
    ],
    "slimkit.zoo": ["ZooModel", "build", "cache_dir", "digits_split", "imagenet_preprocess", "load", "names",
                    "sentence_pairs"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names_are_pinned_sorted_and_importable(module):
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == sorted(PUBLIC[module]), f"{module}.__all__ changed: update tests/test_public_api.py"
    assert list(mod.__all__) == sorted(mod.__all__), f"{module}.__all__ is not sorted"
    for name in mod.__all__:
        assert getattr(mod, name) is not None
