"""Which modules the speedup understands as a unit, and how their channels are laid out."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

CONV_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
#: transposed convs (``weight`` is ``[in, out / groups, *kernel]``); shrunk with ``groups=1`` only
DECONV_TYPES = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


def is_conv1d(module: nn.Module) -> bool:
    """A GPT-style ``Conv1D`` (transformers): a Linear whose weight is stored transposed, ``[in, out]``."""
    weight = getattr(module, "weight", None)
    return (type(module).__name__ == "Conv1D" and isinstance(weight, torch.Tensor) and weight.dim() == 2
            and getattr(module, "nf", None) == weight.shape[1] and set(own_params(module)) <= {"weight", "bias"})


def is_linear(module: nn.Module) -> bool:
    """``nn.Linear`` (or a subclass) or a GPT-style ``Conv1D``."""
    return isinstance(module, nn.Linear) or is_conv1d(module)


def linear_io(module: nn.Module) -> tuple[int, int]:
    """(out_features, in_features) of a Linear or Conv1D."""
    if is_conv1d(module):
        return module.weight.shape[1], module.weight.shape[0]
    return module.out_features, module.in_features


def out_dim(module: nn.Module) -> int:
    """The weight dim that holds the output channels: 1 for ``Conv1D`` and transposed convs, 0 otherwise."""
    return 1 if is_conv1d(module) or isinstance(module, DECONV_TYPES) else 0


def out_major(module: nn.Module, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (shaped like the weight) with the output channels first (a transposed view where they are not)."""
    return tensor.transpose(0, 1) if out_dim(module) else tensor


def own_params(module: nn.Module) -> dict[str, nn.Parameter]:
    """Parameters registered directly on ``module`` (not on its children)."""
    return {k: v for k, v in module._parameters.items() if v is not None}


def is_norm(module: nn.Module) -> bool:
    """BatchNorm, LayerNorm, GroupNorm, RMSNorm, or a look-alike (e.g. LlamaRMSNorm) with 1-D weight/bias."""
    if isinstance(module, (_BatchNorm, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm)):
        return True
    name = type(module).__name__
    params = own_params(module)
    return (
        name.endswith(("RMSNorm", "LayerNorm"))
        and "weight" in params
        and set(params) <= {"weight", "bias"}
        and all(p.dim() == 1 and p.numel() == params["weight"].numel() for p in params.values())
    )


_SHRUNK_TYPES = (*CONV_TYPES, *DECONV_TYPES, nn.Linear, nn.Embedding)


def subclass_problem(module: nn.Module) -> str:
    """Why the speedup cannot shrink a *subclass* of a layer it knows ('' when it can, or for torch's own classes).

    A subclass such as a TF-"SAME" ``class Conv2dSame(nn.Conv2d)`` with its own ``forward`` is shrunk in place
    (keeping its class and forward) when its only state is ``weight`` and ``bias``. Extra parameters, buffers or
    submodules may follow the channels in ways the speedup cannot see, so such a subclass is refused.
    """
    if type(module).__module__.startswith("torch.nn") or not isinstance(module, _SHRUNK_TYPES):
        return ""
    params = module._parameters.items()
    extras = [f"parameter {k!r}" for k, v in params if v is not None and k not in ("weight", "bias")]
    extras += [f"buffer {k!r}" for k, v in module._buffers.items() if v is not None]
    extras += [f"submodule {k!r}" for k in module._modules]
    return ", ".join(extras)


def torch_base(module: nn.Module) -> str:
    """The name of the first ``torch.nn`` class ``module`` derives from (e.g. ``"Conv2d"``)."""
    return next((c.__name__ for c in type(module).__mro__ if c.__module__.startswith("torch.nn")), "Module")


def norm_channel_dim(module: nn.Module) -> int:
    """The activation dim a norm's parameters follow: 1 for BatchNorm/GroupNorm, the last dim otherwise.

    A LayerNorm declared ``data_format="channels_first"`` (ConvNeXt's) normalises dim 1.
    """
    if getattr(module, "data_format", None) == "channels_first":
        return 1
    return 1 if isinstance(module, (_BatchNorm, nn.GroupNorm)) else -1


def norm_problem(module: nn.Module) -> str:
    """Why a norm cannot follow a shrinking channel dim ('' when it can)."""
    if isinstance(module, (nn.LayerNorm, nn.RMSNorm)) and len(module.normalized_shape) != 1:
        return "it normalises over several dims"
    if isinstance(module, nn.GroupNorm) and module.num_groups not in (1, module.num_channels):
        return f"GroupNorm with {module.num_groups} groups needs whole groups of channels"
    return ""
