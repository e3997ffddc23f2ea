"""The pieces under autoslim/bignas (sandwich loss, width replay) and darts/dsnas (conv choices, export, replay),
checked on a tiny CNN without training: exports compute the supernet's path, costs and losses are what they say."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from slimkit import SmashConfig, smash
from slimkit.algorithms.distillation._conv_choices import ConvChoices, candidates
from slimkit.algorithms.distillation._width_nas import sandwich_loss
from slimkit.core import registry
from slimkit.engines.nas import DiffMutableOP, NasMutator, OneHotMutableOP, make_searchable
from slimkit.errors import ConfigError
from slimkit.evaluation import count_parameters


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                         nn.ReLU(), nn.Conv2d(8, 16, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))


X = torch.randn(4, 3, 6, 6)


@pytest.mark.parametrize("op_type", [DiffMutableOP, OneHotMutableOP])
def test_conv_choices_export_the_supernet_path_smaller(op_type):
    model = _cnn().eval()
    space = ConvChoices(model, X[:1], op_type, arch_lr=0.1, weight_decay=0.0)
    assert sorted(space.ops) == ["0", "3"]  # the 1x1 conv is not searched
    assert space.ops["0"].choices == ["conv", "point", "sep"] and space.ops["3"].choices[-1] == "skip"
    assert space.total == 36 * (3 * 8 * 9 + 8 * 8 * 9 + 8 * 16) + 16 * 4
    assert space.costs["3"].tolist() == [36 * 64 * 9, 36 * 64, 36 * (8 * 9 + 64), 0.0]
    with torch.no_grad():  # argmax: point for the first conv, skip for the second
        space.ops["0"].arch_param.copy_(torch.tensor([0.0, 5.0, 0.0]))
        space.ops["3"].arch_param.copy_(torch.tensor([0.0, 0.0, 0.0, 5.0]))
    student, state = space.export(training=False)
    assert state["choices"] == {"0": "point", "3": "skip"}
    assert isinstance(student[3], nn.Identity) and student[0].kernel_size == (1, 1)
    assert not any(isinstance(m, DiffMutableOP) for m in student.modules())
    with torch.no_grad():
        torch.testing.assert_close(student(X), space.supernet.eval()(X), rtol=0, atol=0)
        torch.testing.assert_close(student[0].weight, model[0].weight[:, :, 1:2, 1:2])  # the centre taps
    assert count_parameters(student) < count_parameters(model)
    assert state["macs_after"] == 36 * 3 * 8 + 36 * 8 * 16 + 16 * 4 and state["export_max_abs_diff"] == 0.0


def test_expected_macs_is_the_softmax_weighted_cost():
    space = ConvChoices(_cnn(), X[:1], DiffMutableOP, arch_lr=0.1, weight_decay=0.0)
    with torch.no_grad():
        for op in space.ops.values():
            op.arch_param.zero_()  # uniform choice
    expected = (sum(space.costs["0"].tolist()) / 3 + sum(space.costs["3"].tolist()) / 4) / space.total
    assert float(space.expected_macs().detach()) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("name", ["darts", "dsnas"])
def test_conv_choice_replay_rebuilds_and_refuses_what_does_not_fit(name):
    algorithm, model = registry.get(name)(), _cnn()
    rebuilt = algorithm.replay(model, None, {"choices": {"0": "sep", "3": "skip"}})
    assert isinstance(rebuilt[3], nn.Identity) and rebuilt[0][0].groups == 3
    assert set(dict(rebuilt[0].named_parameters())) == set(dict(candidates(nn.Conv2d(3, 8, 3, padding=1))["sep"]
                                                                .named_parameters()))
    with pytest.raises(ConfigError, match=r"layer '5' cannot take the saved choice 'point' \(its candidates: \[\]\)"):
        algorithm.replay(_cnn(), None, {"choices": {"5": "point"}})
    with pytest.raises(ConfigError, match=r"layer '0' cannot take the saved choice 'skip'"):
        algorithm.replay(_cnn(), None, {"choices": {"0": "skip"}})
    with pytest.raises(ConfigError, match=f"saved {name} state has no 'choices'"):
        algorithm.replay(_cnn(), None, {})


def test_sandwich_loss_trains_the_widest_on_labels_the_others_on_its_outputs():
    supernet = make_searchable(_cnn(), X[:1], (0.5, 1.0))
    mutator, targets = NasMutator(supernet), torch.tensor([0, 1, 2, 3])
    loss = sandwich_loss(mutator, 0, random.Random(0), temperature=2.0)(supernet, (X, targets))
    mutator.set_choices(mutator.max_choices())
    wide = supernet(X)
    mutator.set_choices(mutator.min_choices())
    narrow = supernet(X)
    kl = 4.0 * F.kl_div(F.log_softmax(narrow / 2, 1), F.log_softmax(wide.detach() / 2, 1), reduction="batchmean",
                        log_target=True)
    torch.testing.assert_close(loss, (F.cross_entropy(wide, targets) + kl) / 2)
    with pytest.raises(ConfigError, match="trains the widest subnet on the batch targets"):
        sandwich_loss(mutator, 0, random.Random(0), 1.0)(supernet, {"x": X})


@pytest.mark.parametrize("name", ["autoslim", "bignas"])
def test_width_replay_needs_the_layer_shapes(name):
    with pytest.raises(ConfigError, match=f"saved {name} state has no 'layer_shapes'"):
        registry.get(name)().replay(_cnn(), None, {})
    shrunk = registry.get(name)().replay(_cnn(), None, {"layer_shapes": {"0": [3, 4], "1": [4], "3": [4, 8]}})
    assert shrunk[0].out_channels == 4 and shrunk[1].num_features == 4 and shrunk[3].in_channels == 4


def _darts_probabilities(unroll: bool) -> dict:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16, 3, 6, 6, generator=g), torch.randint(0, 4, (16,), generator=g))
    cfg = SmashConfig()
    cfg["distiller"] = "darts"
    for key, value in {"steps": 2, "batch_size": 8, "arch_lr": 0.5, "unroll": unroll, "unroll_lr": 0.5,
                       "num_threads": 1}.items():
        cfg[f"darts_{key}"] = value
    cfg.add_data((data, data, data), collate_fn=lambda b: (torch.stack([x for x, _ in b]),
                                                           torch.stack([y for _, y in b])))
    smashed = smash(_cnn(), cfg, experimental=True)
    assert smashed.smash_config["darts_unroll"] is unroll
    return smashed.applied[0]["state"]["probabilities"]


@pytest.mark.slow
def test_darts_unroll_takes_the_second_order_step():
    first, second = _darts_probabilities(False), _darts_probabilities(True)
    assert sorted(first) == sorted(second) == ["0", "3"]
    assert any(abs(a - b) > 1e-3 for n in first for a, b in zip(first[n], second[n], strict=True))
