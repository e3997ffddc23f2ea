"""NNI 2.x's pruning face on slimkit's engines: signatures, (model, masks), config keys, global ranking, errors."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import slimkit
from slimkit.compression import (
    ActivationAPoZRankPruner,
    ADMMPruner,
    AGPPruner,
    FPGMPruner,
    L1NormPruner,
    L2NormPruner,
    LevelPruner,
    LinearPruner,
    LotteryTicketPruner,
    ModelSpeedup,
    ModelSpeedupTensorRT,
    SlimPruner,
    TaylorFOWeightPruner,
    count_flops_params,
)
from slimkit.engines.pruning import L1FilterPruner
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.errors import ConfigError
from slimkit.faces.nni.v2 import rebuild


class Net(nn.Module):
    """Conv-BN-ReLU x2 + two Linear layers for 8x8 digits, NNI-style layer names."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.fc1, self.fc2 = nn.Linear(16 * 4 * 4, 32), nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = nn.functional.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


@pytest.fixture
def net() -> Net:
    torch.manual_seed(0)
    model = Net()
    with torch.no_grad():  # BatchNorm scales of different sizes, so global ranking has something to rank
        for bn in (model.bn1, model.bn2):
            bn.weight.copy_(torch.linspace(0.05, 1.0, bn.num_features)[torch.randperm(bn.num_features)])
    return model.eval()


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    data = load_digits()
    return torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0, torch.tensor(data.target)


@pytest.fixture
def batches(digits) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = digits
    return [(x[i:i + 64], y[i:i + 64]) for i in range(0, 256, 64)]


def _trainer(batches):
    def trainer(model, optimizer, criterion):
        model.train()
        for data, target in batches:
            optimizer.zero_grad()
            criterion(model(data), target).backward()
            optimizer.step()
    return trainer


def _kept(mask: torch.Tensor) -> int:
    return int((mask.reshape(mask.shape[0], -1).abs().sum(dim=1) != 0).sum())


def test_l1_norm_pruner_returns_model_and_nni2_masks(net):
    pruner = L1NormPruner(net, [{"sparsity_per_layer": 0.5, "op_types": ["Conv2d"]}])
    model, masks = pruner.compress()
    assert model is net and sorted(masks) == ["conv1", "conv2"]
    assert set(masks["conv1"]) == {"weight", "bias"} and masks["conv1"]["weight"].shape == (8, 1, 3, 3)
    assert _kept(masks["conv1"]["weight"]) == 4 and _kept(masks["conv2"]["weight"]) == 8
    norms = net.conv1.module.weight.detach().abs().sum(dim=(1, 2, 3))
    kept = masks["conv1"]["weight"].reshape(8, -1).any(dim=1)
    assert norms[kept].min() >= norms[~kept].max()  # the smallest L1 norms went
    assert pruner.show_pruned_weights() == [("conv1", 4, 8), ("conv2", 8, 16)]


def test_speedup_from_nni2_masks_and_from_the_safetensors_mask_file(net, tmp_path, digits):
    x = digits[0][:4]
    pruner = L2NormPruner(copy.deepcopy(net), [{"sparsity": 0.5, "op_types": ["Conv2d"]}])
    model, masks = pruner.compress()
    expected = model(x)
    pruner.export_model(tmp_path / "model.safetensors", mask_path=tmp_path / "mask.safetensors")
    pruner._unwrap_model()
    ModelSpeedup(model, torch.rand(2, 1, 8, 8), masks).speedup_model()
    assert model.conv1.out_channels == 4 and model.conv2.out_channels == 8
    assert torch.allclose(model(x), expected, atol=1e-5)
    # NNI's documented flow on slimkit's own file: ModelSpeedup(model, dummy_input, masks_file=path)
    again = copy.deepcopy(net)
    again.load_state_dict(slimkit.compression.load_state_dict_file(tmp_path / "model.safetensors"))
    ModelSpeedup(again, dummy_input=torch.rand(2, 1, 8, 8), masks_file=tmp_path / "mask.safetensors").speedup_model()
    assert again.conv2.out_channels == 8 and torch.allclose(again(x), expected, atol=1e-5)
    # NNI's own torch.save'd mask files (tensors only) load too
    torch.save({k: {"weight": v["weight"], "bias": v["bias"]} for k, v in masks.items()}, tmp_path / "nni.pth")
    third = copy.deepcopy(net)
    ModelSpeedup(third, torch.rand(2, 1, 8, 8), str(tmp_path / "nni.pth")).speedup_model()
    assert third.conv1.out_channels == 4
    with pytest.raises(ConfigError, match="got both masks and masks_file"):
        ModelSpeedup(copy.deepcopy(net), torch.rand(2, 1, 8, 8), masks, masks_file=masks)
    with pytest.raises(ConfigError, match="batch_dim=1"):
        ModelSpeedup(copy.deepcopy(net), torch.rand(2, 1, 8, 8), masks, batch_dim=1)


def test_total_sparsity_global_ranking_with_caps(net):
    config = [{"total_sparsity": 0.5, "op_types": ["BatchNorm2d"], "max_sparsity_per_layer": {"bn1": 0.25}}]
    gammas = torch.cat([net.bn1.weight.detach().abs(), net.bn2.weight.detach().abs()])
    opt = slimkit.trace(torch.optim.SGD)(net.parameters(), lr=0.0)  # lr 0: training leaves the scales as they are
    pruner = SlimPruner(net, config, lambda m, o, c: None, opt, nn.CrossEntropyLoss(), training_epochs=1)
    _, masks = pruner.compress()
    kept = {name: m["weight"].bool() for name, m in masks.items()}
    assert int((~kept["bn1"]).sum()) == 2  # capped at 25% of 8
    assert int((~kept["bn1"]).sum() + (~kept["bn2"]).sum()) == 12  # half of all 24 channels
    pruned = gammas[~torch.cat([kept["bn1"], kept["bn2"]])]
    survivors_bn2 = net.bn2.module.weight.detach().abs()[kept["bn2"]]
    assert pruned.max() <= survivors_bn2.min()  # below the cap, the smallest scales went first
    # normal mode: total_sparsity is each layer's sparsity
    torch.manual_seed(0)
    other = Net()
    opt = torch.optim.SGD(other.parameters(), lr=0.0)
    _, masks = SlimPruner(other, [{"total_sparsity": 0.5, "op_types": ["BatchNorm2d"]}], lambda m, o, c: None, opt,
                          nn.CrossEntropyLoss(), 1, mode="normal").compress()
    assert [int((~m["weight"].bool()).sum()) for m in masks.values()] == [4, 8]


def test_slim_pruner_trains_with_the_l1_penalty_then_speeds_up(net, batches):
    opt = slimkit.trace(torch.optim.SGD)(net.parameters(), lr=0.05, momentum=0.9)
    before = net.bn2.weight.detach().abs().sum()
    pruner = SlimPruner(net, [{"total_sparsity": 0.5, "op_types": ["BatchNorm2d"]}], _trainer(batches), opt,
                        nn.CrossEntropyLoss(), training_epochs=2, scale=0.01)
    model, masks = pruner.compress()
    assert net.bn2.module.weight.detach().abs().sum() < before  # the sparsity penalty shrank the scales
    pruner._unwrap_model()
    flops, params, _ = count_flops_params(model, (1, 1, 8, 8), verbose=False)
    ModelSpeedup(model, torch.rand(2, 1, 8, 8), masks).speedup_model()  # BatchNorm masks -> their producers
    assert model.conv1.out_channels + model.conv2.out_channels == 12
    small_flops, small_params, _ = count_flops_params(model, (1, 1, 8, 8), verbose=False)
    assert small_flops < flops and small_params < params


@pytest.mark.parametrize("cls", [TaylorFOWeightPruner, ActivationAPoZRankPruner])
def test_data_pruners_run_the_users_trainer(net, batches, cls):
    seen = []
    trainer = _trainer(batches)

    def counting(model, optimizer, criterion):
        seen.append(type(optimizer).__name__)
        trainer(model, optimizer, criterion)

    opt = slimkit.trace(torch.optim.SGD)(net.parameters(), lr=0.01)
    step = opt.step
    pruner = cls(net, [{"total_sparsity": 0.5, "op_types": ["Conv2d"]}], counting, opt, nn.CrossEntropyLoss(),
                 training_batches=2, mode="global")
    _, masks = pruner.compress()
    assert seen == ["SGD"] and sum(_kept(m["weight"]) for m in masks.values()) == 12
    assert opt.step == step  # the optimizer is handed back unpatched


def test_op_partial_names_and_modes(net):
    copies = [copy.deepcopy(net), copy.deepcopy(net)]
    pruner = FPGMPruner(net, [{"sparsity": 0.25, "op_partial_names": ["conv"]}])
    assert sorted(pruner.compress()[1]) == ["conv1", "conv2"]
    level = LevelPruner(copies[0], [{"sparsity": 0.5, "op_partial_names": ["fc"]}])
    _, masks = level.compress()
    assert sorted(masks) == ["fc1", "fc2"] and float(masks["fc1"]["weight"].mean()) == 0.5
    dependent = L1NormPruner(copies[1], [{"sparsity": 0.5, "op_types": ["Conv2d"]}], mode="dependency_aware",
                             dummy_input=torch.rand(1, 1, 8, 8))
    assert dependent.dependency_aware and len(dependent.compress()[1]) == 2


@pytest.mark.parametrize(("build", "message"), [
    (lambda n: L1NormPruner(n, [{"sparsity": 0.5}], mode="global"), r"mode must be one of 'normal', "
                                                                      r"'dependency_aware'"),
    (lambda n: L1NormPruner(n, [{"total_sparsity": 0.5, "sparsity": 0.3}]), r"gives both 'total_sparsity' and "
                                                                               r"'sparsity'"),
    (lambda n: L1NormPruner(n, [{"sparsity": 0.5, "op_partial_names": ["nope"]}]), r"op_partial_names entry "
                                                                                     r"'nope' is part of no layer"),
    (lambda n: L1NormPruner(n, [{"total_sparsity": 1.5}]), r"'total_sparsity'\] must be a number in \[0, 1\)"),
    (lambda n: LevelPruner(n, [{"sparsity": 0.5}], mode="balance"), r"mode='balance'.* is not supported"),
    (lambda n: SlimPruner(n, [{"sparsity": 0.5}], None, None, None), r"SlimPruner needs trainer="),
    (lambda n: TaylorFOWeightPruner(n, [{"sparsity": 0.5}], lambda *a: None, object(), nn.MSELoss()),
     r"needs traced_optimizer="),
    (lambda n: TaylorFOWeightPruner(n, [{"sparsity": 0.5}], evaluator=object()), r"evaluator=.*NNI 2\.9"),
    (lambda n: ADMMPruner(n, [{"sparsity": 0.5}], None, None, None, 1, 1), r"ADMMPruner needs trainer="),
    (lambda n: AGPPruner(n, [{"sparsity": 0.5}], "l3", 2),
     r"pruning_algorithm 'l3' is unknown\. Did you mean 'l2', 'l1'"),
    (lambda n: AGPPruner(n, [{"sparsity": 0.5}], "l1", 2, speedup=True), r"speedup=True\) needs dummy_input"),
])
def test_errors_name_the_argument(net, build, message):
    with pytest.raises(ConfigError, match=message):
        build(net)


def test_tensorrt_speedup_names_the_slimkit_engines(net):
    with pytest.raises(ConfigError, match=r"TensorRT .* SmashConfig\(\{'int8_static'.*'onnxruntime'.*llama_cpp"):
        ModelSpeedupTensorRT(net, (32, 1, 28, 28), config={}, batchsize=32)


@pytest.mark.parametrize(("cls", "expected"), [(LinearPruner, [0.25, 0.5]), (AGPPruner, [0.4375, 0.5]),
                                              (LotteryTicketPruner, [0.29, 0.5])])
def test_iterative_pruners_follow_their_schedule(net, batches, cls, expected):
    scores = []

    def evaluator(model):
        x, y = batches[0]
        scores.append(float((model(x).argmax(-1) == y).float().mean()))
        return scores[-1]

    initial = copy.deepcopy(net.state_dict())
    pruner = cls(net, [{"sparsity": 0.5, "op_types": ["Linear"]}], "level", 2, keep_intermediate_result=True,
                 evaluator=evaluator)
    assert pruner.compress() is None
    reached = [round(1 - float(r.masks["fc1"]["weight"].mean()), 2) for r in pruner.results]
    assert reached == pytest.approx(expected, abs=0.01)
    task, model, masks, score, config = pruner.get_best_result()
    assert score == max(scores) and config[0]["sparsity"] == pytest.approx(expected[task - 1], abs=0.01)
    assert torch.equal(model.fc1.weight == 0, masks["fc1"]["weight"] == 0)  # masks are in the returned weights
    if cls is LotteryTicketPruner:  # surviving weights rewound to their values before pruning
        kept = masks["fc1"]["weight"].bool()
        assert torch.equal(model.fc1.weight[kept], initial["fc1.weight"][kept])


def test_iterative_pruner_with_speedup_shrinks_each_round(net):
    pruner = AGPPruner(net, [{"sparsity": 0.5, "op_types": ["Conv2d"]}], "l1", 2, speedup=True,
                       dummy_input=torch.rand(1, 1, 8, 8))
    pruner.compress()
    assert net.conv1.out_channels == 4 and net.conv2.out_channels == 8


def test_trace_rebuilds_the_optimizer_on_new_parameters(net):
    opt = slimkit.trace(torch.optim.SGD)(net.parameters(), lr=0.05, momentum=0.9)
    assert isinstance(opt, torch.optim.SGD) and opt.defaults["lr"] == 0.05
    other = Net()
    fresh = rebuild(opt, other)
    assert fresh is not opt and fresh.defaults["momentum"] == 0.9
    assert fresh.param_groups[0]["params"][0] is next(other.parameters())
    plain = torch.optim.SGD(net.parameters(), lr=0.1)
    assert rebuild(plain, other) is plain


def test_engine_names_still_mean_the_nni1_engines(net):
    assert slimkit.compression.L1FilterPruner is L1FilterPruner
    assert issubclass(slimkit.compression.LevelPruner, slimkit.engines.pruning.LevelEngine)
    assert slimkit.faces.nni.v1.LevelPruner is slimkit.engines.pruning.LevelEngine  # NNI 1.x's, by path
    # the face's namespaces are disjoint, so no name of slimkit.compression depends on import order
    engines, quant, v2 = (set(m.__all__) for m in (slimkit.engines.pruning, slimkit.engines.quantization,
                                                   slimkit.faces.nni.v2))
    assert not (engines & v2 or quant & v2 or engines & quant)
    assert slimkit.compression.LevelPruner.__module__ == "slimkit.faces.nni.v2.basic"
    with pytest.raises(PruningConfigError):
        L1NormPruner(net, [{"sparsity": 0.5, "op_types": ["LSTM"]}])


def test_iterative_slim_with_speedup_selects_what_slim_prunes(net):
    """'default' means the round pruner's own types: slim's BatchNorm2d scales, not the convolutions."""
    opt = slimkit.trace(torch.optim.SGD)(net.parameters(), lr=0.01)

    def trainer(model: nn.Module, optimizer: torch.optim.Optimizer, criterion) -> None:
        optimizer.zero_grad()
        criterion(model(torch.rand(8, 1, 8, 8)), torch.arange(8)).backward()
        optimizer.step()

    pruner = AGPPruner(net, [{"sparsity": 0.5, "op_types": ["default"]}], "slim", 2, speedup=True,
                       dummy_input=torch.rand(1, 1, 8, 8),
                       pruning_params={"trainer": trainer, "traced_optimizer": opt, "training_epochs": 1,
                                       "criterion": nn.functional.cross_entropy})
    pruner.compress()
    assert (net.bn1.num_features, net.conv1.out_channels, net.bn2.num_features) == (4, 4, 8)
