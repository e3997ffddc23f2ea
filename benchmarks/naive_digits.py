"""NNI's naive quantizer (``naive``) beside slimkit's other 8-bit weight quantizers on the digits CNN, in one run.

    PYTHONPATH=. .venv/bin/python benchmarks/naive_digits.py [--threads 1] [--repeats 200] [--bits 8 4]

Each recipe smashes the zoo's digits CNN (trained on sklearn's 8x8 digits): ``naive`` (symmetric per-tensor,
no data), ``qat`` (1 epoch of quantization-aware training, per-channel affine weights + inputs), ``dorefa``
(1 epoch), and ``int8_static`` (fbgemm int8 kernels, calibrated). Prints test accuracy on the 450 held-out
images, size on disk, and the median latency of a batch of 64 (interleaved timing). The frozen
``naive``/``qat``/``dorefa`` layers store uint8 codes and dequantize in the forward pass, so they are smaller,
not faster; ``int8_static`` is the recipe for speed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from slimkit import SmashConfig, smash, zoo
from slimkit.evaluation import size_on_disk
from slimkit.zoo.digits_cnn import accuracy, digits_split

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_latency, machine_line, print_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--bits", type=int, nargs="+", default=[8, 4])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    _, _, x_test, y_test = digits_split()
    batch = x_test[:64]
    base, _ = zoo.load("digits_cnn")
    recipes = {f"naive {b}-bit": ({"naive": {"bits": b}}, False) for b in args.bits}
    recipes.update({"qat 8-bit (1 epoch)": ({"qat": {"bits": 8, "epochs": 1, "num_threads": args.threads}}, True),
                    "dorefa 8-bit (1 epoch)": ({"dorefa": {"bits": 8, "epochs": 1, "num_threads": args.threads}}, True),
                    "int8_static": ({"int8_static": {}}, True)})
    models, seconds = {"fp32 (digits_cnn)": base}, {"fp32 (digits_cnn)": 0.0}
    for name, (spec, data) in recipes.items():
        model, _ = zoo.load("digits_cnn")
        cfg = SmashConfig(spec, device="cpu")
        if data:
            cfg.add_data("Digits")
        cfg.add_example_inputs(batch[:4])
        start = time.perf_counter()
        models[name] = smash(model, cfg, verbose=False)
        seconds[name] = time.perf_counter() - start
    latency = interleaved_latency({n: (lambda m=m: m(batch)) for n, m in models.items()}, args.repeats, 20,
                                  args.threads)
    rows = []
    with tempfile.TemporaryDirectory():
        for name, model in models.items():
            rows.append([name, f"{accuracy(model, x_test, y_test):.4f}", f"{size_on_disk(model) / 1024:.0f} KiB",
                         f"{latency[name]:.3f} ms", f"{seconds[name]:.1f} s"])
    print(machine_line(args.threads))
    print_table(["recipe", "test accuracy", "size", "latency (64)", "smash time"], rows)


if __name__ == "__main__":
    main()
