"""`import slimkit` stays light: no torch, no optional library; the algorithm registry loads without them too.

Every CLI call and every test that spawns ``python -m slimkit`` pays the import, so what it pulls in is pinned here
(docs/benchmarks.md, "import slimkit"). A fresh interpreter is the only place ``sys.modules`` says what an import
really loaded: one for ``import slimkit`` (fast tier), one for SmashConfig with every algorithm registered (slow tier:
it imports torch).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: optional or heavy libraries that must load only where an algorithm, a face or a command uses them
HEAVY = ("ctranslate2", "optuna", "transformers", "diffusers", "torchao", "optimum", "gguf", "onnx", "onnxruntime",
         "kvpress", "matplotlib", "rich", "huggingface_hub", "datasets", "starlette", "uvicorn", "llama_cpp", "hqq")

_PREAMBLE = """
import json, sys
def loaded(names):
    return sorted(n for n in names if n in sys.modules)
"""

_IMPORT_PROBE = """
import slimkit
from slimkit.cli import build_parser
help_text = build_parser().format_help()
seen = {"torch": loaded(["torch"]), "heavy": loaded(HEAVY), "help": "algorithms" in help_text,
        "slimkit": sorted(m for m in sys.modules if m.startswith("slimkit"))}
from slimkit import zoo
seen["zoo"] = zoo.names()
seen["torch_after_zoo_names"] = loaded(["torch"])
print(json.dumps(seen))
"""

_REGISTRY_PROBE = """
from slimkit import SmashConfig, smash
from slimkit.core import registry
cfg = SmashConfig({"l1_filter": {"sparsity": 0.5}, "c_generate": {}})
try:
    SmashConfig(["l1_filtr"])
    unknown = ""
except Exception as exc:
    unknown = str(exc)
print(json.dumps({"heavy": loaded(HEAVY), "names": registry.names(), "unknown": unknown,
                  "config": [cfg["pruner"], cfg["compiler"], cfg["l1_filter_sparsity"]]}))
"""


def _probe(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line."""
    out = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{_PREAMBLE}{code}"], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_slimkit_and_the_cli_parser_load_no_torch_and_no_optional_library():
    seen = _probe(_IMPORT_PROBE)
    assert seen["torch"] == [], "import slimkit (and python -m slimkit --help) must not import torch"
    assert seen["heavy"] == [], f"import slimkit imported {seen['heavy']}"
    # the package, its lazy-name helper, the CLI and what the parser reads: nothing of config/engine/faces yet
    assert set(seen["slimkit"]) == {"slimkit", "slimkit.cli", "slimkit.core", "slimkit.core.groups",
                                    "slimkit.core.lazy", "slimkit.errors", "slimkit.zoo"}
    assert seen["help"] is True
    assert "minilm" in seen["zoo"] and seen["torch_after_zoo_names"] == [], "`slimkit zoo` lists names without torch"


@pytest.mark.slow  # a fresh interpreter importing torch and every algorithm: ~3 s on an idle 2-core host
def test_smash_config_and_the_whole_registry_load_no_optional_library():
    from slimkit.algorithms import algorithm_modules

    seen = _probe(_REGISTRY_PROBE)
    assert seen["heavy"] == [], (
        f"SmashConfig/smash (every algorithm registered) imported {seen['heavy']}: import optional libraries "
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
    with pytest.raises(AttributeError, match="^module 'slimkit' has no attribute 'no_such_name'$"):
        slimkit.no_such_name  # noqa: B018

