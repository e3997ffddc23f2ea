"""THE registry: every name from every face resolves through one table to one class."""

from __future__ import annotations

import pytest

from slimkit import SmashConfig
from slimkit.core import registry
from slimkit.core.contract import GROUPS, KIND_OF_GROUP
from slimkit.engines.pruning import Pruner
from slimkit.engines.quantization import Quantizer
from slimkit.errors import AlgorithmNotFoundError, ConfigError
from slimkit.experiment import available_compressors, get_compressor_spec

#: The NNI / Auptimizer names users type, and what they must mean.
NNI_NAMES = {
    "L1FilterPruner": "l1_filter",
    "L2FilterPruner": "l2_filter",
    "FPGMPruner": "fpgm",
    "LevelPruner": "level",
    "SlimPruner": "slim",
    "AGPPruner": "agp",
    "ActivationAPoZRankFilterPruner": "activation_apoz_rank",
    "ActivationMeanRankFilterPruner": "activation_mean_rank",
    "TaylorFOWeightFilterPruner": "taylor_fo_weight",
    "QATQuantizer": "qat",
    "LsqQuantizer": "lsq",
    "DoReFaQuantizer": "dorefa",
    "BNNQuantizer": "bnn",
    "apoz": "activation_apoz_rank",
    "mean_activation": "activation_mean_rank",
    "taylorfo": "taylor_fo_weight",
    "l1": "l1_filter",
    "l2": "l2_filter",
    # NNI 2.x, Auptimizer's and Pruna's spellings (issue 24)
    "L1NormPruner": "l1_filter",
    "L2NormPruner": "l2_filter",
    "TaylorFOWeightPruner": "taylor_fo_weight",
    "ActivationAPoZRankPruner": "activation_apoz_rank",
    "ActivationMeanRankPruner": "activation_mean_rank",
    "QAT_Quantizer": "qat",
    "NaiveQuantizer": "naive",
    "activation_apoz_rank_filter": "activation_apoz_rank",
    "activation_mean_rank_filter": "activation_mean_rank",
    "taylor_fo_weight_filter": "taylor_fo_weight",
    "torch_structured": "l2_filter",
    "torch_dynamic": "int8_dynamic",
}


#: Every alias -> algorithm, as before the engines were renamed (LevelPruner -> LevelEngine...): the aliases are the
#: NNI, Auptimizer, MMRazor and Pruna spellings, never an engine's class name.
ALIAS_TABLE = {
    "ADMMPruner": "admm", "AGPPruner": "agp", "AMCPruner": "amc",
    "ActivationAPoZRankFilterPruner": "activation_apoz_rank", "ActivationAPoZRankPruner": "activation_apoz_rank",
    "ActivationMeanRankFilterPruner": "activation_mean_rank", "ActivationMeanRankPruner": "activation_mean_rank",
    "AutoCompressPruner": "auto_compress", "BNNQuantizer": "bnn", "ChannelEnergyPruner": "channel_energy",
    "DoReFaQuantizer": "dorefa", "FPGMPruner": "fpgm", "KDRecover": "kd_recover", "L1FilterPruner": "l1_filter",
    "L1NormPruner": "l1_filter", "L2FilterPruner": "l2_filter", "L2NormPruner": "l2_filter", "LayerDrop": "layer_drop",
    "LevelPruner": "level", "LotteryTicketPruner": "lottery_ticket", "LsqQuantizer": "lsq",
    "MovementPruner": "movement", "NaiveQuantizer": "naive", "NetAdaptPruner": "net_adapt", "QATQuantizer": "qat",
    "QAT_Quantizer": "qat", "SensitivityPruner": "sensitivity", "SimulatedAnnealingPruner": "simulated_annealing",
    "SlimPruner": "slim", "SparseGPTModifier": "sparsegpt", "SparseGptCompressor": "sparsegpt",
    "SposSearch": "spos_search", "TaylorFOWeightFilterPruner": "taylor_fo_weight", "WandaPruningModifier": "wanda",
    "TaylorFOWeightPruner": "taylor_fo_weight", "WidthDistill": "width_distill",
    "activation_apoz_rank_filter": "activation_apoz_rank", "activation_mean_rank_filter": "activation_mean_rank",
    "apoz": "activation_apoz_rank", "deepcache": "step_cache", "energy": "channel_energy", "fine_tune": "finetune",
    "l1": "l1_filter", "l2": "l2_filter", "mean_activation": "activation_mean_rank", "one_shot_nas": "spos_search",
    "taylor_fo_weight_filter": "taylor_fo_weight", "taylorfo": "taylor_fo_weight", "text_to_text_lora": "finetune",
    "torch_dynamic": "int8_dynamic", "torch_structured": "l2_filter", "torch_unstructured": "level",
}
#: The algorithms whose engines were renamed, and their aliases in the order `slimkit algorithms` lists them.
RENAMED = {
    "admm": ["ADMMPruner"], "agp": ["AGPPruner"], "amc": ["AMCPruner"], "auto_compress": ["AutoCompressPruner"],
    "fpgm": ["FPGMPruner"], "level": ["torch_unstructured", "LevelPruner"], "lottery_ticket": ["LotteryTicketPruner"],
    "movement": ["MovementPruner"], "simulated_annealing": ["SimulatedAnnealingPruner"], "slim": ["SlimPruner"],
}


def test_aliases_are_the_other_tools_spellings_not_engine_class_names():
    assert registry.aliases() == ALIAS_TABLE
    for name, expected in RENAMED.items():
        info = registry.info(name)
        assert info["aliases"] == expected, name
        engine = info["engine"].rpartition(".")[2]
        assert engine == expected[-1].replace("Pruner", "Engine") and engine not in registry.all_names()
    with pytest.raises(ConfigError, match=r"Unknown algorithm 'LevelEngine'\. Did you mean 'LevelPruner'"):
        SmashConfig(["LevelEngine"])
    with pytest.raises(ConfigError, match=r"Unknown compressor 'ADMMEngine'"):
        get_compressor_spec("ADMMEngine", "pruning")


@pytest.mark.parametrize(("alias", "canonical"), [("deepcache", "step_cache"), ("text_to_text_lora", "finetune")])
def test_pruna_names_outside_compression_resolve_too(alias, canonical):
    assert registry.resolve(alias) == canonical and SmashConfig([alias]).get_active_algorithms() == [canonical]


def test_near_names_are_errors_that_name_the_closest_algorithm():
    with pytest.raises(AlgorithmNotFoundError, match=r"slimkit has no 'hqq_diffusers' \(another tool's algorithm\); "
                                                     r"the closest here is 'hqq': Half-Quadratic"):
        registry.get("hqq_diffusers")
    assert "hqq_diffusers" not in registry.all_names()


@pytest.mark.parametrize(("alias", "canonical"), sorted(NNI_NAMES.items()))
def test_nni_and_short_names_resolve_to_one_algorithm(alias, canonical):
    cls = registry.get(alias)
    assert cls is registry.get(canonical) and cls.algorithm_name == canonical
    assert get_compressor_spec(alias).algorithm is cls  # the experiment face
    cfg = SmashConfig([alias])  # the SmashConfig face stores the canonical name
    assert cfg[cls.group] == canonical and cfg.get_active_algorithms() == [canonical]


def test_every_name_on_every_face_is_the_same_class():
    for name in registry.all_names():
        cls = registry.get(name)
        assert registry.get(cls.algorithm_name) is cls
        assert SmashConfig([name])[cls.group] == cls.algorithm_name
        if cls.kind() in ("pruning", "quantization"):
            spec = get_compressor_spec(name, cls.kind())
            assert spec.algorithm is cls and spec.name == cls.algorithm_name
        if cls.engine is not None:  # the NNI face: the engine's NNI name is an alias of the same algorithm
            assert registry.get(registry.engine_name(cls.engine)) is cls
            assert issubclass(cls.engine, Pruner if cls.kind() == "pruning" else Quantizer)


def test_engines_are_registered_once():
    engines = [registry.get(n).engine for n in registry.names() if registry.get(n).engine is not None]
    assert len(engines) == len(set(engines)) >= 13


def test_kinds_follow_groups_and_experiments_see_both_families():
    assert tuple(KIND_OF_GROUP) == GROUPS
    listed = available_compressors()
    assert {"l1_filter", "agp", "qat", "lsq", "rtn", "gptq", "int8_dynamic"} <= set(listed)
    assert listed["qat"] == "quantization" and listed["l1_filter"] == "pruning"
    assert set(available_compressors("quantization").values()) == {"quantization"}
    assert "onnxruntime" not in listed  # a compiler is not a compression job


def test_unknown_names_list_close_matches_from_the_one_table():
    with pytest.raises(AlgorithmNotFoundError, match=r"Unknown algorithm 'L1FilterPrunr'\. Did you mean "
                                                     r"'L1FilterPruner'"):
        registry.get("L1FilterPrunr")
    with pytest.raises(ConfigError, match=r"Unknown algorithm 'apozz'\. Did you mean 'apoz'"):
        SmashConfig(["apozz"])
    with pytest.raises(ConfigError, match=r"Unknown compressor 'qatt'.*Valid names \(closest first\): qat"):
        get_compressor_spec("qatt", "quantization")


def test_alias_prefixed_hyperparameters_are_the_algorithms_own():
    cfg = SmashConfig()
    cfg["pruner"] = "apoz"
    cfg["apoz_sparsity"] = 0.3
    assert cfg["activation_apoz_rank_sparsity"] == 0.3
    assert cfg.to_dict()["hyperparameters"]["activation_apoz_rank_sparsity"] == 0.3
    assert SmashConfig.from_dict(cfg.to_dict()) == cfg


def test_info_reports_aliases_engine_and_kind():
    info = registry.info("L1FilterPruner")
    assert info["name"] == "l1_filter" and info["kind"] == "pruning"
    assert "L1FilterPruner" in info["aliases"] and info["engine"].endswith(".L1FilterPruner")
