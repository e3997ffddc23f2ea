"""EvolutionSearchLoop: constraints, the no-subnet error, determinism, resume, bad settings."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from slimkit.engines.nas import measure_subnet
from slimkit.errors import ConfigError, SaveLoadError
from slimkit.razor import SPOS, EvolutionSearchLoop, SearchableCNN, build, calibrate_bn

SMALL = dict(stage_widths=[[4, 8], [8, 12]], strides=[1, 2], kernel_choices=[3, 5], depth_choices=[0, 1])
X1 = torch.rand(1, 1, 8, 8)


@pytest.fixture(scope="module")
def spos() -> SPOS:
    torch.manual_seed(0)
    return SPOS(SearchableCNN(**SMALL)).eval()


def synthetic_score(model: SPOS) -> dict[str, float]:
    """A deterministic score of the active choices: prefers k5 and wide first stages, penalises depth."""
    c = model.mutator.current_choices()
    kernels = sum(v == "k5" for v in c.values())
    return {"accuracy": kernels + c["stages.0.width"] / 4 - 0.5 * c["stages.1.extra"], "other": 1.0}


def loop(spos: SPOS, **kw) -> EvolutionSearchLoop:
    settings = dict(example_inputs=X1, max_epochs=3, num_candidates=8, top_k=3, num_mutation=3, num_crossover=3,
                    mutate_prob=0.3, constraints_range=dict(flops=300_000), units="slimkit", seed=0, progress=False)
    return EvolutionSearchLoop(spos, synthetic_score, **{**settings, **kw})


def test_search_respects_constraints_improves_and_is_deterministic(spos):
    first = loop(spos).run()
    again = loop(spos).run()
    assert first.best_subnet == again.best_subnet and first.history == again.history
    assert first.top_k == again.top_k and first.evaluated == again.evaluated
    assert first.history == sorted(first.history)  # the top k is kept: the best never gets worse
    assert first.metrics["flops"] <= 300_000 and set(first.metrics) == {"accuracy", "other", "flops"}
    chosen = {n: v["chosen"] for n, v in first.best_subnet.items()}
    assert spos.mutator.current_choices() == chosen  # the best subnet is left active
    assert measure_subnet(spos.architecture, chosen, ["flops"], X1)["flops"] == first.metrics["flops"]
    for entry in first.top_k:
        assert entry["metrics"]["flops"] <= 300_000
    other_seed = loop(spos, seed=3, max_epochs=1).run()
    assert other_seed.top_k != loop(spos, max_epochs=1).run().top_k


def test_resume_continues_exactly(spos, tmp_path):
    straight = loop(spos, max_epochs=4).run()
    state = tmp_path / "search.json"
    loop(spos, max_epochs=2, state_file=state).run()
    saved = json.loads(state.read_text())
    assert saved["epoch"] == 2 and len(saved["top_k"]) == 3 and len(saved["history"]) == 2
    resumed = loop(spos, max_epochs=4, resume_from=state, state_file=state).run()
    assert resumed.best_subnet == straight.best_subnet and resumed.history == straight.history
    assert resumed.top_k == straight.top_k
    assert json.loads(state.read_text())["epoch"] == 4
    with pytest.raises(ConfigError, match="another search space"):
        EvolutionSearchLoop(SearchableCNN(), synthetic_score, resume_from=state)
    with pytest.raises(ConfigError, match="searched under constraints_range"):
        loop(spos, resume_from=state, constraints_range=dict(flops=400_000))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SaveLoadError, match="Cannot resume from"):
        loop(spos, resume_from=tmp_path / "bad.json")


def test_unreachable_constraints_name_the_smallest_reachable_flops(spos):
    mutator = spos.mutator
    smallest = {n: c[0] for n, c in mutator.search_space().items()}  # narrowest, k3, depth 0
    minimum = measure_subnet(spos.architecture, smallest, ["flops"], X1)["flops"]
    with pytest.raises(ConfigError) as info:
        loop(spos, constraints_range=dict(flops=minimum - 1), max_sample_attempts=30).run()
    message = str(info.value)
    assert "No subnet met constraints_range after 30 sampling attempts" in message
    assert f"the smallest reachable flops is {minimum:,.0f} FLOPs (2 x MACs) (subnet " in message
    assert "Widen constraints_range" in message and "largest" not in message
    with pytest.raises(ConfigError, match=r"params must lie in \[1,000,000 params, 2,000,000 params\] but the "
                                          "smallest .* and the largest"):
        loop(spos, constraints_range=dict(params=(1e6, 2e6)), max_sample_attempts=5).run()


def test_params_latency_and_ranges(spos):
    result = loop(spos, max_epochs=1, constraints_range=dict(params=(1_000, 4_000), latency=1e6)).run()
    assert 1_000 <= result.metrics["params"] <= 4_000 and result.metrics["latency"] > 0


def test_real_scores_with_bn_calibration():
    torch.manual_seed(0)
    model = build(dict(type="SPOS", architecture=dict(type="SearchableCNN", **SMALL)))
    x, y = torch.rand(32, 1, 8, 8), torch.randint(0, 10, (32,))

    def accuracy(m: nn.Module) -> float:
        return float((m(x, mode="predict") == y).float().mean())

    result = EvolutionSearchLoop(model, accuracy, example_inputs=X1, max_epochs=2, num_candidates=4, top_k=2,
                                 num_mutation=1, num_crossover=1, calibrate_fn=lambda m: calibrate_bn(m, [(x,)]),
                                 score_key="acc", progress=False).run()
    assert 0.0 <= result.best_score <= 1.0 and result.metrics == {"acc": result.best_score}
    assert model.training  # the modes are restored after calibrating and scoring


def test_bad_settings_are_named(spos):
    with pytest.raises(ConfigError, match="Unknown constraint 'flop'.*flops, macs, params, latency"):
        loop(spos, constraints_range=dict(flop=1))
    with pytest.raises(ConfigError, match="low <= high"):
        loop(spos, constraints_range=dict(flops=(5, 1)))
    with pytest.raises(ConfigError, match="must not exceed num_candidates"):
        loop(spos, num_mutation=6, num_crossover=6)
    with pytest.raises(ConfigError, match=r"mutate_prob must be a number in \[0, 1\] \(a probability\), got"):
        loop(spos, mutate_prob=1.5)
    with pytest.raises(ConfigError, match="score_key is 'top1'"):
        loop(spos, score_key="top1", max_epochs=1).run()
    with pytest.raises(ConfigError, match="need example_inputs"):
        loop(spos, example_inputs=None, max_epochs=1).run()
    with pytest.raises(ConfigError, match="model must be a torch.nn.Module"):
        EvolutionSearchLoop("net", synthetic_score)


def test_mmrazors_arguments_dataloader_evaluator_calibration_and_units():
    torch.manual_seed(0)
    model = build(dict(type="SPOS", architecture=dict(type="SearchableCNN", **SMALL)))
    g = torch.Generator().manual_seed(0)
    data = [(torch.rand(16, 1, 8, 8, generator=g), torch.randint(10, (16,), generator=g)) for _ in range(2)]
    calls = []
    norm = model.architecture.stages[0].first.candidates["k3"][1]
    norm.register_forward_pre_hook(lambda m, a: calls.append(m.training))
    loop = build(dict(type="EvolutionSearchLoop", model=model, dataloader=data,
                      evaluator=dict(type="Accuracy", topk=(1, 5), _scope_="mmcls"), max_epochs=1, num_candidates=3,
                      top_k=2, num_mutation=1, num_crossover=1, calibrate_sample_num=16,
                      constraints_range=dict(flops=(0, 0.4)), progress=False))
    assert loop.ranges == {"flops": (0.0, 0.8e6)} and torch.equal(loop.example_inputs, data[0][0][:1])
    result = loop.run()
    assert {"accuracy/top1", "accuracy/top5", "flops"} <= set(result.metrics) and result.metrics["flops"] <= 0.8e6
    assert True in calls  # batch-norm calibration ran (train mode, on one 16-image batch) before scoring
    with pytest.raises(ConfigError, match="give one of the two"):
        EvolutionSearchLoop(model, lambda m: 0.0, dataloader=data, evaluator=dict(type="Accuracy"))
    with pytest.raises(ConfigError, match="MMEngine dataloader config"):
        EvolutionSearchLoop(model, dataloader=dict(batch_size=8, dataset=dict(type="ImageNet")),
                            evaluator=dict(type="Accuracy"))
    with pytest.raises(ConfigError, match="units must be one of 'mmrazor', 'slimkit'"):
        EvolutionSearchLoop(model, lambda m: 0.0, units="M")
