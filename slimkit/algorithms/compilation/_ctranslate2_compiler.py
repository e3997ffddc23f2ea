"""What c_generate, c_translate and c_whisper share: conversion with CTranslate2's own converter, the base class.

The converted folder (``model.bin``, CTranslate2's config and vocabulary, the Hugging Face config) is the saved
model: a save copies it, a load checks it (the checksum recorded at smash time, then its layout) before CTranslate2
opens it.
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

from ConfigSpace import OrdinalHyperparameter, UniformIntegerHyperparameter
from torch import nn

from slimkit.algorithms.compilation._ctranslate2 import (
    FOLDER,
    HF_CONFIG,
    QUANTIZATION,
    CT2Generator,
    CT2Module,
    import_ctranslate2,
)
from slimkit.algorithms.compilation._ctranslate2_files import check_model_bin, file_digest
from slimkit.core.contract import SaveFn, SlimkitCompiler, SmashConfigPrefixWrapper
from slimkit.errors import ConfigError, SaveLoadError


def loader_for(model: Any) -> Any:
    """CTranslate2's converter entry for ``model``'s config class, or None when it has none (or no config)."""
    config = getattr(model, "config", None)
    if not isinstance(model, nn.Module) or config is None:
        return None
    from ctranslate2.converters.transformers import _MODEL_LOADERS

    return _MODEL_LOADERS.get(type(config).__name__)


def supported_configs() -> str:
    """The configuration classes CTranslate2's converter takes, for refusal messages."""
    from ctranslate2.converters.transformers import _MODEL_LOADERS

    return ", ".join(sorted(_MODEL_LOADERS))


def convert(model: nn.Module, tokenizer: Any, weight_bits: int, folder: Path) -> dict[str, Any]:
    """Convert ``model`` (with its tokenizer's vocabulary) into a CTranslate2 folder; ``model`` stays untouched.

    CTranslate2's loaders free the layers they read, so the converter gets a deep copy. Special tokens the tokenizer
    lacks (the tiny byte tokenizer has no bos / unk) are written as the eos token / an empty string, which
    CTranslate2's config needs as strings.
    """
    ctranslate2 = import_ctranslate2()
    from ctranslate2.converters.transformers import TransformersConverter

    twin = copy.deepcopy(model).float().eval()
    if not hasattr(twin.config, "normalize_before"):  # BART-like loaders read it; transformers dropped it
        twin.config.normalize_before = False
    source = folder / "source"
    source.mkdir(parents=True)
    twin.config.save_pretrained(source)

    class _InMemory(TransformersConverter):
        def load_model(self, model_class: Any, path: str, **kwargs: Any) -> Any:
            return twin

        def load_tokenizer(self, tokenizer_class: Any, path: str, **kwargs: Any) -> Any:
            return tokenizer

    out = folder / FOLDER
    module = sys.modules[TransformersConverter.__module__]
    real_gc = module.gc  # its loaders call gc.collect() per layer (~0.5 s each in a large process); refcounts free them
    module.gc = SimpleNamespace(collect=lambda *args: 0)
    try:
        _InMemory(str(source)).convert(str(out), quantization=QUANTIZATION[weight_bits], force=True)
    except (ValueError, NotImplementedError, KeyError, AttributeError) as exc:
        raise ConfigError(f"CTranslate2 {ctranslate2.__version__} cannot convert this {type(model).__name__} "
                          f"({type(exc).__name__}: {exc}).") from exc
    finally:
        module.gc = real_gc
        shutil.rmtree(source, ignore_errors=True)
    config_file = out / "config.json"
    config = json.loads(config_file.read_text())
    config["bos_token"] = config.get("bos_token") or config.get("eos_token")
    config["unk_token"] = config.get("unk_token") or ""
    config_file.write_text(json.dumps(config, indent=2))
    (out / HF_CONFIG).write_text(model.config.to_json_string())
    files = sorted(out.iterdir())
    return {"bytes": sum(f.stat().st_size for f in files), "quantization": QUANTIZATION[weight_bits],
            "ctranslate2": ctranslate2.__version__, "files_sha256": {f.name: file_digest(f) for f in files}}


def saved_folder(directory: Path, state: dict[str, Any]) -> Path:
    """The converted model inside a save, checked before CTranslate2 reads it.

    Complete, every file matching the checksum recorded at smash time (CTranslate2 crashes the process on a damaged
    model.bin or a vocabulary of the wrong size), ``model.bin`` laid out as CTranslate2 writes it.
    """
    folder = directory / FOLDER
    missing = [n for n in ("model.bin", "config.json", HF_CONFIG) if not (folder / n).is_file()]
    if missing:
        raise SaveLoadError(f"{folder} lacks {', '.join(missing)}: the save is incomplete. Copy the whole "
                            "directory, or save the smashed model again.")
    recorded = state.get("files_sha256") or {}
    if not isinstance(recorded, dict):
        raise SaveLoadError(f"{directory / 'smash_config.json'}: the c_* state's files_sha256 must map file names to "
                            f"SHA-256 digests, got {type(recorded).__name__}.")
    for name, digest in sorted(recorded.items()):
        file = folder / str(name)
        if file.parent != folder or not file.is_file() or file_digest(file) != digest:
            raise SaveLoadError(f"{file} is missing or does not match the SHA-256 recorded when the model was "
                                "smashed: the file was damaged or replaced. Copy the save again, or save it again.")
    check_model_bin(folder / "model.bin")  # a save without checksums: its layout at least
    return folder


class CTranslate2Compiler(SlimkitCompiler):
    """What c_generate, c_translate and c_whisper share: convert, run from the converted folder, save it as it is."""

    references = {"GitHub": "https://github.com/OpenNMT/CTranslate2",
                  "Docs": "https://opennmt.net/CTranslate2/guides/transformers.html"}
    tokenizer_required = True
    run_on_cpu = True
    run_on_cuda = False  # the runner here is CTranslate2's CPU build; CUDA would need its CUDA wheel and cuDNN
    save_fn = SaveFn.ARTIFACTS
    extra = "ctranslate2"
    compatible_algorithms = {"pruner": [], "distiller": [], "quantizer": ["half"], "cacher": [], "batcher": []}
    #: the module that runs the converted model
    runner: ClassVar[type[CT2Module]] = CT2Generator

    def get_hyperparameters(self) -> list:
        """Pruna's ``weight_bits`` (with 32 for exact float runs), and the threads CTranslate2 runs on."""
        return [
            OrdinalHyperparameter("weight_bits", [8, 16, 32], default_value=8, meta={
                "desc": "Bits of the converted weights: 8 (int8, computed in int8 on the CPU), 16 (float16; a CPU "
                        "computes it in float32) or 32 (float32). Pruna's default is 16; on a CPU 8 is the fast one."}),
            UniformIntegerHyperparameter("n_threads", 0, 1024, default_value=0, meta={
                "desc": "CTranslate2 threads per batch (intra_threads); 0 uses torch's current thread count."}),
        ]

    def import_algorithm_packages(self) -> dict[str, Any]:
        """Import ctranslate2 (pip install 'slimkit[ctranslate2]')."""
        return {"ctranslate2": import_ctranslate2()}

    def vocabulary_source(self, smash_config: SmashConfigPrefixWrapper) -> Any:
        """The tokenizer whose vocabulary the converter writes (the processor's for Whisper)."""
        return smash_config.tokenizer

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        folder = Path(tempfile.mkdtemp(prefix=f"slimkit-{self.algorithm_name}-"))  # the module removes it
        try:
            summary = convert(model, self.vocabulary_source(smash_config), int(smash_config["weight_bits"]), folder)
            module = self.runner(folder / FOLDER, int(smash_config["n_threads"]), owns_folder=True)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        smash_config.state.update(summary)
        return module

    def save_artifacts(self, model: Any, directory: Path, state: dict[str, Any]) -> None:
        """Copy the converted model (CTranslate2's model.bin, config and vocabulary) into ``directory``."""
        if not isinstance(model, CT2Module):
            raise SaveLoadError(f"A CTranslate2 algorithm saves a CTranslate2 module, got {type(model).__name__}.")
        try:
            shutil.copytree(model.folder, directory / FOLDER)
        except OSError as exc:
            raise SaveLoadError(f"Cannot copy {model.folder} into the save ({exc}): the converted model this module "
                                "runs was removed. Smash the original model again.") from exc

    def load_artifacts(self, directory: Path, smash_config: SmashConfigPrefixWrapper,
                       state: dict[str, Any]) -> CT2Module:
        """Run the saved converted model from the save directory (read, never modified)."""
        return self.runner(saved_folder(directory, state), int(smash_config["n_threads"]))
