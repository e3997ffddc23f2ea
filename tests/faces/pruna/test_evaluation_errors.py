"""Pruna's evaluation face refuses bad requests at the boundary, saying what is valid."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from slimkit.errors import ConfigError, DataError, MissingPackageError
from slimkit.faces.pruna import EvaluationAgent, PrunaDataModule, Task
from slimkit.faces.pruna.evaluation.metrics import (
    CMMD,
    CO2EmissionsMetric,
    DinoScore,
    LatencyMetric,
    MetricRegistry,
    TorchMetricWrapper,
)
from slimkit.faces.pruna.evaluation.metrics.metric_energy import COUNTRY_VARIABLE

PRUNA_NAMES = ["latency", "throughput", "total_time", "disk_memory", "inference_memory", "training_memory",
               "energy_consumed", "co2_emissions", "total_macs", "total_params", "accuracy", "perplexity",
               "precision", "recall", "psnr", "ssim", "ms_ssim", "msssim", "clip_score", "fid", "cmmd", "lpips",
               "dino_score"]


@pytest.fixture(scope="module")
def digits():
    return PrunaDataModule.from_string("Digits", dataloader_args={"batch_size": 32})


def test_every_pruna_metric_name_is_registered():
    assert set(PRUNA_NAMES) <= set(MetricRegistry.names())


def test_unknown_metric_lists_the_valid_names(digits):
    with pytest.raises(ConfigError) as error:
        Task(["latancy"], digits, device="cpu")
    message = str(error.value)
    assert "Unknown metric 'latancy'" in message and "Did you mean 'latency'" in message
    assert all(name in message for name in ("total_macs", "perplexity", "ms_ssim"))
    with pytest.raises(ConfigError, match="named request .*text_generation_quality"):
        Task("fastest_please", digits)
    with pytest.raises(ConfigError, match="not part of slimkit"):
        Task("lm_eval:hellaswag", digits)
    with pytest.raises(ConfigError, match="non-empty list"):
        Task([], digits)
    with pytest.raises(ConfigError, match="metric names or metric objects, got int"):
        Task([LatencyMetric(), 3], digits)


@pytest.mark.parametrize("name", ["clip_score", "fid"])
def test_hub_metrics_need_a_local_weights_path(name, digits):
    with pytest.raises(ConfigError) as error:
        Task([name], digits)
    assert "model_path=" in str(error.value) and "offline" in str(error.value)
    with pytest.raises(ConfigError, match="model_path="):
        TorchMetricWrapper(name)
    with pytest.raises(ConfigError, match="clip_score"):
        Task("image_generation_quality", digits)


@pytest.mark.parametrize("make", [lambda: CMMD(), lambda: DinoScore(model_path="/weights"),
                                  lambda: TorchMetricWrapper("lpips", model_path="/weights")])
def test_hub_metrics_slimkit_cannot_run_say_so(make):
    with pytest.raises(ConfigError, match="cannot run offline in slimkit.*psnr"):
        make()


def test_request_needing_data_the_datamodule_lacks(digits):
    with pytest.raises(DataError, match="perplexity needs next-token labels"):
        Task(["perplexity"], digits)

    class Unlabelled(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> dict:
            return {"x": torch.ones(3)}

    data = Unlabelled()
    no_targets = PrunaDataModule(data, data, data, collate_fn=lambda items: torch.stack([i["x"] for i in items]))
    with pytest.raises(DataError, match="accuracy compare the model's outputs with ground truth"):
        Task(["accuracy"], no_targets)
    no_test = PrunaDataModule(data, data, None, collate_fn=lambda items: torch.stack([i["x"] for i in items]))
    with pytest.raises(DataError, match="no test dataset"):
        Task(["latency"], no_test)
    with pytest.raises(DataError, match="PrunaDataModule"):
        Task(["latency"], datamodule=[1, 2, 3])


def test_bad_arguments(digits, monkeypatch):
    monkeypatch.delenv(COUNTRY_VARIABLE, raising=False)
    with pytest.raises(ConfigError, match="co2_emissions needs the country.*country_iso_code='FRA'"):
        Task(["co2_emissions"], digits)
    monkeypatch.setenv(COUNTRY_VARIABLE, "DEU")
    assert Task(["co2_emissions"], digits).metrics[0].country_iso_code == "DEU"
    with pytest.raises(ConfigError, match="3-letter ISO code"):
        CO2EmissionsMetric(country_iso_code="France")
    with pytest.raises(ConfigError, match="n_iterations must be an integer >= 1"):
        LatencyMetric(n_iterations=0)
    with pytest.raises(ConfigError, match="timing_type must be one of"):
        LatencyMetric(timing_type="fast")
    with pytest.raises(ConfigError, match="call_type for 'psnr' must be one of"):
        TorchMetricWrapper("psnr", call_type="sideways")
    with pytest.raises(ConfigError, match="TorchMetricWrapper has no metric 'bleu'"):
        TorchMetricWrapper("bleu")
    with pytest.raises(ConfigError, match="device must be"):
        Task(["latency"], digits, device="tpu")
    with pytest.raises(ConfigError, match="either task="):
        EvaluationAgent(Task(["latency"], digits), request=["latency"])
    with pytest.raises(ConfigError, match="needs both request= and datamodule="):
        EvaluationAgent(request=["latency"])


def test_outputs_a_metric_cannot_score(digits):
    class Scalar(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.flatten(1).sum(1)

    with pytest.raises(DataError, match="read the classes from logits"):
        EvaluationAgent(request=["accuracy"], datamodule=digits).evaluate(Scalar())


USER_MANUAL_DIRECT = '''
from slimkit.faces.pruna.evaluation.evaluation_agent import EvaluationAgent
from slimkit.faces.pruna.data.pruna_datamodule import PrunaDataModule

eval_agent = EvaluationAgent(
    request=["cmmd", "ssim"],
    datamodule=datamodule,  # offline: Pruna's PrunaDataModule.from_string('LAION256') downloads LAION
    device="cpu"
)
'''


def test_pruna_user_manual_cmmd_request_is_refused_clearly(digits):
    with pytest.raises(ConfigError, match="cmmd needs network weights .* cannot run offline in slimkit"):
        exec(compile(USER_MANUAL_DIRECT, "<pruna snippet>", "exec"), {"datamodule": digits})  # noqa: S102


def test_local_weights_path_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="model_path '.*missing' does not exist"):
        TorchMetricWrapper("clip_score", model_path=str(tmp_path / "missing"))


@pytest.mark.skipif(importlib.util.find_spec("torch_fidelity") is not None, reason="torch-fidelity is installed")
def test_fid_without_torch_fidelity_names_the_package(tmp_path):
    weights = tmp_path / "pt_inception.pth"
    weights.write_bytes(b"not read before torch-fidelity is found")
    with pytest.raises(MissingPackageError, match="fid needs a package.*torch-fidelity"):
        TorchMetricWrapper("fid", model_path=str(weights))
