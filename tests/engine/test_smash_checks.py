from __future__ import annotations

import pytest
import torch

from slimkit import SmashConfig, SmashedModel, smash
from slimkit.core import registry
from slimkit.errors import (
    ConfigError,
    MissingComponentError,
    MissingPackageError,
    ModelNotSupportedError,
    RegistryError,
)
from tests.engine.fakes import make, registered


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def test_smash_returns_module_with_config_and_keeps_the_input_model():
    model = mlp()
    before = [p.clone() for p in model.parameters()]
    cfg = SmashConfig({"level": {"sparsity": 0.5}}, device="cpu")
    smashed = smash(model, cfg, verbose=False)
    assert isinstance(smashed, torch.nn.Module) and smashed.smash_config == cfg  # the resolved copy
    assert smashed.algorithms == ["level"]
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # base untouched
    assert smashed(torch.randn(2, 8)).shape == (2, 4)


def test_smash_in_place_when_asked():
    model = mlp()
    smash(model, SmashConfig({"level": {"sparsity": 0.5}}, device="cpu"), verbose=False,
          copy_model=False)
    assert float((model[0].weight == 0).float().mean()) == pytest.approx(0.5, abs=0.01)


def test_smash_prints_progress(capsys):
    smash(mlp(), SmashConfig(["level", "int8_dynamic"], device="cpu"))
    out = capsys.readouterr().out
    assert "[1/2] pruner level" in out and "[2/2] quantizer int8_dynamic done in" in out


def test_inner_model_attributes_are_reachable():
    model = mlp()
    model.task_name = "regression"
    smashed = smash(model, SmashConfig(["level"], device="cpu"), verbose=False)
    assert smashed.task_name == "regression"  # looked up on the inner model
    with pytest.raises(AttributeError):
        smashed.no_such_attribute  # noqa: B018


def test_refuses_non_module_and_already_smashed():
    with pytest.raises(ModelNotSupportedError, match="needs a torch.nn.Module, got function"):
        smash(lambda x: x, SmashConfig(device="cpu"))
    smashed = smash(mlp(), SmashConfig(device="cpu"), verbose=False)
    with pytest.raises(ConfigError, match="already smashed"):
        smash(smashed, SmashConfig(device="cpu"))
    with pytest.raises(ConfigError, match="needs a SmashConfig, got dict"):
        smash(mlp(), {"quantizer": "half"})  # type: ignore[arg-type]


def test_model_check_refusal_and_experimental_bypass():
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3))
    with pytest.raises(ModelNotSupportedError) as info:
        smash(conv, SmashConfig(["int8_dynamic"], device="cpu"), verbose=False)
    assert "int8_dynamic does not support this model (Sequential)" in str(info.value)
    assert "experimental=True" in str(info.value)
    smashed = smash(conv, SmashConfig(["int8_dynamic"], device="cpu"), verbose=False, experimental=True)
    assert smashed(torch.randn(1, 3, 5, 5)).shape == (1, 4, 3, 3)


def test_device_unsupported():
    cuda_only = make("fake_cuda_only", "cacher", run_on_cpu=False)
    with registered(cuda_only):
        with pytest.raises(ConfigError, match="fake_cuda_only does not run on cpu. It runs on cuda only"):
            smash(mlp(), SmashConfig(["fake_cuda_only"], device="cpu"), verbose=False)


def test_auto_device_falls_back_to_cpu_for_cpu_only_algorithms(monkeypatch):
    """On a GPU machine, device 'auto' with a CPU-only algorithm runs on the CPU; an explicit 'cuda' is refused."""
    from slimkit.engine.prepare import prepare

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cpu_only = make("fake_cpu_only", "cacher", run_on_cuda=False)
    with registered(cpu_only):
        auto = SmashConfig(["fake_cpu_only"])
        assert (auto.device, auto.device_auto) == ("cuda", True)
        prepared = prepare(mlp(), auto)
        assert prepared.algorithms == ("fake_cpu_only",) and prepared.device == prepared.config.device == "cpu"
        assert (auto.device, auto.device_auto) == ("cuda", True)  # the user's config is left as it was
        assert prepare(mlp(), SmashConfig(["fake_cpu_only", "level"], device="auto")).device == "cpu"
        explicit = SmashConfig(["fake_cpu_only"], device="cuda")
        assert explicit.device_auto is False
        with pytest.raises(ConfigError, match="fake_cpu_only does not run on cuda. It runs on cpu only"):
            prepare(mlp(), explicit)
    assert prepare(mlp(), SmashConfig(["level"])).device == "cuda"  # nothing CPU-only: 'auto' keeps the GPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_requested_without_gpu():
    cfg = SmashConfig(["level"], device="cpu")
    cfg.device = "cuda"
    with pytest.raises(ConfigError, match="no CUDA GPU is available"):
        smash(mlp(), cfg, verbose=False)


@pytest.mark.parametrize(("attr", "adder"), [("tokenizer_required", "add_tokenizer"),
                                              ("processor_required", "add_processor"),
                                              ("dataset_required", "add_data")])
def test_missing_components(attr, adder):
    needy = make("fake_needy", "cacher", **{attr: True})
    with registered(needy):
        with pytest.raises(MissingComponentError, match=rf"fake_needy needs a \w+; add one with cfg.{adder}"):
            smash(mlp(), SmashConfig(["fake_needy"], device="cpu"), verbose=False)


def test_incompatible_combination_names_both_and_why():
    picky = make("fake_picky", "cacher", compatible_algorithms={"quantizer": ["half"]})
    with registered(picky):
        ok, _ = registry.compatible("fake_picky", "half")
        assert ok
        ok, why = registry.compatible("int8_dynamic", "fake_picky")  # symmetric: asked from the other side
        assert not ok and "fake_picky only combines with these quantizers: half" in why
        with pytest.raises(ConfigError, match="int8_dynamic and fake_picky cannot be combined: fake_picky only"):
            smash(mlp(), SmashConfig(["int8_dynamic", "fake_picky"], device="cpu"), verbose=False)


def test_missing_package_names_the_extra():
    def needs_package(self):
        import slimkit_package_that_does_not_exist  # noqa: F401

    lacking = make("fake_lacking", "compiler", import_algorithm_packages=needs_package, extra="onnx")
    with registered(lacking):
        with pytest.raises(MissingPackageError, match=r"Install it: pip install 'slimkit\[onnx\]'"):
            smash(mlp(), SmashConfig(["fake_lacking"], device="cpu"), verbose=False)


def test_check_order_unknown_before_device_before_components():
    needy_cuda = make("fake_needy_cuda", "cacher", run_on_cpu=False, tokenizer_required=True)
    with registered(needy_cuda):
        with pytest.raises(ConfigError, match="does not run on cpu"):  # device is checked before components
            smash(mlp(), SmashConfig(["fake_needy_cuda"], device="cpu"), verbose=False)


def test_registry_refuses_duplicates_contradictions_and_bad_classes():
    with pytest.raises(RegistryError, match="registered twice"):
        registry.register(make("int8_dynamic", "quantizer"))
    with pytest.raises(RegistryError, match="group must be one of"):
        registry.register(make("fake_bad_group", "shrinker"))
    with pytest.raises(RegistryError, match="snake_case"):
        registry.register(make("BadName", "cacher"))
    a = make("fake_a", "cacher", compatible_algorithms={"compiler": ["fake_b"]})
    b = make("fake_b", "compiler", compatible_algorithms={"cacher": []})
    with pytest.raises(RegistryError, match="Contradiction: fake_a lists fake_b as compatible but fake_b does not"):
        with registered(a, b):
            pass
    with pytest.raises(RegistryError, match="lists unknown algorithm 'nope'"):
        with registered(make("fake_c", "cacher", compatible_algorithms={"compiler": ["nope"]})):
            pass
    assert "fake_a" not in registry.names()


def test_registry_requires_hyperparameter_descriptions():
    from ConfigSpace import UniformFloatHyperparameter

    def hps(self):
        return [UniformFloatHyperparameter("x", 0.0, 1.0)]

    with pytest.raises(RegistryError, match="hyperparameter 'x' needs meta"):
        registry.register(make("fake_nodesc", "cacher", get_hyperparameters=hps))
    assert "fake_nodesc" not in registry.names()


def test_registered_algorithm_fails_loudly_when_module_breaks():
    import slimkit.algorithms as algorithms

    with pytest.raises(RegistryError, match="does_not_exist failed to import"):
        algorithms._load_all(["slimkit.algorithms.pruning.does_not_exist"])
    with pytest.raises(RegistryError, match="must register an algorithm named 'registry'"):
        algorithms._load_all(["slimkit.core.registry"])


def test_every_algorithm_file_is_discovered():
    import slimkit.algorithms as algorithms

    modules = algorithms.algorithm_modules()
    assert "slimkit.algorithms.quantization.int8_dynamic" in modules
    assert {m.rsplit(".", 1)[-1] for m in modules} == set(registry.names())


def test_empty_config_is_a_passthrough():
    smashed = smash(mlp(), SmashConfig(device="cpu"), verbose=False)
    assert isinstance(smashed, SmashedModel) and smashed.algorithms == []


def test_each_applied_algorithm_records_wall_and_cpu_seconds():
    import time

    def _apply(self, model, smash_config):  # 0.3 s asleep (wall only), then ~0.2 s of work (wall and CPU)
        time.sleep(0.3)
        end = time.process_time() + 0.2
        while time.process_time() < end:
            pass
        return model

    with registered(make("fake_timed", "pruner", _apply=_apply)):
        record, = smash(mlp(), SmashConfig(["fake_timed"], device="cpu"), verbose=False).applied
    assert 0.2 <= record["cpu_seconds"] < 0.45 and record["seconds"] >= 0.5
    assert record["seconds"] - record["cpu_seconds"] >= 0.25  # the sleep is not CPU time
