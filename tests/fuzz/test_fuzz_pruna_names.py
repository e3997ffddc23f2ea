"""Issue 33's new hyperparameters at the boundary: any value is accepted or refused naming the key and what is allowed.

The PERP recoverers' Pruna names (``lora_r``, ``num_epochs``, ``learning_rate``, ...), ``awq_quant_scheme``,
``llama_cpp_quantization_method``, ``torch_dynamic_weight_bits`` and ``torch_unstructured_pruning_method``; then
``PrunaDataModule.from_datasets`` with any ``collate_fn_args`` / ``dataloader_args``; then the settings that are
legal values but cannot run here (a refusal at smash time that says what to use instead).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from slimkit import PrunaDataModule, SmashConfig, smash, zoo
from slimkit.core import registry
from slimkit.errors import ConfigError, MissingPackageError, ModelNotSupportedError
from slimkit.zoo._hf import byte_tokenizer
from tests.fuzz._fuzz import clear_or_ok, examples

PERP = ("text_to_text_perp", "text_to_text_inplace_perp")
KEYS = [f"{name}_{h['name']}" for name in PERP for h in registry.info(name)["hyperparameters"]] + [
    "awq_quant_scheme", "llama_cpp_quantization_method", "torch_dynamic_weight_bits", "torch_dynamic_activation_scales",
    "torch_unstructured_pruning_method"]
#: values around and beyond the ranges: negatives, zero, huge, non-finite, wrong types, near-miss names
values = st.one_of(st.integers(-5, 10**8), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                   st.none(), st.sampled_from(["W8A8", "q4_k_x", "quint4", "l2", "AdamW16bit", "all-linear",
                                               "pissa", "lora", "wandb", "none", "W4A16", "q6_k", ""]),
                   st.text(max_size=8), st.lists(st.integers(0, 4), max_size=2))


_CFG = SmashConfig(device="cpu")  # one config: each case sets one key


@examples(30)
@given(st.sampled_from(KEYS), values)
def test_new_hyperparameters_any_value(key, value):
    cfg = _CFG
    result = clear_or_ok("smash_config", lambda: cfg.__setitem__(key, value), repr(key), "allowed is")
    if not isinstance(result, Exception):
        assert cfg[key] == (tuple(value) if isinstance(value, list) else value)


def _splits():
    rows = [{"text": "def f(x):\n    return x * 2\n" * 4}] * 4
    return rows, rows[:2], rows[:2]


@examples(40)
@given(st.dictionaries(st.sampled_from(["max_seq_len", "tokenizer", "max_len", "column_map", ""]),
                       st.one_of(st.integers(-3, 64), st.text(max_size=4), st.none()), max_size=3),
       st.one_of(st.none(), st.dictionaries(st.sampled_from(["batch_size", "num_workers", "shufle"]),
                                            st.integers(0, 4), max_size=2), st.integers(0, 3)))
def test_from_datasets_any_collate_and_loader_args(collate_fn_args, dataloader_args):
    def build():
        data = PrunaDataModule.from_datasets(_splits(), "text_generation_collate", tokenizer=byte_tokenizer(),
                                             collate_fn_args=collate_fn_args, dataloader_args=dataloader_args)
        return next(iter(data.train_dataloader()))

    clear_or_ok("pruna_datamodule", build, "collate", "max_seq_len", "dataloader_args", "batch_size", "tokenizer",
                "DataLoader", "argument")


def _perp_config(**hyperparameters) -> SmashConfig:
    cfg = SmashConfig(device="cpu")
    cfg.add_tokenizer(byte_tokenizer())
    cfg.add_data("PyDocText")
    cfg.activate("text_to_text_inplace_perp")
    for key, value in hyperparameters.items():
        cfg[f"text_to_text_inplace_perp_{key}"] = value
    return cfg


def test_perp_settings_that_cannot_run_here_say_what_to_use():
    model = zoo.load("tiny_llama").model
    with pytest.raises(ConfigError, match=r"report_to='wandb'.*records the training in the save's state.*'none'"):
        smash(model, _perp_config(report_to="wandb", steps=1), verbose=False)
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        with pytest.raises(MissingPackageError, match=r"bitsandbytes: pip install bitsandbytes.*'AdamW'"):
            smash(model, _perp_config(optimizer="AdamW8bit", steps=1), verbose=False)
    encoder = torch.nn.Sequential(torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8))
    with pytest.raises(ModelNotSupportedError, match=r"causal language models.*'finetune' or 'kd_recover'"):
        smash(encoder, _perp_config(steps=1), verbose=False)
