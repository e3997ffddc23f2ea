"""Pruna's torchao, quanto, reduce_noe and token_merging at their boundaries, and ToMe's merge step itself."""

from __future__ import annotations

import sys

import pytest
import torch

from slimkit import SmashConfig, smash
from slimkit.engines.token_merging import bipartite_merge
from slimkit.errors import ConfigError, MissingPackageError
from slimkit.zoo import load
from tests.engines.quantization.tiny_moe import tiny_moe


def _smash(model, algorithm: str, **hyperparameters):
    return smash(model, SmashConfig({algorithm: hyperparameters}), verbose=False)


@pytest.mark.parametrize("quant_type", ["fp8dq", "fp8dqrow"])
def test_torchao_fp8_matmuls_are_refused_on_the_cpu(quant_type):
    with pytest.raises(ConfigError, match=rf"torchao_quant_type='{quant_type}' .* compute capability 8.9 .* "
                                          r"the model is on cpu\. On this device use 'int8dq'"):
        _smash(load("mlp").model, "torchao", quant_type=quant_type)


def test_torchao_fp8_weights_run_on_the_cpu():
    model, x = load("mlp")
    smashed = _smash(model, "torchao", quant_type="fp8wo")
    assert type(smashed.model.get_submodule(smashed.applied[0]["state"]["layers"][0]).weight).__name__ == \
        "Float8Tensor"
    with torch.no_grad():
        torch.testing.assert_close(smashed(x), model(x), atol=0.1, rtol=0.05)


@pytest.mark.parametrize("algorithm", ["torchao", "quanto"])
def test_target_modules_that_match_no_layer(algorithm):
    with pytest.raises(ConfigError, match=rf"{algorithm}_target_modules=\{{'include': \['decoder\.\*'\]\}} "
                                          r"matches none of the layers it could quantize \(fc1, fc2"):
        _smash(load("mlp").model, algorithm, target_modules={"include": ["decoder.*"]})


def test_torchao_int4_group_size_that_fits_no_layer():
    with pytest.raises(ConfigError, match=r"no layer left to quantize .* torchao_group_size=256"):
        _smash(load("mlp").model, "torchao", quant_type="int4wo", group_size=256)  # inputs 32 and 64


@pytest.mark.parametrize(("key", "value"), [
    ("torchao_quant_type", "int3wo"), ("torchao_group_size", 48), ("quanto_weight_bits", "qint3"),
    ("quanto_act_bits", "qint4"), ("quanto_calibration_samples", 0), ("reduce_noe_num_experts_per_token", 0),
    ("token_merging_r", 129), ("token_merging_r", -1), ("torchao_target_modules", {"include": "model.*"}),
    ("quanto_target_modules", {"only": ["model.*"]}), ("quanto_target_modules", ["model.*"]),
])
def test_out_of_range_hyperparameters_name_the_key(key, value):
    cfg = SmashConfig()
    with pytest.raises(ConfigError, match=key):
        cfg[key] = value


@pytest.mark.parametrize(("algorithm", "module", "extra"), [("torchao", "torchao.quantization", "torchao"),
                                                           ("quanto", "optimum.quanto", "quanto")])
def test_a_missing_library_names_the_extra(monkeypatch, algorithm, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if the package were not installed
    with pytest.raises(MissingPackageError, match=rf"pip install 'slimkit\[{extra}\]'"):
        _smash(load("mlp").model, algorithm)


def test_reduce_noe_refuses_more_experts_than_the_model_has_and_unknown_fields():
    with pytest.raises(ConfigError, match=r"num_experts_per_token=5 is more than the model's 4 experts"):
        _smash(tiny_moe("mixtral"), "reduce_noe", num_experts_per_token=5)
    with pytest.raises(ConfigError, match=r"reduce_noe_target_name='top_k' is not an integer field"):
        _smash(tiny_moe("mixtral"), "reduce_noe", target_name="top_k")


def test_merge_shrinks_by_r_keeps_protected_tokens_and_conserves_size():
    torch.manual_seed(0)
    x, metric = torch.randn(2, 17, 8), torch.randn(2, 17, 4)
    size = torch.ones(2, 17, 1)
    merged, new_size = bipartite_merge(x, size, metric, r=5, protected=1)
    assert merged.shape == (2, 12, 8) and new_size.shape == (2, 12, 1)
    torch.testing.assert_close(merged[:, 0], x[:, 0])  # the class token is never merged and stays first
    torch.testing.assert_close(new_size.sum(dim=1), torch.full((2, 1), 17.0))  # every patch is counted once
    torch.testing.assert_close((merged * new_size).sum(dim=1), x.sum(dim=1))  # size-weighted means
    two, _ = bipartite_merge(x, size, metric, r=5, protected=2)
    torch.testing.assert_close(two[:, :2], x[:, :2])  # DeiT: class and distillation tokens kept in place
    same, _ = bipartite_merge(x, size, metric, r=0, protected=1)
    assert same is x
    most, _ = bipartite_merge(x, size, metric, r=100, protected=1)  # r is capped at half the mergeable tokens
    assert most.shape[1] == 17 - 8


def test_token_merging_identical_tokens_merge_into_one_exact_mean():
    x = torch.tensor([[[9.0, 9.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])
    merged, size = bipartite_merge(x, torch.ones(1, 5, 1), x, r=1, protected=1)
    assert merged.shape[1] == 4 and sorted(size.flatten().tolist()) == [1.0, 1.0, 1.0, 2.0]
    assert torch.equal(merged[0, 0], x[0, 0])


def test_quanto_calibrates_activations_on_the_configs_data():
    from optimum.quanto import QLinear

    model, x = load("digits_cnn")
    cfg = SmashConfig({"quanto": {"weight_bits": "qint8", "act_bits": "qint8", "calibration_samples": 32}})
    cfg.add_data("Digits")
    smashed = smash(model, cfg, verbose=False)
    assert smashed.applied[0]["state"]["calibration"] == "data Digits"
    scales = [float(m.input_scale) for m in smashed.model.modules() if isinstance(m, QLinear)]
    assert len(scales) == 2 and all(0 < s != 1.0 for s in scales)  # quanto starts every scale at 1
    with torch.no_grad():
        cosine = torch.nn.functional.cosine_similarity(smashed(x), model(x), dim=1).mean().item()
    assert cosine > 0.99
