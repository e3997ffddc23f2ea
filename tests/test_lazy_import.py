"""`import slimkit` stays light: no torch, no optional library; the algorithm registry loads without them too.

Every CLI call and every test that spawns ``python -m slimkit`` pays the import, so what it pulls in is pinned here
(docs/benchmarks.md, "import slimkit"). One subprocess: a fresh interpreter is the only place ``sys.modules`` says
what an import really loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: optional or heavy libraries that must load only where an algorithm, a face or a command uses them
HEAVY = ("ctranslate2", "optuna", "transformers", "diffusers", "torchao", "optimum", "gguf", "onnx", "onnxruntime",
         "kvpress", "matplotlib", "rich", "huggingface_hub", "datasets", "starlette", "uvicorn", "llama_cpp", "hqq")

_PROBE = """
import json, sys
def loaded(names):
    return sorted(n for n in names if n in sys.modules)
import slimkit
from slimkit.cli import build_parser
help_text = build_parser().format_help()
after_import = {"torch": loaded(["torch"]), "heavy": loaded(HEAVY),
                "slimkit": sorted(m for m in sys.modules if m.startswith("slimkit"))}
from slimkit import SmashConfig, smash
from slimkit.core import registry
cfg = SmashConfig({"l1_filter": {"sparsity": 0.5}, "c_generate": {}})
try:
    SmashConfig(["l1_filtr"])
    unknown = ""
except Exception as exc:
    unknown = str(exc)
print(json.dumps({"after_import": after_import, "help": "smash" in help_text and "algorithms" in help_text,
                  "after_config": loaded(HEAVY), "names": registry.names(), "unknown": unknown,
                  "config": [cfg["pruner"], cfg["compiler"], cfg["l1_filter_sparsity"]]}))
"""


def test_import_slimkit_loads_no_heavy_library_and_the_registry_is_still_complete():
    from slimkit.algorithms import algorithm_modules

    probe = f"HEAVY = {HEAVY!r}\n{_PROBE}"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])

    after_import = seen["after_import"]
    assert after_import["torch"] == [], "import slimkit (and the CLI parser) must not import torch"
    assert after_import["heavy"] == [], f"import slimkit imported {after_import['heavy']}"
    # the package, its lazy-name helper, the CLI and what the parser reads: nothing of config/engine/faces yet
    assert set(after_import["slimkit"]) == {"slimkit", "slimkit.cli", "slimkit.core", "slimkit.core.groups",
                                            "slimkit.core.lazy", "slimkit.errors", "slimkit.zoo"}
    assert seen["help"] is True

    assert seen["after_config"] == [], (
        f"SmashConfig/smash (every algorithm registered) imported {seen['after_config']}: import optional libraries "
        "inside the function that uses them")
    # the registry is complete all the same: one algorithm per module file, SmashConfig validates against it
    files = {m.rsplit(".", 1)[-1] for m in algorithm_modules()}
    assert set(seen["names"]) == files and {"c_generate", "llama_cpp", "kvpress", "quanto", "torchao"} <= files
    assert seen["config"] == ["l1_filter", "c_generate", 0.5]
    assert seen["unknown"].startswith("Unknown algorithm 'l1_filtr'. Did you mean 'l1_filter'")
    assert all(name in seen["unknown"] for name in files), "the unknown-name error lists every algorithm"


def test_lazy_names_resolve_to_the_same_objects_as_their_modules():
    import slimkit
    import slimkit.core
    import slimkit.zoo
    from slimkit.config import SmashConfig
    from slimkit.core.contract import SlimkitPruner
    from slimkit.engine import smash
    from slimkit.zoo.registry import load

    assert slimkit.SmashConfig is SmashConfig and slimkit.smash is smash
    assert slimkit.core.SlimkitPruner is SlimkitPruner and slimkit.zoo.load is load
    assert slimkit.compression.__name__ == "slimkit.compression"
    assert set(slimkit.__all__) <= set(dir(slimkit))
    try:
        slimkit.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert str(exc) == "module 'slimkit' has no attribute 'no_such_name'"
    else:
        raise AssertionError("an unknown name must raise AttributeError")
