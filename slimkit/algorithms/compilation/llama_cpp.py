"""llama_cpp: export a (smashed) causal LM of a family llama.cpp runs to GGUF and run it with llama-cpp-python."""

from __future__ import annotations

import ctypes
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from ConfigSpace import CategoricalHyperparameter, UniformIntegerHyperparameter

from slimkit.core.contract import SaveFn, SlimkitCompiler, SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.quantization.lowbit import PackedLinear
from slimkit.errors import ConfigError, ModelNotSupportedError, SaveLoadError

if TYPE_CHECKING:
    from slimkit.engines.gguf import LlamaCppModule

GGUF_FILE = "model.gguf"
#: Pruna's ``quantization_method`` values: llama.cpp's own quantizer types (k-quants and the legacy ones)
QUANTIZATION_METHODS: tuple[str, ...] = (
    "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_0", "q4_1", "q4_k_s", "q4_k_m", "q5_0", "q5_1", "q5_k_s", "q5_k_m",
    "q6_k", "q8_0", "f16")


def _llama_quantize(llama_cpp: Any, source: Path, target: Path, method: str, threads: int) -> dict[str, int]:
    """Re-quantize the float GGUF ``source`` into ``target`` with llama.cpp's quantizer; count tensors per type.

    llama.cpp falls back to another type for a matrix whose rows do not fit the k-quant block (256 values), so
    the counts say what the file really holds.
    """
    import gguf

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{method.upper()}")
    params.nthread = threads
    code = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    if code != 0:
        raise ModelNotSupportedError(f"llama.cpp's quantizer failed ({code}) to write {method} from the exported GGUF.")
    counts: dict[str, int] = {}
    for tensor in gguf.GGUFReader(str(target)).tensors:
        counts[tensor.tensor_type.name] = counts.get(tensor.tensor_type.name, 0) + 1
    return dict(sorted(counts.items()))


@register
class LlamaCpp(SlimkitCompiler):
    """Write the model into one GGUF file (weights + tokenizer) and run it with llama.cpp's CPU engine.

    Llama, Mistral, Granite, Mixtral, OLMo, Qwen2, Qwen3, Qwen2-MoE, Gemma, Gemma 2, Phi-3, GPT-2, GPT-NeoX, Falcon
    and StableLM causal LMs (one table, :mod:`slimkit.engines.gguf.families`; MoE experts as GGUF's 3-D
    ``ffn_*_exps``). Float weights go out as F32, F16 or Q8_0; slimkit's packed
    low-bit layers keep their exact grid: 4-bit group 32 (or a multiple of 32) as Q4_1 (asymmetric, the min
    rounded to fp16) or Q4_0 (``sym=True``), 8-bit symmetric as Q8_0. So ``gptq`` (``group_size=32``) followed
    by ``llama_cpp`` runs GPTQ's weights at llama.cpp speed; other layouts are refused with the settings that
    have a GGUF twin. The smashed model's forward returns logits for every position and ``generate()`` continues
    token ids (``generate_text()`` strings, with the file's tokenizer). With Pruna's ``quantization_method``
    (``q4_k_m``, ``q5_k_m``, ``q6_k``, ``q8_0``, ...) llama.cpp's own quantizer rewrites a float export in its
    k-quant or legacy types instead (the state counts the tensor types it chose). Saving writes ``model.gguf``; loading
    opens it directly (no torch weights, no base model). Needs ``pip install 'slimkit[llamacpp]'``.
    """

    algorithm_name = "llama_cpp"
    references = {"llama.cpp": "https://github.com/ggml-org/llama.cpp",
                  "GGUF": "https://github.com/ggml-org/ggml/blob/master/docs/gguf.md",
                  "llama-cpp-python": "https://llama-cpp-python.readthedocs.io/"}
    tokenizer_required = True
    run_on_cpu = True
    run_on_cuda = False
    save_fn = SaveFn.ARTIFACTS
    extra = "llamacpp"
    stream_format = "gguf"  # a streamed smash writes the GGUF tensor by tensor (slimkit.formats)
    compatible_algorithms = {"quantizer": ["rtn", "hqq", "gptq", "awq", "half"], "cacher": [], "batcher": []}

    def get_hyperparameters(self) -> list:
        """Float type of the unquantized matrices, llama.cpp's quantization method, threads, context length."""
        return [
            CategoricalHyperparameter("quantization_method", [None, *QUANTIZATION_METHODS], default_value=None, meta={
                "desc": "llama.cpp's quantizer type for the whole file (Pruna's name): k-quants q2_k ... q6_k, "
                        "q4_0/q4_1/q5_0/q5_1/q8_0 or f16, written by llama.cpp from a float export; matrices whose "
                        "rows are not a multiple of 256 get llama.cpp's fallback type. None: slimkit writes the file "
                        "itself (dtype for float matrices, quantized layers kept exactly)."}),
            CategoricalHyperparameter("dtype", ["f32", "f16", "q8_0"], default_value="f32", meta={
                "desc": "GGUF type of the float (not slimkit-quantized) matrices, e.g. the embedding: f32, f16, or "
                        "q8_0 (llama.cpp's round-to-nearest 8-bit); norms and biases stay f32."}),
            UniformIntegerHyperparameter("n_threads", 0, 1024, default_value=0, meta={
                "desc": "llama.cpp threads; 0 uses torch's current thread count."}),
            UniformIntegerHyperparameter("n_ctx", 16, 131072, default_value=2048, meta={
                "desc": "Context length (KV cache size), capped at the model's max_position_embeddings (and at its "
                        "sliding window where llama.cpp's graph for the family attends over the whole context)."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """A Hugging Face causal LM of a family llama.cpp runs (smashed or not)."""
        from slimkit.engines.gguf import architecture  # the optional gguf package loads when llama_cpp is used

        try:
            architecture(model)
        except ModelNotSupportedError:
            return False
        return True

    def model_check_reason(self) -> str:
        """Which models are supported."""
        from slimkit.engines.gguf import supported_names

        return f"llama.cpp runs {supported_names()} here; other architectures are not exported."

    def import_algorithm_packages(self) -> dict[str, Any]:
        """Import llama_cpp (pip install 'slimkit[llamacpp]')."""
        from slimkit.engines.gguf.runtime import import_llama_cpp

        return {"llama_cpp": import_llama_cpp()}

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        from slimkit.engines.gguf import LlamaCppModule, export_gguf

        method = smash_config["quantization_method"]
        if method is not None and any(isinstance(m, PackedLinear) for m in model.modules()):
            raise ConfigError(f"llama_cpp_quantization_method={method!r} quantizes float weights, and this model's "
                              "layers are already quantized by a slimkit quantizer (written exactly as Q4_0/Q4_1/"
                              "Q8_0). Leave llama_cpp_quantization_method unset, or drop the quantizer.")
        llama_cpp = self.import_algorithm_packages()["llama_cpp"]
        folder = Path(tempfile.mkdtemp(prefix="slimkit-gguf-"))
        try:
            exported = folder / (GGUF_FILE if method is None else "float.gguf")
            summary = export_gguf(model, exported, smash_config.tokenizer,
                                  smash_config["dtype"] if method is None else "f32")
            if method is not None:
                threads = int(smash_config["n_threads"]) or torch.get_num_threads()
                types = _llama_quantize(llama_cpp, exported, folder / GGUF_FILE, method, threads)
                exported.unlink()
                summary["bytes"] = (folder / GGUF_FILE).stat().st_size
                summary["file_type"] = "MOSTLY_F16" if method == "f16" else f"MOSTLY_{method.upper()}"
                smash_config.state.update(quantization_method=method, tensor_types=types)
            n_ctx = min(int(smash_config["n_ctx"]), int(summary["context_limit"]))
            module = LlamaCppModule(folder / GGUF_FILE, smash_config["n_threads"], n_ctx)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        weakref.finalize(module, shutil.rmtree, folder, True)
        smash_config.state.update(gguf_file=GGUF_FILE, gguf_bytes=summary["bytes"], n_ctx=n_ctx,
                                  file_type=summary["file_type"], architecture=summary["architecture"])
        return module

    def stream_finish(self, smash_config: SmashConfigPrefixWrapper, summary: dict[str, Any]) -> None:
        """Record the GGUF a streaming run wrote (as ``_apply`` does for the file it exports)."""
        if smash_config["quantization_method"] is not None:
            raise ConfigError("llama_cpp_quantization_method re-quantizes a whole float export, which a streamed smash "
                              "does not make; smash in memory, or quantize with rtn/gptq (written as Q4_1/Q4_0/Q8_0).")
        written = summary["writer"]
        smash_config.state.update(gguf_file=GGUF_FILE, gguf_bytes=written["bytes"],
                                  n_ctx=min(int(smash_config["n_ctx"]), int(written["context_limit"])),
                                  file_type=written["file_type"], architecture=written["architecture"])

    def save_artifacts(self, model: Any, directory: Path, state: dict[str, Any]) -> None:
        """Copy the GGUF file the model runs into ``directory``."""
        from slimkit.engines.gguf import LlamaCppModule

        if not isinstance(model, LlamaCppModule):
            raise SaveLoadError(f"llama_cpp saves a LlamaCppModule, got {type(model).__name__}.")
        try:
            shutil.copyfile(model.gguf_path, directory / GGUF_FILE)
        except OSError as exc:
            raise SaveLoadError(f"Cannot copy {model.gguf_path} into the save ({exc}): the GGUF file this model "
                                "runs was removed. Smash the original model again.") from exc

    def load_artifacts(self, directory: Path, smash_config: SmashConfigPrefixWrapper,
                       state: dict[str, Any]) -> LlamaCppModule:
        """Open the saved GGUF in llama.cpp; the save directory is read, never modified."""
        from slimkit.engines.gguf import LlamaCppModule

        path = directory / GGUF_FILE
        if not path.is_file():
            raise SaveLoadError(f"{path} is missing: the save is incomplete. Copy the whole directory, or save the "
                                "smashed model again.")
        return LlamaCppModule(path, smash_config["n_threads"], int(state.get("n_ctx", smash_config["n_ctx"])))
