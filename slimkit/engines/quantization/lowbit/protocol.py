"""What the low-bit matmul kernels read from a packed layer, as a type (no import of the layer's module).

:class:`~slimkit.engines.quantization.lowbit.linear.PackedLinear` satisfies it; the kernel modules are typed against
this protocol so that they sit below the layer in the import graph (the layer calls them, they never import it).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch


class PackedLayer(Protocol):
    """A weight stored as packed codes with per-group scales and zeros (layout in :mod:`.linear`)."""

    in_features: int
    out_features: int
    bits: int
    group_size: int
    qweight: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor
    bias: torch.Tensor | None
    input_scale: torch.Tensor | None

    @property
    def kernel_cache(self) -> dict[Any, Any]:
        """State the kernels built for this layer (never saved)."""

    def direct_calls(self) -> dict[Any, Any]:
        """``{(input shape, dtype): (weight or None, call)}``: the paths the layer's forward runs itself."""

    def codes(self) -> torch.Tensor:
        """The integer codes ``q`` as uint8 ``[out, in]``."""

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The dense ``[out, in]`` weight ``(q - z) * s``."""

    def extra_repr(self) -> str:
        """A one-line description for messages."""
