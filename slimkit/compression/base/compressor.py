"""``nni.compression.base.compressor`` (NNI 3.0) as ``slimkit.compression.base.compressor``.

``Quantizer(model, config_list, evaluator=None)`` with ``update_calibration_config(calibration_config)``: the
simulation quantizer NNI 3.0's fusion example builds last
(:class:`slimkit.faces.nni.v3.calibrated.CalibrationQuantizer`, under NNI's name).
"""

from slimkit.faces.nni.v3.calibrated import CalibrationQuantizer

#: NNI 3.0's name of :class:`~slimkit.faces.nni.v3.calibrated.CalibrationQuantizer`
Quantizer = CalibrationQuantizer

__all__ = ["Quantizer"]
