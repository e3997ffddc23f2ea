"""A user's NNI 2.x files run unchanged on slimkit: the two quick starts as scripts, the speedup tutorial in-process.

The scripts (``scripts/``) import ``torchvision.datasets`` as NNI users do; the subprocess finds slimkit's offline
stand-in (``shims/torchvision``, sklearn's digits upscaled to 28x28) first on ``PYTHONPATH``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from slimkit.compression import ModelSpeedup, count_flops_params
from tests.faces.nni.scripts.lenet import LeNet

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def _run(script: str, cwd: Path) -> tuple[subprocess.CompletedProcess, dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE / "shims"), str(ROOT)]),
           "SHIM_TRAIN_SIZE": "768", "SHIM_TEST_SIZE": "256", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(HERE / "scripts" / script)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"no RESULT line; stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    return done, json.loads(lines[-1].removeprefix("RESULT "))


def test_pruning_quick_start_script(tmp_path):
    done, result = _run("pruning_quick_start.py", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "PrunerModuleWrapper" in done.stdout  # the wrapped model, printed between building and compressing
    assert result["kept"] == {"conv1": 0.5, "conv2": 0.5, "fc1": 0.5, "fc2": 0.5}  # fc3 excluded
    assert result["shapes"] == {"conv1": [4, 1, 5, 5], "conv2": [8, 4, 5, 5], "fc1": [48, 8 * 4 * 4],
                                "fc2": [24, 48], "fc3": [10, 24]}  # half as wide; fc3 keeps its 10 classes
    assert result["pretrained"] >= 80 and result["finetuned"] >= 80  # percent, on 256 held-out digits


@pytest.mark.slow  # a second ~5 s subprocess; its QAT calibration and the TensorRT refusal also run in-process
def test_quantization_quick_start_script_stops_at_tensorrt_with_the_slimkit_path(tmp_path):
    done, result = _run("quantization_quick_start.py", tmp_path)
    assert done.returncode != 0  # the user's script ends with ModelSpeedupTensorRT, which slimkit refuses
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("slimkit.errors.ConfigError: ModelSpeedupTensorRT needs NVIDIA TensorRT")
    assert "int8_static" in last and "onnxruntime" in last
    assert (tmp_path / "log" / "mnist_calibration.pth").is_file() and (tmp_path / "log" / "mnist_model.pth").is_file()
    calibration = result["calibration"]
    assert sorted(calibration) == ["conv1", "conv2", "fc1", "fc2", "relu1", "relu2", "relu3", "relu4"]
    assert {"weight_bits", "input_bits", "tracked_min_input", "tracked_max_input"} <= set(calibration["fc1"])
    assert set(calibration["relu3"]) == {"output_bits", "output_scale", "output_zero_point", "tracked_min_output",
                                         "tracked_max_output"}
    assert result["pretrained"] >= 80 and result["quantized"] >= 80


def test_speedup_tutorial_flow_removes_hand_masked_filters():
    """NNI's speedup tutorial: mask conv1's first three filters by hand, then ``ModelSpeedup`` on that dict alone."""
    torch.manual_seed(0)
    model = LeNet().eval()
    reference = copy.deepcopy(model)
    mask = torch.ones_like(model.conv1.weight)
    mask[0:3] = 0
    flops, params, _ = count_flops_params(model, torch.rand(1, 1, 28, 28), verbose=False)

    ModelSpeedup(model, torch.rand(10, 1, 28, 28), {"conv1": {"weight": mask}}).speedup_model()
    assert (model.conv1.in_channels, model.conv1.out_channels, model.conv2.in_channels) == (1, 5, 5)
    assert model.conv2.out_channels == 16 and model.fc1.in_features == 256  # nothing else changes shape
    # the three filters' outputs were their bias alone: the small model computes what the masked one did
    with torch.no_grad():
        reference.conv1.weight[0:3] = 0
        x = torch.rand(16, 1, 28, 28)
        assert torch.allclose(model(x), reference(x), atol=1e-5)
    small_flops, small_params, _ = count_flops_params(model, torch.rand(1, 1, 28, 28), verbose=False)
    assert params - small_params == 3 * (25 + 1) + 3 * 16 * 25  # conv1's 3 filters, conv2's 3 input slices
    assert small_flops < flops
