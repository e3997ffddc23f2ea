"""``nni.compression.quantization_speedup`` (NNI 3.0) as ``slimkit.compression.quantization_speedup``.

``ModelSpeedupTensorRT`` imports (NNI 2.x's quick start imports it at the top) and raises, when built, an error
naming slimkit's CPU paths: ONNX Runtime int8, ``int8_static`` / ``int8_dynamic``, ``llama_cpp``
(:class:`slimkit.faces.nni.v2.tensorrt.ModelSpeedupTensorRT`).
"""

from slimkit.faces.nni.v2.tensorrt import ModelSpeedupTensorRT

__all__ = ["ModelSpeedupTensorRT"]
