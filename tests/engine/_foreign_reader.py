"""Run in a subprocess where slimkit cannot be imported: load checkpoints with transformers, write their logits.

Usage: ``python _foreign_reader.py JOBS.json`` where the file lists ``{"folder", "kind", "dequantize", "out"}``
jobs and ``"ids"`` (a safetensors file with ``input_ids``). ``kind`` ``"compressed-tensors"`` loads the folder with
``AutoModelForCausalLM.from_pretrained``; ``"gptq"`` first converts it to compressed-tensors with
``_gptq_to_ct`` (compressed-tensors' own ``convert_checkpoint`` and a GPTQ converter written from the layout).
Prints one JSON line: versions, that slimkit was blocked, and per job how transformers held the layers.
"""

from __future__ import annotations

import importlib.abc
import sys


class _BlockSlimkit(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):  # noqa: D102
        if name == "slimkit" or name.startswith("slimkit."):
            raise ImportError(f"slimkit is blocked in this process ({name})")
        return None


sys.meta_path.insert(0, _BlockSlimkit())
try:
    import slimkit  # noqa: F401
except ImportError:
    BLOCKED = True
else:  # pragma: no cover - the hook failed
    BLOCKED = False

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import compressed_tensors  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import _gptq_to_ct  # noqa: E402


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    ids = load_file(spec["ids"])["input_ids"]
    results = []
    for job in spec["jobs"]:
        folder = job["folder"]
        if job["kind"] == "gptq":
            converted = f"{job['out']}.ct"
            _gptq_to_ct.convert(folder, converted)
            folder = converted
        kwargs = {}
        if job.get("dequantize"):
            kwargs["quantization_config"] = transformers.CompressedTensorsConfig(dequantize=True)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, **kwargs).eval()
        q_proj = model.model.layers[0].self_attn.q_proj
        held = sorted(k for k, _ in q_proj.named_parameters(recurse=False))
        with torch.no_grad():
            logits = model(ids).logits
        save_file({"logits": logits.contiguous()}, job["out"])
        results.append({"folder": job["folder"], "q_proj_tensors": held})
    print(json.dumps({"slimkit_blocked": BLOCKED, "slimkit_in_modules": "slimkit" in sys.modules,
                      "transformers": transformers.__version__, "compressed_tensors": compressed_tensors.__version__,
                      "results": results}))


if __name__ == "__main__":
    main()
