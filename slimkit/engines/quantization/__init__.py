"""NNI-shaped quantization: config_list, wrappers that quantize in forward, QuantGrad, trainable quantizers.

Typical use::

    quantizer = QATEngine(model, [{"quant_types": ["weight", "output"], "quant_bits": 8,
                                   "op_types": ["default"]}], optimizer)
    quantizer.compress()
    ...train as usual (optimizer.step() also calls quantizer.step())...
    quantizer.export_model("model.safetensors", "calibration.safetensors")
    frozen = quantizer.freeze()   # integer weight codes + fixed scales, savable as safetensors

The fbgemm int8 CPU engines (int8_smooth, int8_static, int8_dynamic) live in
:mod:`slimkit.engines.quantization.int8`; ``Int8Linear`` is re-exported here.
"""

from slimkit.engines.quantization.bnn import BNNEngine, BNNGrad
from slimkit.engines.quantization.compressor import Quantizer
from slimkit.engines.quantization.config import QuantizationConfigError, resolve_quant_config_list
from slimkit.engines.quantization.dorefa import DoReFaEngine
from slimkit.engines.quantization.frozen import QuantizedLayer, quantized_layer_specs, rebuild_quantized_layers
from slimkit.engines.quantization.grad import ClipGrad, QuantGrad, QuantType, grad_scale, round_ste
from slimkit.engines.quantization.int8 import Int8Linear
from slimkit.engines.quantization.io import load_calibration
from slimkit.engines.quantization.lsq import LsqEngine
from slimkit.engines.quantization.lsq_plus import LsqPlusEngine
from slimkit.engines.quantization.naive import NaiveQuantizer
from slimkit.engines.quantization.observer import ObserverQuantizer
from slimkit.engines.quantization.observers import affine_qparams, dequantize, fake_quantize, quantize_codes
from slimkit.engines.quantization.qat import QATEngine
from slimkit.engines.quantization.settings import set_quant_scheme_dtype
from slimkit.engines.quantization.wrapper import QuantizerModuleWrapper

__all__ = [
    "BNNEngine",
    "BNNGrad",
    "ClipGrad",
    "DoReFaEngine",
    "Int8Linear",
    "LsqEngine",
    "LsqPlusEngine",
    "NaiveQuantizer",
    "ObserverQuantizer",
    "QATEngine",
    "QuantGrad",
    "QuantType",
    "QuantizationConfigError",
    "QuantizedLayer",
    "Quantizer",
    "QuantizerModuleWrapper",
    "affine_qparams",
    "dequantize",
    "fake_quantize",
    "grad_scale",
    "load_calibration",
    "quantize_codes",
    "quantized_layer_specs",
    "rebuild_quantized_layers",
    "resolve_quant_config_list",
    "round_ste",
    "set_quant_scheme_dtype",
]
