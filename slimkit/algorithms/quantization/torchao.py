"""torchao: PyTorch's quantization library (``quantize_``) on nn.Linear layers, with Pruna's ``quant_type`` names."""

from __future__ import annotations

from typing import Any

import torch
from ConfigSpace import CategoricalHyperparameter, OrdinalHyperparameter

from slimkit.algorithms.quantization._targets import (
    TargetsMixin,
    choose,
    layer_choice_hyperparameters,
    model_targets,
    record_coverage,
    replay_layers,
)
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.core.weights import LINEAR, UNSUPPORTED
from slimkit.errors import ConfigError, SaveLoadError

#: Pruna's ``quant_type`` choices: the data format (int4 / int8 / fp8), ``wo`` weight-only, ``dq`` dynamic
#: activations too, ``dqrow`` fp8 dynamic with one scale per row.
QUANT_TYPES = ("int4dq", "int4wo", "int8dq", "int8wo", "fp8wo", "fp8dq", "fp8dqrow")
#: fp8 matmuls with fp8 activations need torch._scaled_mm: CUDA compute capability >= 8.9 (or MI300+ / XPU)
NEEDS_FP8_GPU = ("fp8dq", "fp8dqrow")
#: Pruna's ``excluded_modules`` -> module-name patterns kept in full precision
EXCLUDED_MODULES = {"none": (), "norm": ("*norm*",), "embedding": ("*embed*",),
                    "norm+embedding": ("*norm*", "*embed*")}
#: state-dict key under which each inner tensor of a torchao weight is saved (plain tensors, no pickle)
_INNER = "weight.torchao_"


def _config(torchao: dict[str, Any], quant_type: str, group_size: int) -> Any:
    """The torchao config object of a Pruna ``quant_type`` (int4 uses torchao's int4-in-int8 layout, CPU and CUDA)."""
    q, per_group = torchao["quantization"], torchao["PerGroup"]
    if quant_type == "int8wo":
        return q.Int8WeightOnlyConfig()
    if quant_type == "int8dq":
        return q.Int8DynamicActivationInt8WeightConfig()
    if quant_type == "int4wo":
        return q.IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=per_group(group_size))
    if quant_type == "int4dq":
        return q.Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4,
                                                       weight_granularity=per_group(group_size))
    if quant_type == "fp8wo":
        return q.Float8WeightOnlyConfig()
    if quant_type == "fp8dq":
        return q.Float8DynamicActivationFloat8WeightConfig()
    return q.Float8DynamicActivationFloat8WeightConfig(granularity=torchao["PerRow"]())


def _check_device(quant_type: str, device: torch.device) -> None:
    if quant_type not in NEEDS_FP8_GPU:
        return
    ok = device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9)
    if not ok:
        raise ConfigError(
            f"torchao_quant_type={quant_type!r} computes fp8 matmuls with fp8 activations, which need an NVIDIA GPU "
            f"of compute capability 8.9 or newer; the model is on {device}. On this device use 'int8dq', 'int8wo', "
            "'int4wo', 'int4dq' or 'fp8wo' (fp8 weights, computed in the model's dtype)."
        )


def _save_inner(module: torch.nn.Module, state: dict[str, Any], prefix: str, local_metadata: Any) -> None:
    """State-dict hook: the torchao weight is saved as its plain inner tensors (``weight.torchao_qdata``...)."""
    weight = state.pop(prefix + "weight", None)
    if weight is None:
        return
    names, _ = weight.__tensor_flatten__()
    for name in names:
        state[prefix + _INNER + name] = getattr(weight, name).detach()


def _load_inner(module: torch.nn.Module, state: dict[str, Any], prefix: str, *args: Any) -> None:
    """Load pre-hook: rebuild the torchao weight from its inner tensors, the layout being the replayed layer's."""
    inner = {k[len(prefix + _INNER):]: state.pop(k) for k in [k for k in state if k.startswith(prefix + _INNER)]}
    if not inner:
        return
    current = module.weight
    names, context = current.__tensor_flatten__()
    if set(names) != set(inner):
        raise SaveLoadError(f"torchao: the saved weight of {prefix[:-1]!r} holds {sorted(inner)}, the rebuilt "
                            f"layer expects {sorted(names)}: the save was made with another quant_type or torchao.")
    for name in names:
        want, got = getattr(current, name), inner[name]
        if got.dtype != want.dtype or got.shape != want.shape:
            raise SaveLoadError(f"torchao: the saved {prefix}{_INNER}{name} is {got.dtype} {tuple(got.shape)}, the "
                                f"rebuilt layer holds {want.dtype} {tuple(want.shape)}: the weights file was edited "
                                "or comes from another model.")
    state[prefix + "weight"] = type(current).__tensor_unflatten__(
        {n: inner[n].to(getattr(current, n).device) for n in names}, context, current.shape, current.stride())


def _hook(module: torch.nn.Module) -> None:
    module.register_state_dict_post_hook(_save_inner)
    module.register_load_state_dict_pre_hook(_load_inner)


@register
class Torchao(TargetsMixin, SlimkitQuantizer):
    """Quantize nn.Linear weights (and optionally activations) into torchao tensor subclasses with ``quantize_``.

    Pruna's ``quant_type`` names: ``int8wo`` / ``int4wo`` store int8 / int4 weights computed in the model's dtype,
    ``int8dq`` / ``int4dq`` also quantize activations per token at run time (int8 matmul), ``fp8wo`` stores fp8
    weights, ``fp8dq`` / ``fp8dqrow`` run fp8 matmuls (CUDA capability >= 8.9 only; refused elsewhere). int4 has
    one scale per ``group_size`` inputs (torchao's int4-in-int8 layout, which runs on the CPU and CUDA). torchao's
    kernels are made for GPUs and ``torch.compile``: on a CPU in eager mode the result is smaller, not faster
    (``slimkit.evaluation.compare`` measures it). Saved as the quantized tensors' plain parts in safetensors.
    """

    algorithm_name = "torchao"
    extra = "torchao"
    references = {"GitHub": "https://github.com/pytorch/ao",
                  "Docs": "https://docs.pytorch.org/ao/stable/quick_start.html"}
    save_fn = SaveFn.REPLAY
    target_kinds = (LINEAR,)
    supported_models = "It quantizes nn.Linear layers (torchao's quantize_ takes exact nn.Linear); the model has none."

    def get_hyperparameters(self) -> list:
        """Pruna's quant_type and excluded_modules, the int4 group size, exclusions."""
        return [
            CategoricalHyperparameter("quant_type", list(QUANT_TYPES), default_value="int8dq", meta={
                "desc": "Quantization type: int4 / int8 / fp8 data; 'wo' weights only (activations stay in the "
                        "model's dtype), 'dq' activations quantized dynamically too, 'dqrow' fp8 with one scale "
                        "per row. fp8dq / fp8dqrow need a CUDA GPU of capability >= 8.9."}),
            CategoricalHyperparameter("excluded_modules", list(EXCLUDED_MODULES), default_value="none", meta={
                "desc": "Module kinds kept in full precision (Pruna's name): Linear layers whose name contains "
                        "'norm' and/or 'embed'."}),
            OrdinalHyperparameter("group_size", [32, 64, 128, 256], default_value=128, meta={
                "desc": "int4 only: inputs sharing one scale; a layer whose input size it does not divide is kept "
                        "in full precision (recorded in the coverage)."}),
            *layer_choice_hyperparameters("['lm_head', '*.attention.*']"),
        ]

    def import_algorithm_packages(self) -> dict[str, Any]:
        """Import torchao (pip install 'slimkit[torchao]')."""
        import torchao.quantization as quantization
        from torchao.quantization.granularity import PerGroup, PerRow

        return {"quantization": quantization, "PerGroup": PerGroup, "PerRow": PerRow}

    def _quantize(self, model: torch.nn.Module, names: list[str], smash_config: SmashConfigPrefixWrapper) -> None:
        torchao = self.import_algorithm_packages()
        chosen = set(names)
        config = _config(torchao, smash_config["quant_type"], smash_config["group_size"])
        torchao["quantization"].quantize_(model, config, filter_fn=lambda module, fqn: fqn in chosen)
        for name in names:
            _hook(model.get_submodule(name))

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        quant_type = smash_config["quant_type"]
        _check_device(quant_type, next(model.parameters()).device)
        exclude = (*smash_config["exclude"], *EXCLUDED_MODULES[smash_config["excluded_modules"]])
        targets = model_targets(model)
        chosen, reasons = choose(targets, self.target_kinds, exclude, smash_config["target_modules"],
                                 self.algorithm_name)
        if quant_type.startswith("int4"):
            group = smash_config["group_size"]
            for t in chosen:
                if model.get_submodule(t.name).in_features % group:
                    reasons[t.name] = f"{UNSUPPORTED}: its {model.get_submodule(t.name).in_features} inputs are " \
                                      f"not a multiple of torchao_group_size={group}"
        names = [t.name for t in chosen if t.name not in reasons]
        if not names:
            raise ConfigError(f"torchao: no layer left to quantize ({reasons[chosen[0].name]}); set "
                              "cfg['torchao_group_size'] to a divisor of the layers' input sizes, e.g. 32.")
        self._quantize(model, names, smash_config)
        smash_config.state.update(layers=names, torchao_type=type(model.get_submodule(names[0]).weight).__name__)
        record_coverage(smash_config.state, targets, names, exclude, reasons=reasons)
        return model

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Quantize the same layers of the fresh base; the saved inner tensors then load into them strictly."""
        names = replay_layers(model, state, "torchao")
        self._quantize(model, names, smash_config)
        return model
