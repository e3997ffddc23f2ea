"""Pre-train, prune half of every layer but the classifier with L1NormPruner, speed up, fine-tune.

The steps of NNI 2.x's pruning quick start in a user's own script. The last line printed is a JSON summary
(``RESULT {...}``) for the test that runs this file.
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F
from lenet import LeNet
from mnist_data import evaluator, trainer
from torch.optim import Adam

from slimkit.compression import L1NormPruner, ModelSpeedup

torch.manual_seed(0)
model = LeNet()
criterion = F.nll_loss
optimizer = Adam(model.parameters(), lr=3e-3)
for _ in range(3):
    trainer(model, optimizer, criterion)
pretrained = evaluator(model)

# every Linear and Conv2d layer keeps half of its output units, except the classifier fc3
config_list = [{"sparsity_per_layer": 0.5, "op_types": ["Linear", "Conv2d"]}, {"exclude": True, "op_names": ["fc3"]}]
pruner = L1NormPruner(model, config_list)
print(model)  # the selected layers are now wrapped
_, masks = pruner.compress()
kept = {name: float(mask["weight"].sum() / mask["weight"].numel()) for name, mask in masks.items()}
for name, share in kept.items():
    print(f"{name} keeps {share:.2f} of its weights")

pruner._unwrap_model()  # ModelSpeedup wants the plain model back
ModelSpeedup(model, torch.rand(3, 1, 28, 28), masks).speedup_model()
print(model)

optimizer = Adam(model.parameters(), lr=3e-3)  # the layers were replaced: a new optimizer
trainer(model, optimizer, criterion)
finetuned = evaluator(model)

shapes = {name: list(module.weight.shape) for name, module in model.named_modules() if hasattr(module, "weight")}
print("RESULT " + json.dumps({"kept": kept, "shapes": shapes, "pretrained": pretrained, "finetuned": finetuned}))
