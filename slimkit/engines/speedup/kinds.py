"""The unit the tracer handles each module as."""

from __future__ import annotations

from torch import nn

from .attention_spec import attention_spec
from .experts import experts_spec
from .layers import CONV_TYPES, DECONV_TYPES, is_linear, is_norm


def leaf_kind(module: nn.Module) -> str | None:
    """The unit the tracer handles ``module`` as, or None to trace through its forward.

    A module with parameters of its own that is none of these is traced through: its parameters follow the
    channels they touch (see :mod:`.tracer`). A transposed conv with ``groups=1`` is a ``"conv"`` (its channels
    run along dim 1 of its input and output like a conv's; only its weight is laid out ``[in, out, *kernel]``);
    a grouped one keeps its channels (``"pinned_conv"``).
    """
    if isinstance(module, DECONV_TYPES):
        return "conv" if module.groups == 1 else "pinned_conv"
    if isinstance(module, CONV_TYPES):
        if module.groups == 1:
            return "conv"
        if module.groups == module.in_channels:
            return "depthwise"
        return "grouped_conv"
    if is_linear(module):
        return "linear"
    if isinstance(module, nn.Embedding):
        return "embedding"
    if is_norm(module):
        return "norm"
    if attention_spec(module) is not None:
        return "attention"
    if experts_spec(module) is not None:
        return "experts"
    return None
