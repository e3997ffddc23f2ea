"""GGUF export for llama.cpp, and a torch-shaped module that runs the file with llama-cpp-python.

The export takes the causal-LM families llama.cpp runs (:data:`FAMILIES`: Llama, Mistral, Granite, Mixtral, OLMo,
Qwen2, Qwen3, Qwen2-MoE, Gemma, Gemma 2, Phi-3, GPT-2, GPT-NeoX, Falcon, StableLM) with float or slimkit-packed
low-bit weights; llama_cpp is imported only when a file is opened.
"""

from slimkit.engines.gguf.blocks import BLOCK, block_type, pack_blocks
from slimkit.engines.gguf.export import DTYPES, architecture, export_gguf
from slimkit.engines.gguf.families import FAMILIES, Family, supported_names
from slimkit.engines.gguf.runtime import LlamaCppModule, open_llama
from slimkit.engines.gguf.tensors import PACKED, Packed

__all__ = ["BLOCK", "DTYPES", "FAMILIES", "Family", "LlamaCppModule", "PACKED", "Packed", "architecture",
           "block_type", "export_gguf", "open_llama", "pack_blocks", "supported_names"]
