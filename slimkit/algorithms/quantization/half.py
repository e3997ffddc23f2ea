"""half: cast a model's floating-point weights to float16 or bfloat16."""

from __future__ import annotations

from typing import Any

import torch
from ConfigSpace import CategoricalHyperparameter

from slimkit.algorithms.quantization._targets import model_targets, record_coverage
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.errors import SlimkitError
from slimkit.utils import move_inputs

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _cast_inputs_hook(dtype: torch.dtype):
    def hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return move_inputs(args, dtype=dtype), move_inputs(kwargs, dtype=dtype)  # nested floating tensors too

    return hook


def _check_runs(dtype: torch.dtype, device: torch.device) -> None:
    """Refuse a dtype the device cannot compute in, with a clear message instead of a deep kernel error."""
    try:
        layer = torch.nn.Linear(8, 8).to(device=device, dtype=dtype)
        layer(torch.ones(2, 8, device=device, dtype=dtype))
        torch.nn.functional.conv2d(torch.ones(1, 2, 4, 4, device=device, dtype=dtype),
                                   torch.ones(2, 2, 3, 3, device=device, dtype=dtype))
    except RuntimeError as exc:
        raise SlimkitError(
            f"half: {dtype} matmul/conv does not run on {device} with this PyTorch ({exc}). "
            "Set cfg['half_dtype'] = 'bfloat16', or run on CUDA with cfg.device = 'cuda'."
        ) from exc


def cast_model(model: torch.nn.Module, dtype: torch.dtype, cast_inputs: bool) -> torch.nn.Module:
    """Cast floating parameters and buffers to ``dtype`` and optionally cast floating inputs on the way in."""
    model = model.to(dtype)
    if cast_inputs:
        model.register_forward_pre_hook(_cast_inputs_hook(dtype), with_kwargs=True)
    return model


@register
class Half(SlimkitQuantizer):
    """Cast weights and activations to 16-bit floating point (float16 or bfloat16).

    Halves the size of every floating weight. Fast on GPUs; on CPUs without native 16-bit math (AVX2-only
    chips) it saves memory but runs slower than fp32, which `slimkit.evaluation.compare` will tell you.
    """

    algorithm_name = "half"
    references = {"PyTorch": "https://pytorch.org/docs/stable/generated/torch.Tensor.half.html"}
    save_fn = SaveFn.REPLAY
    replay_on_meta = True  # the replay only casts dtypes, which works on meta parameters

    def get_hyperparameters(self) -> list:
        """Target dtype and input casting."""
        return [
            CategoricalHyperparameter("dtype", ["float16", "bfloat16"], default_value="float16",
                                      meta={"desc": "16-bit floating type of weights and activations."}),
            Boolean("cast_inputs", True, meta={"desc": "Cast floating inputs to the 16-bit type in forward."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs floating-point parameters."""
        return isinstance(model, torch.nn.Module) and any(p.is_floating_point() for p in model.parameters())

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return "It casts floating-point parameters and the model has none."

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        dtype = _DTYPES[smash_config["dtype"]]
        device = next(model.parameters()).device
        _check_runs(dtype, device)
        targets = model_targets(model)  # every floating weight is cast: each Linear-like one counts as covered
        cast = [t.name for t in targets
                if all(getattr(model.get_submodule(t.name), p).is_floating_point() for p in t.params)]
        record_coverage(smash_config.state, targets, cast)
        return cast_model(model, dtype, smash_config["cast_inputs"])

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Cast the fresh base model so the saved 16-bit weights load without an upcast."""
        return cast_model(model, _DTYPES[smash_config["dtype"]], smash_config["cast_inputs"])
