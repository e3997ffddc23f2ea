"""The same PTQ for a TensorRT deployment: slimkit refuses it and names the CPU path."""

_base_ = './ptq_native_digits.py'

model = dict(quantizer=dict(type='mmrazor.TensorRTQuantizer'))
