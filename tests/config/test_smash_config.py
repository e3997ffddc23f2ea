from __future__ import annotations

import json

import pytest
import torch

from slimkit import SmashConfig
from slimkit.config import SCHEMA_VERSION
from slimkit.errors import AlgorithmNotFoundError, ConfigError


def test_group_keys_and_prefixed_hyperparameters():
    cfg = SmashConfig(device="cpu")
    cfg["pruner"] = "level"
    cfg["level_sparsity"] = 0.5
    cfg["quantizer"] = "int8_dynamic"
    assert cfg["pruner"] == "level"
    assert cfg["level_sparsity"] == 0.5
    assert cfg["int8_dynamic_per_channel"] is True  # default filled in
    assert cfg.get_active_algorithms() == ["level", "int8_dynamic"]  # stage order


def test_list_form_orders_by_stage_not_by_argument():
    cfg = SmashConfig(["torch_compile", "int8_dynamic", "level"], device="cpu")
    assert cfg.get_active_algorithms() == ["level", "int8_dynamic", "torch_compile"]


def test_dict_form_sets_hyperparameters():
    cfg = SmashConfig({"int8_dynamic": {"per_channel": False, "exclude": ["classifier"]}}, device="cpu")
    assert cfg["quantizer"] == "int8_dynamic"
    assert cfg["int8_dynamic_per_channel"] is False
    assert cfg["int8_dynamic_exclude"] == ("classifier",)


def test_prefix_wrapper_reads_unprefixed_names():
    cfg = SmashConfig({"level": {"sparsity": 0.25}}, device="cpu")
    wrapper = cfg.get_prefix_wrapper("level")
    assert wrapper["sparsity"] == 0.25 and wrapper["method"] == "l1"
    assert wrapper.device == "cpu"


def test_unset_group_is_none_and_can_be_cleared():
    cfg = SmashConfig(["half"], device="cpu")
    assert cfg["pruner"] is None
    cfg["quantizer"] = None
    assert cfg.get_active_algorithms() == []


def test_json_round_trip(tmp_path):
    cfg = SmashConfig({"level": {"sparsity": 0.4, "method": "random"}, "int8_dynamic": {}}, device="cpu")
    cfg.save_to_json(tmp_path)
    payload = json.loads((tmp_path / "smash_config.json").read_text())
    assert payload["schema_version"] == SCHEMA_VERSION
    assert payload["algorithms"] == {"pruner": "level", "quantizer": "int8_dynamic"}
    assert payload["hyperparameters"]["level_sparsity"] == 0.4
    again = SmashConfig.from_json(tmp_path)
    assert again == cfg
    other = SmashConfig()
    other.load_from_json(tmp_path / "smash_config.json")
    assert other == cfg


def test_json_with_tokenizer_round_trip(tmp_path, minilm_tokenizer):
    cfg = SmashConfig(["int8_dynamic"], device="cpu")
    cfg.add_tokenizer(minilm_tokenizer)
    cfg.save_to_json(tmp_path)
    again = SmashConfig.from_json(tmp_path)
    assert again.tokenizer("hello world")["input_ids"] == minilm_tokenizer("hello world")["input_ids"]


def test_unknown_schema_version_is_refused(tmp_path):
    (tmp_path / "smash_config.json").write_text(json.dumps({"schema_version": 99, "algorithms": {}}))
    with pytest.raises(ConfigError, match="schema_version 99 is not supported"):
        SmashConfig.from_json(tmp_path)


def test_truncated_json_names_the_file(tmp_path):
    (tmp_path / "smash_config.json").write_text('{"schema_version": 1, "algor')
    with pytest.raises(ConfigError, match="smash_config.json is not valid JSON"):
        SmashConfig.from_json(tmp_path)


@pytest.mark.parametrize(
    ("action", "error", "fragment"),
    [
        (lambda c: c.__setitem__("quantizer", "int8_dynamc"), AlgorithmNotFoundError,
         "Unknown algorithm 'int8_dynamc'. Did you mean 'int8_dynamic'"),
        (lambda c: c.__setitem__("quantizer", "level"), ConfigError,
         "'level' is a pruner, not a quantizer; set it with cfg['pruner']"),
        (lambda c: c.__setitem__("level_sparsity", 1.5), ConfigError,
         "Invalid value 1.5 for 'level_sparsity': allowed is a float in [0.0, 0.99]"),
        (lambda c: c.__setitem__("level_method", "l3"), ConfigError,
         "allowed is one of 'l1', 'random'"),
        (lambda c: c.__setitem__("int8_dynamic_per_channel", "yes"), ConfigError,
         "allowed is one of True, False"),
        (lambda c: c.__setitem__("level_seed", 1.5), ConfigError, "an integer in [0, 2147483647]"),
        (lambda c: c.__setitem__("int8_dynamic_exclude", [1, 2]), ConfigError, "a list of strings"),
        (lambda c: c.__setitem__("int8_dynamic_bits", 4), ConfigError,
         "Algorithm 'int8_dynamic' has no hyperparameter 'bits'"),
        (lambda c: c.__setitem__("sparsity", 0.5), ConfigError, "Unknown SmashConfig key 'sparsity'"),
        (lambda c: c.__getitem__("nonsense_key"), ConfigError, "Keys are a group"),
    ],
)
def test_bad_keys_and_values_get_clear_errors(action, error, fragment):
    cfg = SmashConfig(device="cpu")
    with pytest.raises(error) as info:
        action(cfg)
    assert fragment in str(info.value)


def test_unknown_algorithm_error_lists_valid_names():
    with pytest.raises(AlgorithmNotFoundError) as info:
        SmashConfig(["gptq9000"])
    assert "Valid algorithms:" in str(info.value) and "int8_dynamic" in str(info.value)


def test_bad_constructor_argument():
    with pytest.raises(ConfigError, match="pass a list of algorithm names"):
        SmashConfig(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="hyperparameters must be a dict"):
        SmashConfig({"int8_dynamic": True})  # type: ignore[dict-item]


def test_bad_device():
    with pytest.raises(ConfigError, match="Unknown device 'tpu'"):
        SmashConfig(device="tpu")


def test_add_tokenizer_from_unreachable_hub_id_is_clear():
    cfg = SmashConfig()
    with pytest.raises(ConfigError, match="A hub id needs network access"):
        cfg.add_tokenizer("surely-not/a-local-folder")


def test_add_data_builtin_id():
    cfg = SmashConfig(device="cpu")
    cfg.add_data("Digits")
    assert cfg.data.name == "Digits"
    x, y = next(iter(cfg.data.train_dataloader(batch_size=4)))
    assert x.shape == (4, 1, 8, 8) and y.shape == (4,)
    assert cfg.to_dict()["data"] == "Digits"


@pytest.mark.parametrize("inputs", [torch.randn(2, 3), (torch.randn(2, 3), torch.ones(2, dtype=torch.long)),
                                    {"input_ids": torch.arange(6).view(1, 6)}])
def test_example_inputs_round_trip_through_json(tmp_path, inputs):
    cfg = SmashConfig(["int8_dynamic"], device="cpu")
    cfg.add_example_inputs(inputs)
    cfg.save_to_json(tmp_path)
    back = SmashConfig.from_json(tmp_path).example_inputs
    if isinstance(inputs, torch.Tensor):
        assert torch.equal(back, inputs)
    elif isinstance(inputs, tuple):
        assert isinstance(back, tuple) and all(torch.equal(a, b) for a, b in zip(back, inputs, strict=True))
    else:
        assert back.keys() == inputs.keys() and torch.equal(back["input_ids"], inputs["input_ids"])


def test_example_inputs_must_be_tensors():
    with pytest.raises(ConfigError, match="add_example_inputs got str"):
        SmashConfig().add_example_inputs("hello")


def test_builtin_data_is_restored_from_json(tmp_path):
    cfg = SmashConfig(["int8_dynamic"], device="cpu")
    cfg.add_data("Digits")
    cfg.save_to_json(tmp_path)
    again = SmashConfig.from_json(tmp_path)
    assert again == cfg and again.data.name == "Digits" and len(again.data.train) == len(cfg.data.train)


def test_unloadable_data_id_is_kept_in_the_config(tmp_path):
    payload = SmashConfig(["int8_dynamic"], device="cpu").to_dict()
    payload["data"] = "WikiText"
    again = SmashConfig.from_dict(payload)
    assert again.data is None and again.to_dict()["data"] == "WikiText"


def test_save_to_json_file_or_directory(tmp_path):
    from slimkit import SmashConfig

    cfg = SmashConfig({"int8_dynamic": {"per_channel": False}})
    file = cfg.save_to_json(tmp_path / "config.json")
    assert file == tmp_path / "config.json" and file.is_file() and not (tmp_path / "config.json").is_dir()
    folder_file = cfg.save_to_json(tmp_path / "saved")
    assert folder_file == tmp_path / "saved" / "smash_config.json" and folder_file.is_file()
    assert SmashConfig.from_json(file) == cfg == SmashConfig.from_json(tmp_path / "saved")
