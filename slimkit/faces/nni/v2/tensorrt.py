"""NNI's TensorRT speedup cannot exist here (CUDA + TensorRT only); the name stays and says what does the job."""

from __future__ import annotations

from typing import Any

from slimkit.errors import ConfigError

__all__ = ["ModelSpeedupTensorRT"]

_MESSAGE = (
    "ModelSpeedupTensorRT needs NVIDIA TensorRT on a CUDA GPU, which slimkit does not use. For real int8 speed "
    "use slimkit's own paths: a CNN with static int8 kernels, SmashConfig({'int8_static': {}}) (fbgemm, CPU); "
    "ONNX Runtime int8, SmashConfig({'onnxruntime': {'quantize': 'int8_dynamic'}}); Linear-heavy models, "
    "SmashConfig(['int8_dynamic']); language models on llama.cpp, SmashConfig(['llama_cpp']) after a low-bit "
    "quantizer. Then smash(model, cfg) and measure with slimkit.evaluation.compare. The calibration config "
    "your quantizer exported stays usable: load_calibration(path) reads it back."
)


class ModelSpeedupTensorRT:
    """NNI's ``ModelSpeedupTensorRT(model, input_shape, config=..., batchsize=...)``: refused with the slimkit path.

    Building one raises a :class:`~slimkit.errors.ConfigError` naming slimkit's int8 engines (``int8_static``,
    ``onnxruntime`` with int8, ``int8_dynamic``, ``llama_cpp``): TensorRT is CUDA-only and not part of slimkit.
    """

    def __init__(self, model: Any = None, input_shape: Any = None, config: Any = None, *args: Any,
                 **kwargs: Any) -> None:
        raise ConfigError(_MESSAGE)
