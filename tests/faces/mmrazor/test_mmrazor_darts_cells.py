"""DARTS cells (DartsBackbone) with DiffChoiceRoute: the routing logits train, aliases share them across cells,
the derived cell keeps each node's top-k inputs (physically smaller, same outputs), MMRazor-style subnet files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn

from slimkit.engines.nas import ChosenEdges, DiffChoiceRoute, DiffMutableOP, NasMutator
from slimkit.errors import ConfigError
from slimkit.evaluation import count_parameters
from slimkit.razor import Darts, DartsBackbone, batch_loss, build, load_config
from slimkit.training import fit
from tests.faces.mmrazor.mm_models import ImageClassifier

CONFIG = Path(__file__).parent / "configs" / "nas" / "darts_cell_tiny_supernet.py"


def cell_net(seed: int = 0) -> ImageClassifier:
    cfg = load_config(CONFIG)
    torch.manual_seed(seed)
    return ImageClassifier(build(cfg.nas_backbone), cfg.model.architecture.head.in_channels)


def data(seed: int = 0, n: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)


def routes(algo: Darts) -> dict[str, DiffChoiceRoute]:
    return {n: m for n, m in algo.diff_ops.items() if isinstance(m, DiffChoiceRoute)}


def test_route_mixes_edges_by_softmax_alpha_and_canonicalises_choices():
    torch.manual_seed(0)
    edges = {"p0": nn.Conv2d(2, 2, 3, 1, 1), "p1": nn.Identity(), "p2": nn.Conv2d(2, 2, 1)}
    route = DiffChoiceRoute(edges, num_chosen=2)
    with torch.no_grad():
        route.arch_param.copy_(torch.tensor([0.5, -1.0, 2.0]))
    xs = [torch.randn(1, 2, 4, 4) for _ in range(3)]
    w = torch.softmax(torch.tensor([0.5, -1.0, 2.0]), 0)
    expected = w[0] * edges["p0"](xs[0]) + w[1] * xs[1] + w[2] * edges["p2"](xs[2])
    assert torch.allclose(route(xs), expected, atol=1e-6)
    assert route.choices == [("p0", "p1"), ("p0", "p2"), ("p1", "p2")]
    assert route.argmax_choice() == ("p0", "p2")
    route.current_choice = ["p2", "p0"]  # MMRazor's files list the kept edges by weight
    assert route.current_choice == ("p0", "p2")
    with pytest.raises(ConfigError, match="needs as many inputs"):
        route(xs[:2])
    with pytest.raises(ConfigError, match="num_chosen must be an int in 1..3"):
        DiffChoiceRoute(edges, num_chosen=4)
    with pytest.raises(ConfigError, match=r"is not a choice of this DiffChoiceRoute"):
        route.current_choice = ["p0"]


@pytest.mark.slow
def test_cells_share_alpha_by_alias_and_the_route_logits_step_by_the_held_out_gradient():
    cfg = load_config(CONFIG)
    net = cell_net()
    algo = build(cfg.model, architecture=net, unroll=False, arch_optimizer=dict(type="SGD", lr=1.0))
    backbone = net.backbone
    assert isinstance(backbone, DartsBackbone) and [c.reduction for c in backbone.cells] == [False, True, True, False]
    node = backbone.cells[0].nodes[1]
    assert isinstance(node, DiffChoiceRoute) and node.alias == "normal_n3" and list(node.edges) == [
        "normal_n3_p0", "normal_n3_p1", "normal_n3_p2"]
    assert node.arch_param is backbone.cells[3].nodes[1].arch_param  # one alpha per alias
    assert node.arch_param is not backbone.cells[1].nodes[1].arch_param  # reduce cells have their own
    # 2 cell kinds x (2 routes + 2 + 3 edges)
    assert len(algo.diff_ops) == 4 * 7 and len(algo.arch_parameters()) == 2 * 7
    x, y = data()
    before = [a.detach().clone() for a in algo.arch_parameters()]
    net.train()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    torch.manual_seed(1)  # the same drop-path draws as the step below
    held = F.cross_entropy(net(x[:2]), y[:2])
    grads = torch.autograd.grad(held, algo.arch_parameters(), allow_unused=True)
    net.load_state_dict(state)  # undo the running-statistics update
    torch.manual_seed(1)
    algo(x, y, mode="loss")
    route_alphas = {id(m.arch_param) for m in routes(algo).values()}
    moved = 0
    for b, g, a in zip(before, grads, algo.arch_parameters(), strict=True):
        assert torch.allclose(a.detach(), b - (torch.zeros_like(b) if g is None else g), atol=1e-5)
        moved += id(a) in route_alphas and bool((a.detach() - b).abs().sum() > 0)
    assert moved == 4  # every route's logits moved


@pytest.mark.slow
def test_second_order_step_trains_routes_and_weights_and_restores_nothing_else():
    cfg = load_config(CONFIG)
    net = cell_net()
    algo = build(cfg.model, architecture=net, arch_optimizer=dict(type="SGD", lr=1.0), arch_batches=[data(1)])
    assert algo.unroll
    start = {n: r.arch_param.detach().clone() for n, r in routes(algo).items()}
    weights = [p.detach().clone() for p in net.parameters()]
    fit(algo, [data(0)], loss=batch_loss, steps=2, lr=0.05, optimizer="sgd", seed=0, progress=False, num_threads=1)
    assert all(not torch.equal(r.arch_param.detach(), start[n]) for n, r in routes(algo).items())
    assert any(not torch.equal(p, w) for p, w in zip(net.parameters(), weights, strict=True))
    assert algo.last_arch_loss == algo.last_arch_loss  # a number, not NaN


def test_derived_cell_keeps_the_top_k_inputs_of_each_node_and_computes_what_the_fixed_supernet_does():
    cfg = load_config(CONFIG)
    net = cell_net()
    algo = build(cfg.model, architecture=net)
    normal = net.backbone.cells[0].nodes[1]
    reduce = net.backbone.cells[1].nodes[1]
    with torch.no_grad():
        normal.arch_param.copy_(torch.tensor([3.0, -2.0, 1.0]))  # keeps p0 and p2
        reduce.arch_param.copy_(torch.tensor([-1.0, 2.0, 4.0]))  # keeps p1 and p2
        for cell in net.backbone.cells:
            for node in cell.nodes:
                for edge in node.edges.values():
                    edge.arch_param.copy_(torch.tensor([0.0, 0.0, 0.0, 5.0]))  # sep_conv_3x3 everywhere
    subnet = algo.search_subnet()
    assert subnet["backbone.cells.3.nodes.1"] == {"chosen": ("normal_n3_p0", "normal_n3_p2")}
    assert subnet["backbone.cells.2.nodes.1"] == {"chosen": ("reduce_n3_p1", "reduce_n3_p2")}
    assert subnet["backbone.cells.0.nodes.0.edges.normal_n2_p1"] == {"chosen": "sep_conv_3x3"}
    small = algo.export()
    kept = small.backbone.cells[3].nodes[1]
    assert isinstance(kept, ChosenEdges) and list(kept.edges) == ["normal_n3_p0", "normal_n3_p2"]
    assert kept.index == [0, 2]
    assert not any(isinstance(m, (DiffMutableOP, DiffChoiceRoute)) for m in small.modules())
    dropped = 0  # the dropped edges and the candidates not chosen are gone, nothing else
    for op in algo.diff_ops.values():
        if isinstance(op, DiffChoiceRoute):
            dropped += sum(count_parameters(e) for n, e in op.edges.items() if n not in op.argmax_choice())
        elif not any(op is r.edges[n] and n not in r.argmax_choice() for r in routes(algo).values() for n in r.edges):
            dropped += sum(count_parameters(c) for n, c in op.candidates.items() if n != "sep_conv_3x3")
    assert count_parameters(small) == count_parameters(net) - dropped < count_parameters(net) * 0.8
    for op in algo.diff_ops.values():
        op.fix_argmax()
    net.eval()
    small.eval()
    x, _ = data()
    with torch.no_grad():
        assert torch.allclose(small(x), net(x), atol=1e-5)


def test_mmrazor_style_subnet_file_by_alias_fixes_every_cell(tmp_path):
    net = cell_net()
    chosen = {}
    for kind in ("normal", "reduce"):
        chosen[f"{kind}_n2"] = {"chosen": [f"{kind}_n2_p1", f"{kind}_n2_p0"]}
        chosen[f"{kind}_n3"] = {"chosen": [f"{kind}_n3_p2", f"{kind}_n3_p1"]}
        for e in [f"{kind}_n2_p{i}" for i in range(2)] + [f"{kind}_n3_p{i}" for i in range(3)]:
            chosen[e] = {"chosen": ["skip_connect" if e.endswith("p2") else "sep_conv_3x3"]}
    path = tmp_path / "darts_subnet.yaml"
    path.write_text(yaml.safe_dump(chosen))
    small = build(dict(type="mmrazor.sub_model", cfg=net, fix_subnet=str(path)))
    node = small.backbone.cells[3].nodes[1]
    assert list(node.edges) == ["normal_n3_p1", "normal_n3_p2"] and node.index == [1, 2]
    assert type(node.edges["normal_n3_p2"]).__name__ == "DartsSkipConnect"
    assert type(small.backbone.cells[2].nodes[0].edges["reduce_n2_p0"]).__name__ == "DartsSepConv"
    small.eval()
    assert small(data()[0]).shape == (4, 10)
    # MMRazor's own DARTS subnet files name only the kept edges' ops: the dropped edges need no choice
    kept_only = {k: v for k, v in chosen.items() if not k.endswith("_n3_p0")}
    path.write_text(yaml.safe_dump(kept_only))
    again = build(dict(type="mmrazor.sub_model", cfg=cell_net(), fix_subnet=str(path)))
    assert list(again.backbone.cells[0].nodes[1].edges) == ["normal_n3_p1", "normal_n3_p2"]
    with pytest.raises(ConfigError, match="does not set 'backbone.cells.0.nodes.0.edges.normal_n2_p0'"):
        NasMutator(cell_net()).set_choices({k: v for k, v in chosen.items() if k != "normal_n2_p0"})


def test_darts_backbone_refuses_bad_settings():
    cfg = load_config(CONFIG)
    with pytest.raises(ConfigError, match="out_indices must end with the last cell"):
        build(dict(cfg.nas_backbone, out_indices=(2,)))
    with pytest.raises(ConfigError, match="pool_type must be 'max' or 'avg'"):
        build(dict(type="DartsPoolBN", in_channels=4, out_channels=4, pool_type="min"))
    with pytest.raises(ConfigError, match="auxliary=True needs aux_channels"):
        build(dict(cfg.nas_backbone, auxliary=True))
