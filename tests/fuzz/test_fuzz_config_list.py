"""config_list entries for every pruner and quantizer face (``create_compressor`` + ``compress()``).

Each case builds a compressor named in the registry on a small CNN with a generated config_list and compresses;
it must work or raise a slimkit error naming config_list (or the key at fault).
"""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from slimkit.core import registry
from slimkit.experiment.compressors import available_compressors
from slimkit.faces.auptimizer import create_compressor
from tests.fuzz._fuzz import clear_or_ok, examples
from tests.fuzz.test_fuzz_smash_config import json_values

COMPRESSORS = list(available_compressors())
KEYS = ["sparsity", "sparsity_per_layer", "total_sparsity", "op_types", "op_names", "exclude", "quant_types",
        "quant_bits", "quant_start_step", "max_sparsity_per_layer", "bits", "per_channel", "group_size"]
LAYERS = ["conv1", "bn1", "conv2", "fc", "conv*", "*", "nope", ""]
TYPES = ["Conv2d", "Linear", "BatchNorm2d", "default", "ReLU", "Embedding", "Conv1d", "conv2d", ""]


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.conv2, self.fc = nn.Conv2d(4, 8, 3, padding=1), nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


values = st.one_of(st.floats(-0.5, 1.5), st.floats(allow_nan=True), st.integers(-2, 40), st.booleans(),
                   st.lists(st.sampled_from(TYPES), max_size=3), st.lists(st.sampled_from(LAYERS), max_size=3),
                   st.sampled_from(["weight", "input", "output"]).map(lambda t: [t]),
                   st.dictionaries(st.sampled_from(["weight", "input", "output"]), st.integers(-1, 40), max_size=2),
                   json_values)
entries = st.one_of(st.dictionaries(st.sampled_from(KEYS), values, max_size=4),
                    st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), values, max_size=3),
                    json_values)
#: entries close to valid ones (a known key set, values of the right kind, sometimes out of range)
near_valid = st.fixed_dictionaries({}, optional={
    "sparsity": st.floats(0.0, 1.0), "op_types": st.lists(st.sampled_from(TYPES[:4]), min_size=1, max_size=2),
    "op_names": st.lists(st.sampled_from(LAYERS[:5]), min_size=1, max_size=2), "exclude": st.booleans(),
    "quant_types": st.just(["weight"]), "quant_bits": st.one_of(st.integers(1, 9), st.just({"weight": 8}))})
config_lists = st.one_of(st.lists(near_valid, min_size=1, max_size=3), st.lists(entries, max_size=3), json_values)
WORDS = ("config_list", "compressor", "sparsity", "op_types", "op_names", "exclude", "quant", "bits", "dataloader",
         *registry.all_names())


@examples(550)
@given(st.sampled_from(COMPRESSORS), config_lists)
def test_every_compressor_any_config_list(name, config_list):
    torch.manual_seed(0)
    model, x = SmallCNN().eval(), torch.randn(2, 1, 8, 8)

    def run():
        compressor = create_compressor(model, name, dummy_input=x, config_list=config_list)
        compressor.compress()
        return compressor

    result = clear_or_ok("config_list", run, *WORDS)
    if not isinstance(result, Exception):
        out = result.model(x)
        out = getattr(out, "logits", out)
        assert out.shape == (2, 10)
