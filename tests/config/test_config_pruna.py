"""Pruna's names on slimkit's SmashConfig: aliases (one registry), renamed hyperparameters, add(), cfg["device"]."""

from __future__ import annotations

import pytest

from slimkit import PrunaDataModule, PrunaModel, SmashConfig, SmashedModel
from slimkit.core import registry
from slimkit.errors import AlgorithmNotFoundError, ConfigError


@pytest.mark.parametrize(("pruna", "slimkit_name"), [
    ("torch_structured", "l2_filter"), ("torch_unstructured", "level"), ("torch_dynamic", "int8_dynamic"),
    ("deepcache", "step_cache"), ("text_to_text_lora", "finetune"), ("hqq", "hqq"), ("half", "half"),
    ("torch_compile", "torch_compile"), ("llama_cpp", "llama_cpp"), ("gptq", "gptq"), ("awq", "awq"),
])
def test_pruna_algorithm_names_are_registry_aliases(pruna, slimkit_name):
    assert registry.resolve(pruna) == slimkit_name
    cfg = SmashConfig([pruna])
    assert cfg.get_active_algorithms() == [slimkit_name]


def test_pruna_hyperparameter_names():
    cfg = SmashConfig({"hqq": {"weight_bits": 4, "compute_dtype": "torch.bfloat16"},
                       "torch_compile": {"fullgraph": True, "dynamic": True, "mode": "max-autotune"}}, device="cpu")
    assert cfg["hqq_bits"] == 4 and cfg["hqq_weight_bits"] == 4 and cfg["hqq_compute_dtype"] == "torch.bfloat16"
    assert cfg.to_dict()["hyperparameters"]["torch_compile_mode"] == "max-autotune"
    for name in ("rtn", "gptq", "awq", "qat", "lsq", "dorefa"):
        assert SmashConfig({name: {"weight_bits": 8}})[f"{name}_bits"] == 8
    with pytest.raises(ConfigError, match=r"Invalid value 5 for 'hqq_weight_bits': allowed is one of 2, 3, 4, 8"):
        SmashConfig({"hqq": {"weight_bits": 5}})
    with pytest.raises(ConfigError, match=r"'torch\.float64' for 'hqq_compute_dtype'.*'torch\.bfloat16'"):
        SmashConfig({"hqq": {"compute_dtype": "torch.float64"}})


def test_text_to_text_lora_means_finetune_with_lora():
    cfg = SmashConfig(["text_to_text_lora"])
    assert cfg["recoverer"] == "finetune" and cfg["finetune_lora_rank"] == 8
    cfg["text_to_text_lora_lora_r"] = 16
    cfg["text_to_text_lora_learning_rate"] = 1e-4
    cfg["text_to_text_lora_training_batch_size"] = 4
    assert (cfg["finetune_lora_rank"], cfg["finetune_lr"], cfg["finetune_batch_size"]) == (16, 1e-4, 4)
    plain = SmashConfig(["finetune"])
    assert plain["finetune_lora_rank"] == 0  # the canonical name keeps its own default
    chosen = SmashConfig()
    chosen["finetune_lora_rank"] = 2
    chosen["recoverer"] = "text_to_text_lora"
    assert chosen["finetune_lora_rank"] == 2  # a value the user set is kept
    again = SmashConfig.from_dict(cfg.to_dict())
    assert again["finetune_lora_rank"] == 16 and again == cfg


def test_add_and_device_item():
    cfg = SmashConfig()
    cfg.add("hqq")
    cfg.add(["torch_compile"])
    cfg.add({"torch_compile_mode": "max-autotune"})
    cfg.add({"level": {"sparsity": 0.3}})
    cfg.add("half", {"dtype": "bfloat16"})
    assert cfg.get_active_algorithms() == ["level", "half", "torch_compile"]
    assert cfg["torch_compile_mode"] == "max-autotune" and cfg["level_sparsity"] == 0.3
    assert cfg["quantizer"] == "half" and cfg["half_dtype"] == "bfloat16"  # one quantizer: half replaced hqq
    cfg["device"] = "cpu"
    assert cfg["device"] == "cpu" == cfg.device
    with pytest.raises(ConfigError, match=r"Unknown device 'tpu'"):
        cfg["device"] = "tpu"
    with pytest.raises(ConfigError, match=r"add\(name, hyperparameters\): give one algorithm name"):
        cfg.add(["hqq"], {"weight_bits": 4})
    with pytest.raises(ConfigError, match=r"add\(\) takes an algorithm name, a list of names or a dict; got int"):
        cfg.add(3)


@pytest.mark.parametrize(("pruna", "closest"), [
    ("hqq_diffusers", "hqq"), ("llm_int8", "int8_dynamic"),
    ("ifw", "dynamic_batch"), ("stable_fast", "torch_compile"), ("fora", "step_cache"),
    ("text_to_image_perp", "finetune"),
])
def test_pruna_algorithms_slimkit_lacks_name_the_closest(pruna, closest):
    with pytest.raises(AlgorithmNotFoundError, match=rf"slimkit has no '{pruna}' \(another tool's algorithm\); "
                                                     rf"the closest here is '{closest}'"):
        SmashConfig([pruna])


def test_pruna_model_and_data_module_names(tmp_path):
    assert PrunaModel is SmashedModel
    data = PrunaDataModule.from_string("Digits", dataloader_args={"batch_size": 16})
    x, y = next(iter(data.train_dataloader()))
    assert x.shape[0] == 16 and y.shape == (16,)
    assert next(iter(data.test_dataloader(batch_size=4)))[0].shape[0] == 4  # an explicit argument wins
    own = PrunaDataModule(train_ds=data.train, val_ds=data.val, test_ds=data.test,
                          collate_fn="image_classification_collate", dataloader_args={"batch_size": 5})
    assert next(iter(own.val_dataloader()))[0].shape[0] == 5
    with pytest.raises(Exception, match=r"dataloader_args must be a dict"):
        PrunaDataModule.from_string("Digits", dataloader_args=[16])
