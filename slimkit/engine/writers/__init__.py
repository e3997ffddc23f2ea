"""Output writers: a model written piece by piece (one decoder block at a time) in slimkit's format or GGUF.

See :mod:`.base` for the interface; :data:`WRITERS` maps a format name to its writer.
"""

from slimkit.engine.writers.base import WRITERS, ModelWriter, WriteContext, register_writer
from slimkit.engine.writers.gguf_format import GGUFWriter
from slimkit.engine.writers.slimkit_format import SlimkitWriter, concat_safetensors

__all__ = ["GGUFWriter", "ModelWriter", "SlimkitWriter", "WRITERS", "WriteContext", "concat_safetensors",
           "register_writer"]
