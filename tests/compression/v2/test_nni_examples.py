"""NNI 2.x's own example scripts and quick starts run with only their import lines changed (tests/fixtures/nni).

Each script runs in its own process on sklearn's digits served as MNIST / CIFAR-10 by the fixture's torchvision
stand-in, with small splits. VGG-based and long-training scripts are marked slow.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "nni"


def _run(tmp_path: Path, script: str, *args: str, train: int = 128, test: int = 64,
         timeout: int = 900) -> subprocess.CompletedProcess:
    tree = tmp_path / "nni"
    shutil.copytree(FIXTURES, tree, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tree / "shims"), str(tree)]),
           "SHIM_TRAIN_SIZE": str(train), "SHIM_TEST_SIZE": str(test), "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1"}
    path = tree / script
    done = subprocess.run([sys.executable, path.name, *args], cwd=path.parent, env=env, capture_output=True,
                          text=True, timeout=timeout)
    done.tree = tree  # type: ignore[attr-defined]
    return done


def _ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    return done.stdout


def _flops_params(out: str) -> list[tuple[float, float]]:
    """The (FLOPs M, params M) pairs of the scripts' final "Pretrained / Finetuned model" lines."""
    return [(float(f), float(p)) for f, p in re.findall(r"model FLOPs ([\d.]+) M, #Params: ([\d.]+)M", out)]


def test_pruning_quick_start(tmp_path):
    out = _ok(_run(tmp_path, "tutorials/pruning_quick_start_mnist.py"))
    assert "PrunerModuleWrapper" in out  # the wrapped model printed after the pruner is built
    sparsities = re.findall(r"^(conv1|conv2|fc1|fc2)  sparsity :  ([\d.]+)", out, flags=re.M)
    assert [name for name, _ in sparsities] == ["conv1", "conv2", "fc1", "fc2"]  # fc3 excluded
    assert all(float(kept) == 0.5 for _, kept in sparsities)  # the script prints kept / numel
    # after ModelSpeedup the layers really are half as wide (fc3 keeps its 10 outputs)
    assert "Conv2d(1, 3, kernel_size=(5, 5)" in out and "Linear(in_features=42, out_features=10" in out


def test_pruning_speedup_tutorial(tmp_path):
    out = _ok(_run(tmp_path, "tutorials/pruning_speedup.py"))
    assert "Conv2d(1, 6, kernel_size=(5, 5)" in out  # before: 6 channels
    assert "Conv2d(1, 3, kernel_size=(5, 5)" in out and "Conv2d(3, 16, kernel_size=(5, 5)" in out  # 3 masked out
    assert "Speedup Model - Elapsed Time" in out


@pytest.mark.slow
def test_quantization_quick_start_stops_at_tensorrt_with_the_slimkit_path(tmp_path):
    done = _run(tmp_path, "tutorials/quantization_quick_start_mnist.py")
    assert done.returncode != 0
    assert "calibration_config:" in done.stdout and "'tracked_min_input':" in done.stdout
    assert "'tracked_max_output':" in done.stdout and "'weight_bits': 8" in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("slimkit.errors.ConfigError: ModelSpeedupTensorRT needs NVIDIA TensorRT")
    assert "'onnxruntime'" in last and "'llama_cpp'" in last and "ImportError" not in done.stderr
    assert (done.tree / "tutorials" / "log" / "mnist_calibration.pth").is_file()  # written before TensorRT


@pytest.mark.slow
def test_observer_quantizer_example(tmp_path):
    done = _run(tmp_path, "quantization/observer_quantizer.py")
    out = _ok(done)
    accuracies = [float(a) for a in re.findall(r"Accuracy: ([\d.]+)%", out)]
    assert len(accuracies) == 2 and accuracies[1] >= accuracies[0] - 10  # before / after quantization
    assert "'tracked_min_input'" in out and "'max_pool2': {'output_bits': 8" in out
    assert (done.tree / "quantization" / "mnist_calibration.pth").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("script", ["QAT_torch_quantizer.py", "DoReFaQuantizer_torch_mnist.py"])
def test_quantizer_examples(tmp_path, script):
    done = _run(tmp_path, f"quantization/{script}", train=64, test=64)
    out = _ok(done)
    assert len(re.findall(r"# Epoch \d+ #", out)) in (10, 40)
    if script.startswith("QAT"):
        assert "Generated calibration config is:" in out and "'tracked_min_output'" in out
        assert (done.tree / "quantization" / "mnist_model.onnx").is_file()
        assert "no CUDA device here" in done.stderr  # the script asks for cuda; the ONNX is traced on the CPU


@pytest.mark.slow
def test_lsq_example_stops_at_tensorrt(tmp_path):
    done = _run(tmp_path, "quantization/LSQ_torch_quantizer.py", train=64, test=64)
    assert done.returncode != 0 and "calibration_config:" in done.stdout
    assert "ModelSpeedupTensorRT needs NVIDIA TensorRT" in done.stderr.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.parametrize(("script", "args"), [
    ("norm_pruning_torch.py", ["--pruner", "l1norm"]),
    ("norm_pruning_torch.py", ["--pruner", "l2norm"]),
    ("fpgm_pruning_torch.py", []),
    ("slim_pruning_torch.py", []),
    ("taylorfo_pruning_torch.py", []),
    ("activation_pruning_torch.py", ["--pruner", "apoz"]),
    ("activation_pruning_torch.py", ["--pruner", "mean"]),
    ("level_pruning_torch.py", []),
    ("admm_pruning_torch.py", []),
])
def test_pruning_examples(tmp_path, script, args):
    out = _ok(_run(tmp_path, f"pruning/{script}", *args, "--pretrain-epochs", "1", "--fine-tune-epochs", "1"))
    assert "simulated prune feature.0 remain/total:" in out or "simulated prune feature.1 remain/total:" in out
    (pre_flops, pre_params), (flops, params) = _flops_params(out)
    if script == "level_pruning_torch.py":  # unstructured: zeros in place, nothing removed
        assert (flops, params) == (pre_flops, pre_params)
    else:  # half the channels (or BatchNorm-selected channels) removed for real
        assert flops < 0.6 * pre_flops and params < 0.6 * pre_params


@pytest.mark.slow
@pytest.mark.parametrize("pruner", ["linear", "agp", "lottery"])
def test_iterative_pruning_example(tmp_path, pruner):
    out = _ok(_run(tmp_path, "pruning/iterative_pruning_torch.py", "--pruner", pruner, "--pretrain-epochs", "1",
                   "--total-iteration", "2"))
    assert out.count("Accuracy:") == 2  # after pre-training and on the best result


@pytest.mark.slow
def test_simulated_annealing_example(tmp_path):
    out = _ok(_run(tmp_path, "pruning/simulated_anealing_pruning_torch.py", "--pretrain-epochs", "1",
                   "--cool-down-rate", "0.5", train=64, test=64))
    accuracies = re.findall(r"Accuracy: ([\d.]+)%", out)
    # pre-training, the start state and 3 perturbations (temperature 100 -> 50 -> 25 -> 12.5 < 20), the chosen
    # allocation after its fine-tune (scored inside compress), the script's own evaluation of get_best_result()'s
    assert len(accuracies) == 1 + 4 + 1 + 1 and accuracies[-1] == accuracies[-2]
