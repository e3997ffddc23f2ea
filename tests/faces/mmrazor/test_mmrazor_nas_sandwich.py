"""AutoSlim and BigNAS configs (sandwich rule + inplace distillation), AutoSlim's greedy slimming, BigNAS's search.

The configs under ``configs/nas`` are our own, in MMRazor's format. The losses of one sandwich step are recomputed
here from the subnets' outputs; exported subnets are checked to be physically narrower and to compute what the
supernet computes on that subnet.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.engines.nas import GreedyChannelSearch, export_subnet
from slimkit.errors import ConfigError
from slimkit.evaluation import count_parameters
from slimkit.razor import AutoSlim, BigNAS, batch_loss, build, load_config
from slimkit.training import fit
from slimkit.training.distill import KLDivergence
from tests.faces.mmrazor.mm_models import ImageClassifier, images

NAS = Path(__file__).parent / "configs" / "nas"


def digits(n: int = 2, batch: int = 16, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random 8x8 one-channel images with labels (the mechanics need no real digits)."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(batch, 1, 8, 8, generator=g), torch.randint(10, (batch,), generator=g)) for _ in range(n)]


def logits(algo: nn.Module, subnet: dict, x: torch.Tensor) -> torch.Tensor:
    """The supernet's output on ``subnet`` (training-mode batch norms, as in a sandwich step)."""
    algo.set_subnet(subnet)
    with torch.no_grad():
        return algo.architecture(x)


@pytest.fixture(scope="module")
def autoslim() -> AutoSlim:
    torch.manual_seed(0)
    algo = build(load_config(NAS / "autoslim_digits_supernet.py").model)
    fit(algo, digits(), loss=batch_loss, steps=2, lr=1e-2, seed=0, progress=False, num_threads=1)
    return algo


@pytest.mark.slow
def test_autoslim_config_builds_a_width_supernet_and_trains_the_sandwich(autoslim):
    algo = autoslim
    space = algo.mutator.search_space()
    assert space == {"widths.features_0": [8, 16, 24, 32], "widths.features_4": [16, 32, 48, 64],
                     "widths.features_8": [32, 64, 96, 128], "widths.classifier_1": [32, 64, 96, 128]}
    assert algo.sample_kinds == ["max", "min", "random0"]
    x, y = digits(1)[0]
    torch.manual_seed(1)
    losses = {k: v.detach() for k, v in algo(x, y, mode="loss").items()}
    assert set(losses) == {"max_subnet.loss", "min_subnet.loss", "min_subnet.loss_kl", "random0_subnet.loss",
                           "random0_subnet.loss_kl"}
    random_subnet = algo.mutator.current_choices()  # the last member of the sandwich
    teacher = logits(algo, algo.mutator.max_choices(), x)
    smallest = logits(algo, algo.mutator.min_choices(), x)
    assert float(losses["max_subnet.loss"]) == pytest.approx(float(F.cross_entropy(teacher, y)) / 3, rel=1e-5)
    assert float(losses["min_subnet.loss"]) == pytest.approx(float(F.cross_entropy(smallest, y)) / 3, rel=1e-5)
    assert float(losses["min_subnet.loss_kl"]) == pytest.approx(float(KLDivergence()(smallest, teacher)) / 3, rel=1e-4)
    assert float(losses["random0_subnet.loss_kl"]) == pytest.approx(
        float(KLDivergence()(logits(algo, random_subnet, x), teacher)) / 3, rel=1e-4)
    before = {k: v.clone() for k, v in algo.state_dict().items()}
    fit(algo, digits(1), loss=batch_loss, steps=1, lr=1e-2, seed=0, progress=False, num_threads=1)
    assert any(not torch.equal(before[k], v) for k, v in algo.state_dict().items())


@pytest.mark.slow
def test_autoslim_greedy_search_narrows_to_each_flops_target_and_exports_smaller_models(autoslim):
    cfg = load_config(NAS / "autoslim_digits_search.py")
    assert cfg.model.bn_training_mode is True and cfg.train_cfg is None
    loop = build(cfg.test_cfg, model=autoslim, dataloader=digits(1, batch=32, seed=3), progress=False)
    assert isinstance(loop, GreedyChannelSearch) and loop.targets == [0.4e6, 0.2e6]  # M MACs -> FLOPs (2/MAC)
    widest = loop.flops(autoslim.mutator.max_choices())
    assert widest > 0.4e6
    results = loop.run()
    assert [r.target for r in results] == [0.4e6, 0.2e6]
    assert results[0].flops <= 0.4e6 and results[1].flops <= 0.2e6 < results[0].flops
    first, second = ({k: v["chosen"] for k, v in r.subnet.items()} for r in results)
    assert all(second[k] <= first[k] for k in first)  # the second target continues from the first
    assert all(step["flops"] > r.flops or step is r.history[-1] for r in results for step in r.history)
    small = autoslim.export(results[1].subnet)
    convs = [m for m in small.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [second["widths.features_0"], second["widths.features_4"],
                                              second["widths.features_8"]]
    assert small.classifier[1].out_features == second["widths.classifier_1"]
    assert count_parameters(small) < count_parameters(autoslim.export(autoslim.mutator.max_choices()))
    x = digits(1, seed=5)[0][0]
    autoslim.set_subnet(results[1].subnet)
    autoslim.architecture.eval()
    small.eval()
    with torch.no_grad():
        assert torch.allclose(small(x), autoslim.architecture(x), atol=1e-5)


def test_autoslim_refuses_mutators_and_models_it_cannot_read():
    model = build(dict(type="ZooModel", name="digits_cnn", pretrained=False))
    with pytest.raises(ConfigError, match="choice_mode='number' is not supported"):
        AutoSlim(model, mutator=dict(type="OneShotChannelMutator", channel_unit_cfg=dict(
            default_args=dict(candidate_choices=[8, 16], choice_mode="number"))), input_shape=(1, 1, 8, 8))
    with pytest.raises(ConfigError, match="demo_input"):
        AutoSlim(model, mutator=dict(type="OneShotChannelMutator"))
    with pytest.raises(ConfigError, match="must be dict\\(type='OneShotChannelMutator'"):
        AutoSlim(model, mutator=dict(type="SlimmableChannelMutator"), input_shape=(1, 1, 8, 8))
    with pytest.raises(ConfigError, match="num_random_samples must be an integer >= 0"):
        AutoSlim(model, num_random_samples=-1, input_shape=(1, 1, 8, 8))
    with pytest.raises(ConfigError, match="target_flops must be positive"):
        GreedyChannelSearch(AutoSlim(model, input_shape=(1, 1, 8, 8)), target_flops=(), score_fn=lambda m: 0.0,
                            example_inputs=torch.zeros(1, 1, 8, 8))


def test_bignas_config_trains_largest_smallest_and_random_subnets():
    cfg = load_config(NAS / "bignas_cnn_supernet.py")
    torch.manual_seed(0)
    algo = build(cfg.model)
    assert isinstance(algo, BigNAS) and algo.drop_path_rate == 0.2
    largest = algo.mutator.max_choices()
    assert largest["stages.0.width"] == 16 and largest["stages.0.first"] == "k5" and largest["stages.0.extra"] == 1
    assert algo.mutator.min_choices()["stages.1.width"] == 16
    x, y = digits(1)[0]
    losses = {k: v.detach() for k, v in algo(x, y, mode="loss").items()}
    assert set(losses) == {"max_subnet.loss", "min_subnet.loss", "min_subnet.loss_kl", "random0_subnet.loss",
                           "random0_subnet.loss_kl"}
    teacher, smallest = logits(algo, largest, x), logits(algo, algo.mutator.min_choices(), x)
    assert float(losses["min_subnet.loss_kl"]) == pytest.approx(float(KLDivergence()(smallest, teacher)) / 3, rel=1e-4)
    before = [p.detach().clone() for p in algo.parameters()]
    fit(algo, digits(1), loss=batch_loss, steps=1, lr=1e-2, seed=0, progress=False, num_threads=1)
    assert any(not torch.equal(a, p) for a, p in zip(before, algo.parameters(), strict=True))


@pytest.mark.slow
def test_bignas_search_config_finds_a_subnet_under_its_budget_and_exports_it():
    torch.manual_seed(0)
    algo = build(load_config(NAS / "bignas_cnn_supernet.py").model)
    fit(algo, digits(), loss=batch_loss, steps=2, lr=1e-2, seed=0, progress=False, num_threads=1)
    x = digits(1)[0][0]
    search = load_config(NAS / "bignas_cnn_search.py")
    assert search.train_cfg.evaluator.type == "Evaluator"  # MMEngine's Evaluator dict with its metrics list
    loop = build(search.train_cfg, model=algo, dataloader=digits(1, batch=32, seed=3), progress=False)
    result = loop.run()
    assert result.metrics["flops"] <= 0.1e6 and {"accuracy/top1", "accuracy/top5"} <= set(result.metrics)
    subnet = export_subnet(algo, result.best_subnet)
    assert not any(type(m).__name__.startswith(("Dynamic", "Mutable", "OneShot")) for m in subnet.modules())
    chosen = {k: v["chosen"] for k, v in result.best_subnet.items()}
    assert subnet.stages[1].first[0].out_channels == chosen["stages.1.width"]
    algo.eval()
    subnet.eval()
    with torch.no_grad():
        assert torch.allclose(subnet(x), algo.architecture(x), atol=1e-5)


def test_bignas_gives_drop_path_to_the_largest_subnet_of_its_stages_only():
    space = load_config(NAS / "spos_mobilenet_supernet_tiny.py")
    torch.manual_seed(0)
    net = ImageClassifier(build(space.nas_backbone), 96)
    algo = BigNAS(net, drop_path_rate=0.3, num_random_samples=0, backbone_dropout_stages=[2])
    assert algo.drop_blocks and all(".layer2." in f".{n}." for n, m in net.named_modules() if m in algo.drop_blocks)
    seen = []
    algo.before_subnet = lambda kind, _orig=algo.before_subnet: (_orig(kind), seen.append(
        (kind, {b.drop_path_rate for b in algo.drop_blocks})))[0]
    algo(*images(1, batch=2)[0], mode="loss")
    assert seen == [("max", {0.3}), ("min", {0.0})]
    with pytest.raises(ConfigError, match="drop_path_rate must be a number in \\[0, 1\\)"):
        BigNAS(net, drop_path_rate=1.5)


@pytest.mark.parametrize("evaluator", ["Accuracy", dict(type="mmcls.Accuracy", topk=(1, 5)),
                                       dict(type="Evaluator", metrics=[dict(type="Accuracy", topk=(1, 5))]),
                                       [dict(type="Accuracy")]], ids=["name", "dict", "Evaluator", "list"])
def test_a_search_takes_the_evaluator_as_mmengine_writes_it(evaluator):
    torch.manual_seed(0)
    spos = build(dict(type="SPOS", architecture=dict(type="SearchableCNN", stage_widths=[[4, 8]], strides=[1],
                                                     kernel_choices=[3], depth_choices=[0])))
    batches = digits(1, batch=8)
    loop = build(dict(type="mmrazor.EvolutionSearchLoop", dataloader=batches, evaluator=evaluator, max_epochs=1,
                      num_candidates=2, top_k=1, num_mutation=0, num_crossover=0), model=spos, progress=False)
    result = loop.run()
    spos.set_subnet(result.best_subnet)
    spos.eval()
    with torch.no_grad():
        expected = 100.0 * float((spos.architecture(batches[0][0]).argmax(1) == batches[0][1]).float().mean())
    assert result.best_score == pytest.approx(expected)
    with pytest.raises(ConfigError, match="an MMEngine Evaluator dict holds only 'metrics'"):
        build(dict(type="EvolutionSearchLoop", dataloader=batches, evaluator=dict(metrics=[], prefix="x")),
              model=spos)
    with pytest.raises(ConfigError, match="a registered metric name such as 'Accuracy'"):
        build(dict(type="EvolutionSearchLoop", dataloader=batches, evaluator=3), model=spos)
