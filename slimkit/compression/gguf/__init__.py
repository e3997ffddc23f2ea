"""GGUF export for llama.cpp, and a torch-shaped module that runs the file with llama-cpp-python.

The export takes Llama-family and Qwen2 causal LMs with float or slimkit-packed low-bit weights; llama_cpp is
imported only when a file is opened.
"""

from slimkit.compression.gguf.blocks import BLOCK, block_type, pack_blocks
from slimkit.compression.gguf.export import ARCHITECTURES, DTYPES, architecture, export_gguf, supported_names
from slimkit.compression.gguf.runtime import LlamaCppModule, open_llama

__all__ = ["ARCHITECTURES", "BLOCK", "DTYPES", "LlamaCppModule", "architecture", "block_type", "export_gguf",
           "open_llama", "pack_blocks", "supported_names"]
