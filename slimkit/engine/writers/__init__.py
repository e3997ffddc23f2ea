"""Output writers: a model written piece by piece (one decoder block at a time), in any format slimkit saves.

slimkit's format, GGUF, compressed-tensors and GPTQ. See :mod:`.base` for the interface; :data:`WRITERS` maps a
format name to its writer.
"""

from slimkit.engine.writers.base import RUN_FILE, WRITERS, ModelWriter, WriteContext, register_writer
from slimkit.engine.writers.checkpoint_format import CheckpointFormatWriter, CompressedTensorsWriter, GPTQWriter
from slimkit.engine.writers.gguf_format import GGUFWriter
from slimkit.engine.writers.slimkit_format import SlimkitWriter, concat_safetensors

__all__ = ["CheckpointFormatWriter", "CompressedTensorsWriter", "GGUFWriter", "GPTQWriter", "ModelWriter", "RUN_FILE",
           "SlimkitWriter", "WRITERS", "WriteContext", "concat_safetensors", "register_writer"]
