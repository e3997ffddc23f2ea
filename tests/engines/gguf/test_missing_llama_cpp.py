"""Without llama-cpp-python the error names the extra to install (runs in `make test`: llama_cpp is hidden here)."""

from __future__ import annotations

import sys

import pytest

from slimkit import SmashConfig, smash
from slimkit.engines.gguf import LlamaCppModule
from slimkit.errors import MissingPackageError
from tests.engines.gguf.conftest import tiny_llama


@pytest.fixture
def no_llama_cpp(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` now raises ImportError


def test_runtime_names_the_extra(no_llama_cpp, tmp_path):
    with pytest.raises(MissingPackageError, match=r"pip install 'slimkit\[llamacpp\]'.*make test-llamacpp"):
        LlamaCppModule(tmp_path / "m.gguf")


def test_smash_names_the_extra_before_doing_any_work(no_llama_cpp, tokenizer):
    cfg = SmashConfig(["llama_cpp"])
    cfg.add_tokenizer(tokenizer)
    with pytest.raises(MissingPackageError, match=r"llama_cpp needs .*pip install 'slimkit\[llamacpp\]'"):
        smash(tiny_llama(), cfg, verbose=False)
