"""GGUF export for llama.cpp: Llama-family and Qwen2 causal LMs, float or slimkit-packed low-bit weights."""

from slimkit.compression.gguf.blocks import BLOCK, block_type, pack_blocks
from slimkit.compression.gguf.export import ARCHITECTURES, DTYPES, architecture, export_gguf, supported_names

__all__ = ["ARCHITECTURES", "BLOCK", "DTYPES", "architecture", "block_type", "export_gguf", "pack_blocks",
           "supported_names"]
