"""Pruna's hyperparameter names for algorithms slimkit has, written as a Pruna user writes them (issue 33 item 3).

torch_unstructured ``pruning_method``, torch_dynamic ``weight_bits``, awq ``quant_scheme`` (llm-compressor's
scheme names), llama_cpp ``quantization_method`` (llama.cpp's k-quants), Pruna's gptq tester flow, and
``PrunaDataModule`` taking its tokenizer the way Pruna does.
"""

from __future__ import annotations

import pytest
import torch

from slimkit import PrunaDataModule, SmashConfig, smash, zoo
from slimkit.data.builtin import load_pydoc_text_splits
from slimkit.engines.quantization.lowbit import PackedLinear
from slimkit.errors import ConfigError, DataError
from slimkit.evaluation import perplexity
from slimkit.zoo._hf import byte_tokenizer


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()


def _sparsity(model: torch.nn.Module) -> float:
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return sum(int((w == 0).sum()) for w in weights) / sum(w.numel() for w in weights)


@pytest.mark.parametrize("method", ["l1", "random"])
def test_torch_unstructured_pruning_method(method):
    model = _mlp()
    smash_config = SmashConfig()
    smash_config["pruner"] = "torch_unstructured"
    smash_config["torch_unstructured_sparsity"] = 0.5
    smash_config["torch_unstructured_pruning_method"] = method
    smashed = smash(model=model, smash_config=smash_config)
    assert smashed.smash_config["level_method"] == method
    assert _sparsity(smashed.model) == pytest.approx(0.5, abs=0.01) and _sparsity(model) == 0.0
    first, base = smashed.model[0].weight.detach(), model[0].weight.detach()
    kept_min, dropped_max = base[first != 0].abs().min(), base[first == 0].abs().max()
    assert (kept_min >= dropped_max) == (method == "l1")  # l1 drops the smallest; random does not


def test_torch_dynamic_weight_bits():
    model = _mlp()
    smash_config = SmashConfig({"torch_dynamic": {"weight_bits": "qint8"}})
    smashed = smash(model=model, smash_config=smash_config)
    x = torch.randn(4, 32)
    assert not any(type(m) is torch.nn.Linear for m in smashed.model.modules())
    torch.testing.assert_close(smashed(x), model(x), atol=0.05, rtol=0)
    with pytest.raises(ConfigError, match=r"weight_bits='quint8'.*qint8 only.*weight_bits='qint8'"):
        smash(_mlp(), SmashConfig({"torch_dynamic": {"weight_bits": "quint8"}}))
    with pytest.raises(ConfigError, match=r"allowed is one of 'quint8', 'qint8'"):
        SmashConfig()["torch_dynamic_weight_bits"] = "int4"


def _wide_llama():
    return zoo.load("tiny_llama", hidden_size=128, intermediate_size=256)


@pytest.mark.parametrize(("scheme", "sym"), [("W4A16", True), ("W4A16_ASYM", False)])
def test_awq_quant_scheme(scheme, sym):
    loaded = _wide_llama()
    smash_config = SmashConfig()
    smash_config["quantizer"] = "awq"
    smash_config["awq_quant_scheme"] = scheme
    smash_config["awq_n_calibration_samples"] = 2
    smash_config["awq_seq_len"] = 32
    smash_config["awq_n_grid"] = 2
    smash_config.add_tokenizer(loaded.tokenizer)
    smash_config.add_data("PyDocText")
    smashed = smash(model=loaded.model, smash_config=smash_config)
    packed = [m for m in smashed.model.modules() if isinstance(m, PackedLinear)]
    assert packed and all((m.bits, m.group_size) == (4, 128) for m in packed)
    middle = all(bool((m.zeros == 8).all()) for m in packed)  # symmetric: the zero is the middle 4-bit code
    assert middle == sym
    with pytest.raises(ConfigError, match=r"allowed is one of None, 'W4A16', 'W4A16_ASYM'.*W8A8, FP8"):
        smash_config["awq_quant_scheme"] = "W8A8"


def test_gptq_pruna_tester_flow():
    """Pruna's gptq tester: gptq_weight_bits=4, gptq_group_size=128, then a perplexity check."""
    loaded = _wide_llama()
    smash_config = SmashConfig()
    smash_config["quantizer"] = "gptq"
    smash_config.add({"gptq_weight_bits": 4, "gptq_group_size": 128, "gptq_n_calibration_samples": 2,
                      "gptq_seq_len": 32})
    smash_config.add_tokenizer(loaded.tokenizer)
    smash_config.add_data("PyDocText")
    held_out = [ids for ids, _ in zip(smash_config.data.test_dataloader(batch_size=1), range(2), strict=False)]
    base_ppl = perplexity(loaded.model, held_out)
    smashed = smash(model=loaded.model, smash_config=smash_config)
    packed = [m for m in smashed.model.modules() if isinstance(m, PackedLinear)]
    assert len(packed) == 7 * 2 and all((m.bits, m.group_size) == (4, 128) for m in packed)
    ppl = perplexity(smashed.model, held_out)
    assert abs(ppl - base_ppl) < 0.05 * base_ppl  # a random model: 4 bits barely move its perplexity


def test_llama_cpp_quantization_method_names_the_k_quants():
    with pytest.raises(ConfigError, match=r"allowed is one of None, 'q2_k'.*'q4_k_m'.*'q6_k'"):
        SmashConfig()["llama_cpp_quantization_method"] = "q4_k_x"


@pytest.mark.llamacpp
def test_llama_cpp_quantization_method_refuses_slimkit_quantized_layers():
    loaded = zoo.load("tiny_llama")
    smash_config = SmashConfig(["rtn", "llama_cpp"])
    smash_config.add({"rtn_group_size": 32, "llama_cpp_quantization_method": "q4_k_m"})
    smash_config.add_tokenizer(loaded.tokenizer)
    with pytest.raises(ConfigError, match=r"already quantized by a slimkit quantizer.*Leave llama_cpp_quantization"):
        smash(loaded.model, smash_config)


@pytest.mark.llamacpp
def test_llama_cpp_k_quants_written_by_llama_cpp():
    """q4_k_m on rows of 256: llama.cpp's Q4_K for most matrices and Q6_K for some, about 5x smaller than f32."""
    loaded = zoo.load("tiny_llama", hidden_size=256, intermediate_size=512, num_attention_heads=4,
                      num_key_value_heads=2)
    smash_config = SmashConfig()
    smash_config["compiler"] = "llama_cpp"
    smash_config["llama_cpp_quantization_method"] = "q4_k_m"
    smash_config.add_tokenizer(loaded.tokenizer)
    smashed = smash(model=loaded.model, smash_config=smash_config)
    state = smashed.applied[-1]["state"]
    assert state["file_type"] == "MOSTLY_Q4_K_M" and {"Q4_K", "Q6_K"} <= set(state["tensor_types"])
    assert state["gguf_bytes"] < 0.2 * sum(p.numel() * 4 for p in loaded.model.parameters())


def _text_splits():
    train, val, test = load_pydoc_text_splits()
    return [train[i] for i in range(8)], [val[i] for i in range(4)], [test[i] for i in range(4)]


def test_pruna_datamodule_takes_the_smash_config_tokenizer():
    """Pruna's user manual: the module without a tokenizer, added to a SmashConfig that has one (either order)."""
    train, val, test = _text_splits()
    tokenizer = byte_tokenizer()
    for tokenizer_first in (True, False):
        data = PrunaDataModule(train_ds=train, val_ds=val, test_ds=test, collate_fn="text_generation_collate",
                               dataloader_args={"batch_size": 2})
        smash_config = SmashConfig()
        if tokenizer_first:
            smash_config.add_tokenizer(tokenizer)
        smash_config.add_data(data)
        if not tokenizer_first:
            smash_config.add_tokenizer(tokenizer)
        ids, labels = next(iter(smash_config.data.train_dataloader()))
        assert ids.shape == (2, 512) and torch.equal(ids[:, 1:], labels[:, :-1])
    lonely = PrunaDataModule(train, val, test, "text_generation_collate", {"batch_size": 2})
    with pytest.raises(DataError, match=r"'text_generation_collate' needs a tokenizer: pass tokenizer="):
        lonely.train_dataloader()


def test_pruna_datamodule_from_datasets_collate_fn_args():
    train, val, test = _text_splits()
    tokenizer = byte_tokenizer()
    data = PrunaDataModule.from_datasets(datasets=(train, val, test), collate_fn="text_generation_collate",
                                         tokenizer=tokenizer, collate_fn_args={"max_seq_len": 32},
                                         dataloader_args={"batch_size": 4})
    assert next(iter(data.train_dataloader()))[0].shape == (4, 32)
    tokenizer.model_max_length = 48  # Pruna: max_seq_len from the tokenizer unless collate_fn_args has one
    data = PrunaDataModule.from_datasets((train, val, test), "text_generation_collate",
                                         collate_fn_args={"tokenizer": tokenizer})
    assert next(iter(data.val_dataloader(batch_size=2)))[0].shape == (2, 48)
    with pytest.raises(DataError, match=r"Unknown collate argument\(s\) \['max_len'\]"):
        PrunaDataModule.from_datasets((train, val, test), "text_generation_collate", tokenizer=tokenizer,
                                      collate_fn_args={"max_len": 8})
    with pytest.raises(DataError, match=r"exactly 3; got tuple of length 2"):
        PrunaDataModule.from_datasets((train, val), "text_generation_collate", tokenizer=tokenizer)
