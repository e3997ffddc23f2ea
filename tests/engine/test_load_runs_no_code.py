"""Loading a saved directory never runs code the directory names, unless the caller opts in.

Each crafted directory tries one way in (a pickle, a factory module, a transformers attribute that is not a
model class, remote code in a Hugging Face config or tokenizer, a module path as an algorithm or zoo name).
A canary file is written if any of that code runs; it must stay absent and the error must say how to opt in.
The opted-in loads (allow_pickle=True, trust_code=True) do run the code: the canary is real.
"""

from __future__ import annotations

import json
import pickle
import sys
import uuid
from pathlib import Path

import pytest

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.errors import SaveLoadError


@pytest.fixture
def crafted(tmp_path, monkeypatch):
    """A real save of the zoo MLP, a canary path, and an importable module that writes the canary."""
    mlp, _ = zoo.load("mlp")
    smash(mlp, SmashConfig(["int8_dynamic"], device="cpu"), verbose=False).save_pretrained(tmp_path / "save")
    canary = tmp_path / "canary"
    module = f"slimkit_canary_{uuid.uuid4().hex[:8]}"
    code = f"from pathlib import Path\nPath({str(canary)!r}).write_text('ran')\n"
    (tmp_path / f"{module}.py").write_text(code + "import torch\ndef make():\n    return torch.nn.Linear(2, 2)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path / "save", canary, module, code
    sys.modules.pop(module, None)


def _edit(folder: Path, **changes) -> dict:
    file = folder / "smash_config.json"
    payload = json.loads(file.read_text())
    for key, value in changes.items():
        node = payload
        *path, last = key.split("__")
        for part in path:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[int(last) if isinstance(node, list) else last] = value
    file.write_text(json.dumps(payload))
    return payload


class _RunsCode:
    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        return exec, (self.code,)


def test_pickle_runs_only_with_allow_pickle(crafted):
    folder, canary, _, code = crafted
    (folder / "model.pt").write_bytes(pickle.dumps(_RunsCode(code)))
    _edit(folder, weights_format="pickle", weights_file="model.pt")
    with pytest.raises(SaveLoadError, match="allow_pickle=True"):
        SmashedModel.from_pretrained(folder)
    assert not canary.exists()
    with pytest.raises(SaveLoadError):  # opted in: the pickle runs (and is no model)
        SmashedModel.from_pretrained(folder, allow_pickle=True)
    assert canary.read_text() == "ran"


def test_factory_module_is_imported_only_with_trust_code(crafted):
    folder, canary, module, _ = crafted
    _edit(folder, base={"kind": "factory", "factory": f"{module}:make", "class": "x", "dtype": "float32"}, applied=[],
          algorithms={}, hyperparameters={})
    with pytest.raises(SaveLoadError, match="trust_code=True"):
        SmashedModel.from_pretrained(folder)
    assert not canary.exists() and module not in sys.modules
    with pytest.raises(SaveLoadError):  # opted in: the module runs, then the weights do not fit its Linear(2, 2)
        SmashedModel.from_pretrained(folder, trust_code=True)
    assert canary.read_text() == "ran"


@pytest.mark.parametrize("field, value", [
    ("base__hf_class", "load_tf_weights_in_bert"),  # a transformers function, not a model class
    ("base__hf_class", "os"),
    ("base__kind", "factory"),  # kind switched without a factory: still needs trust_code
    ("applied__0__name", "os:system"),
    ("base__name", "os:system"),
])
def test_names_in_the_record_are_never_imported_or_called(crafted, field, value):
    folder, canary, module, _ = crafted
    if field.startswith("base__hf_class"):
        _edit(folder, base__kind="hf", base__config={"model_type": "bert"})
    if field == "base__kind":
        _edit(folder, base__factory=f"{module}:make")
    _edit(folder, **{field: value})
    with pytest.raises(SaveLoadError) as info:
        SmashedModel.from_pretrained(folder)
    assert not canary.exists() and module not in sys.modules
    if field == "base__kind":
        assert "trust_code=True" in str(info.value)


def test_remote_code_in_hf_config_and_tokenizer_is_not_run(crafted):
    folder, canary, module, code = crafted
    config = {"model_type": "bert", "vocab_size": 30, "hidden_size": 8, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 16, "auto_map": {"AutoModel": f"{module}.Model"},
              "trust_remote_code": True}
    _edit(folder, base__kind="hf", base__hf_class="BertModel", base__config=config)
    tokenizer = folder / "tokenizer"
    tokenizer.mkdir()
    (tokenizer / "tokenization_canary.py").write_text(code)
    (tokenizer / "tokenizer_config.json").write_text(json.dumps(
        {"auto_map": {"AutoTokenizer": ["tokenization_canary.CanaryTokenizer", None]}, "trust_remote_code": True}))
    with pytest.raises(SaveLoadError, match="tokenizer"):
        SmashedModel.from_pretrained(folder)
    assert not canary.exists() and module not in sys.modules
