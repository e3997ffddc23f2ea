"""Checkpoint formats as objects: one :class:`CheckpointFormat` per format in one table, :data:`FORMATS`.

=====================  ===============================================================  ============================
format                 holds                                                            written / read
=====================  ===============================================================  ============================
``slimkit``            every layer slimkit makes (its algorithms are replayed on load)  ``save_pretrained``, stream
``gguf``               float; packed 4-bit or 8-bit symmetric, groups of 32k            its compiler, stream
``compressed-tensors`` float; packed 4/8-bit, integer zeros, whole groups               save, stream; read
``gptq``               as compressed-tensors, zero points >= 1, dims packable           save, stream; read
``onnx``               float (int8 made inside the graph by its compiler)               its compiler
=====================  ===============================================================  ============================

A format judges layers by their :class:`LayerKind` (:func:`layer_kind` of a module; a recipe's from what each
quantizer declares it produces, :class:`slimkit.core.contract.LayerResult`), so nothing here names an algorithm.
Formats written piece by piece open a :class:`ModelWriter` (open, write one piece's tensors, finish and publish),
used alike by a streaming run and by the in-memory export.
"""

from slimkit.formats.base import CheckpointFormat
from slimkit.formats.kinds import FormatError, LayerKind, layer_kind, symmetric_grid
from slimkit.formats.slimkit_writer import FORMAT_VERSION, SLIMKIT, WEIGHTS_FILE, concat_safetensors
from slimkit.formats.table import FORMATS, export_format, export_names, get_format, read_quantization_config
from slimkit.formats.writer import RUN_FILE, ModelWriter, WriteContext

__all__ = ["CheckpointFormat", "FORMATS", "FORMAT_VERSION", "FormatError", "LayerKind", "ModelWriter", "RUN_FILE",
           "SLIMKIT", "WEIGHTS_FILE", "WriteContext", "concat_safetensors", "export_format", "export_names",
           "get_format", "layer_kind", "read_quantization_config", "symmetric_grid"]
