"""Pre-train, fine-tune with QAT_Quantizer, export the calibration, then ask for a TensorRT engine.

The steps of NNI 2.x's quantization quick start in a user's own script. slimkit has no TensorRT: the last call
raises with the slimkit path to take instead, after the calibration was written. The JSON summary
(``RESULT {...}``) is printed before that call.
"""

from __future__ import annotations

import json
import os

import torch
import torch.nn.functional as F
from lenet import LeNet
from mnist_data import evaluator, trainer
from torch.optim import Adam

from slimkit.compression import ModelSpeedupTensorRT, QAT_Quantizer

torch.manual_seed(0)
model = LeNet()
optimizer = Adam(model.parameters(), lr=3e-3)
for _ in range(3):
    trainer(model, optimizer, F.nll_loss)
pretrained = evaluator(model)

config_list = [
    {"quant_types": ["input", "weight"], "quant_bits": {"input": 8, "weight": 8}, "op_types": ["Conv2d"]},
    {"quant_types": ["output"], "quant_bits": {"output": 8}, "op_types": ["ReLU"]},
    {"quant_types": ["input", "weight"], "quant_bits": {"input": 8, "weight": 8}, "op_names": ["fc1", "fc2"]},
]
dummy_input = torch.rand(32, 1, 28, 28)
quantizer = QAT_Quantizer(model, config_list, optimizer, dummy_input)
quantizer.compress()
trainer(model, optimizer, F.nll_loss)  # quantization-aware fine-tuning
quantized = evaluator(model)

os.makedirs("log", exist_ok=True)
calibration_config = quantizer.export_model("log/mnist_model.pth", "log/mnist_calibration.pth")
print("calibration_config: ", calibration_config)
summary = {name: sorted(entry) for name, entry in calibration_config.items()}
print("RESULT " + json.dumps({"pretrained": pretrained, "quantized": quantized, "calibration": summary}))

engine = ModelSpeedupTensorRT(model, (32, 1, 28, 28), config=calibration_config, batchsize=32)
engine.compress()
