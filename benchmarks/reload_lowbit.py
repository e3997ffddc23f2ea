"""Reload cost of a 4-bit SmolLM2-135M save: slimkit's meta-parameter skeleton vs a full fp32 rebuild.

    .venv/bin/python benchmarks/reload_lowbit.py [--repeats 3]

Each load runs in a fresh process (so peak RSS is the load's own); the baseline is the same code with the
skeleton disabled (``rtn.replay_on_meta = False``: build the fp32 model with random init, swap in packed layers,
load). Prints median load time, peak RSS, peak above the RSS just before loading, and whether both give the
same logits.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time, torch
from safetensors.torch import save_file
from slimkit import SmashedModel
from slimkit.core import registry

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024

mode, save, out = sys.argv[1:4]
if mode == "fp32 rebuild":
    registry.get("rtn").replay_on_meta = False
torch.set_num_threads(1)
before = status("VmRSS")
start = time.perf_counter()
model = SmashedModel.from_pretrained(save)
seconds = time.perf_counter() - start
peak = status("VmHWM")
with torch.no_grad():
    save_file({"logits": model(input_ids=torch.arange(32).view(1, 32)).logits.contiguous()}, out)
print(json.dumps({"load_s": seconds, "peak_mb": peak, "extra_mb": peak - before}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import torch
    from safetensors.torch import load_file

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import machine_line, print_table

    from slimkit import SmashConfig, smash, zoo

    with tempfile.TemporaryDirectory() as tmp:
        save = Path(tmp) / "smollm2-rtn4"
        model, _ = zoo.load("smollm2-135m")
        smash(model, SmashConfig({"rtn": {"bits": 4, "group_size": 128}}, device="cpu"), verbose=False
              ).save_pretrained(save)
        del model
        size = sum(f.stat().st_size for f in save.iterdir() if f.is_file()) / 1e6
        runs: dict[str, list[dict]] = {"fp32 rebuild": [], "slimkit (meta skeleton)": []}
        for _ in range(args.repeats):
            for mode in runs:  # alternate, so machine noise hits both
                out = Path(tmp) / f"{len(runs[mode])}-{mode[:4]}.safetensors"
                done = subprocess.run([sys.executable, "-c", CHILD, mode, str(save), str(out)], capture_output=True,
                                      text=True, check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
                runs[mode].append({**json.loads(done.stdout.strip().splitlines()[-1]), "out": out})
        same = torch.equal(load_file(runs["fp32 rebuild"][0]["out"])["logits"],
                           load_file(runs["slimkit (meta skeleton)"][0]["out"])["logits"])

    def median(mode: str, key: str) -> float:
        values = sorted(r[key] for r in runs[mode])
        return values[len(values) // 2]

    print(f"\nSmolLM2-135M rtn 4-bit group 128 save ({size:.0f} MB); fresh process per load, 1 torch thread; "
          f"{machine_line(1)}")
    print_table(["load path", "load s", "peak RSS MB", "peak above pre-load RSS MB"],
                [[m, f"{median(m, 'load_s'):.2f}", f"{median(m, 'peak_mb'):.0f}", f"{median(m, 'extra_mb'):.0f}"]
                 for m in runs])
    print(f"both paths give identical logits: {same}")


if __name__ == "__main__":
    main()
