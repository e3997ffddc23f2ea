"""Short quantizer names (as in NNI / Auptimizer experiment files) mapped to quantizer classes."""

from __future__ import annotations

from slimkit.compression.quantization.bnn import BNNQuantizer
from slimkit.compression.quantization.compressor import Quantizer
from slimkit.compression.quantization.config import QuantizationConfigError
from slimkit.compression.quantization.dorefa import DoReFaQuantizer
from slimkit.compression.quantization.lsq import LsqQuantizer
from slimkit.compression.quantization.qat import QATQuantizer
from slimkit.errors import closest

QUANTIZER_CLASSES: dict[str, type[Quantizer]] = {
    "bnn": BNNQuantizer,
    "dorefa": DoReFaQuantizer,
    "lsq": LsqQuantizer,
    "qat": QATQuantizer,
}


def get_quantizer_class(name: str) -> type[Quantizer]:
    """The quantizer class for a short name like ``"qat"`` (error lists the valid names)."""
    if name not in QUANTIZER_CLASSES:
        raise QuantizationConfigError(
            f"Unknown quantizer {name!r}.{closest(str(name), QUANTIZER_CLASSES)} "
            f"Valid names: {', '.join(QUANTIZER_CLASSES)}."
        )
    return QUANTIZER_CLASSES[name]
