"""ONNX export and ONNX Runtime execution: a torch-shaped module around an ``InferenceSession``, and its files."""

from slimkit.engines.onnx.export import compile_onnx, export_onnx, open_saved, quantize_onnx_dynamic, save_files
from slimkit.engines.onnx.module import (
    LEVELS,
    OnnxRuntimeModule,
    output_type_from_json,
    output_type_to_json,
    signature_from_json,
    signature_to_json,
)

__all__ = [
    "LEVELS",
    "OnnxRuntimeModule",
    "compile_onnx",
    "export_onnx",
    "open_saved",
    "output_type_from_json",
    "output_type_to_json",
    "quantize_onnx_dynamic",
    "save_files",
    "signature_from_json",
    "signature_to_json",
]
