"""Other tools' quantized checkpoint formats: compressed-tensors (pack-quantized) and GPTQ, out and in.

Pure pieces, usable alone or by a streaming writer:

- per layer: ``compressed_tensors.layer_tensors`` / ``gptq.layer_tensors`` map one :class:`PackedLinear` to the
  format's tensors, ``layer_from_tensors`` maps them back (no re-quantization either way);
- per model: ``build_config`` / ``parse_config`` write and read the ``quantization_config``; :func:`plan` checks a
  whole model (refusing what a format cannot hold, before anything is written);
- writing: :class:`CheckpointWriter` (open, write one block's tensors, close) and :func:`export_checkpoint`;
- reading: :func:`read_quantization_config`, :func:`load_into`.
"""

from slimkit.compression.formats.reader import QUANT_METHODS, load_into, read_quantization_config, read_tensors
from slimkit.compression.formats.scheme import (
    COMPRESSED_TENSORS,
    FORMAT_ALGORITHMS,
    FORMAT_BITS,
    FORMATS,
    GPTQ,
    FormatError,
    WeightScheme,
    check_format,
    layer_scheme,
    model_schemes,
    supported_text,
)
from slimkit.compression.formats.writer import CheckpointWriter, checkpoint_blocks, export_checkpoint, plan

__all__ = [
    "COMPRESSED_TENSORS",
    "FORMATS",
    "FORMAT_ALGORITHMS",
    "FORMAT_BITS",
    "GPTQ",
    "QUANT_METHODS",
    "CheckpointWriter",
    "FormatError",
    "WeightScheme",
    "check_format",
    "checkpoint_blocks",
    "export_checkpoint",
    "layer_scheme",
    "load_into",
    "model_schemes",
    "plan",
    "read_quantization_config",
    "read_tensors",
    "supported_text",
]
