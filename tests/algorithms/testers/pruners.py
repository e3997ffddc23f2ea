from __future__ import annotations

import torch

from slimkit.evaluation import count_macs, count_parameters, size_on_disk
from slimkit.utils import model_device, move_inputs, run_model
from slimkit.zoo.digits_cnn import accuracy, digits_split
from tests.algorithms.testers.base import AlgorithmTesterBase

REJECT = ["no_weights", "not_a_module"]
DIGITS_SHAPES = {"features.0": (16, 1), "features.4": (32, 16), "features.8": (64, 32), "classifier.1": (64, 256),
                 "classifier.3": (10, 64)}
# digits_cnn at sparsity 0.5: every conv and the hidden Linear keep half their filters, the classifier its 10 rows
DIGITS_HALF_PARAMS = 16 * 9 + 32 + 32 * 16 * 9 + 64 + 64 * 32 * 9 + 128 + (256 * 64 + 64) + (64 * 10 + 10)
RESNET_SHAPES = {"conv1": (8, 3), "layer1.0.conv1": (8, 8), "layer1.0.conv2": (8, 8), "layer2.0.conv1": (16, 8),
                 "layer2.0.conv2": (16, 16), "layer2.0.downsample.0": (16, 8), "fc": (10, 16)}


def _state(smashed) -> dict:
    return smashed.applied[0]["state"]


def _io(module: torch.nn.Module) -> tuple[int, int]:
    if isinstance(module, torch.nn.Linear):
        return module.out_features, module.in_features
    return module.out_channels, module.in_channels


def check_shrunk(smashed, base, inputs, shapes: dict, params: tuple[float, float], macs: tuple[float, float]) -> None:
    """Layers have the expected (out, in) sizes; parameters and MACs fell to the given fraction range."""
    for name, expected in shapes.items():
        assert _io(smashed.model.get_submodule(name)) == expected, name
    p_ratio = count_parameters(smashed.model) / count_parameters(base)
    m_ratio = count_macs(smashed.model, inputs) / count_macs(base, inputs)
    assert params[0] <= p_ratio <= params[1], p_ratio
    assert macs[0] <= m_ratio <= macs[1], m_ratio
    kept = _state(smashed)["kept_channels"]
    for name, entry in kept.items():  # the replay record describes the shrunk model
        module = smashed.model.get_submodule(name) if "out" in entry else None
        if hasattr(module, "weight"):  # an embedding's "out" are its columns
            assert module.weight.shape[int(isinstance(module, torch.nn.Embedding))] == len(entry["out"])


def check_digits_half(smashed, base, inputs) -> None:
    check_shrunk(smashed, base, inputs, DIGITS_SHAPES, (0.24, 0.27), (0.24, 0.27))
    assert count_parameters(smashed.model) == DIGITS_HALF_PARAMS
    assert _state(smashed)["left_dense"] == ["classifier.3"]  # its rows are the model output
    assert size_on_disk(smashed) < 0.3 * size_on_disk(base)


def kept_vs_pruned(smashed, name: str, scores: torch.Tensor) -> None:
    """The kept filters of ``name`` score higher on average than the pruned ones."""
    kept = _state(smashed)["kept_channels"][name]["out"]
    mask = torch.zeros(len(scores), dtype=torch.bool)
    mask[kept] = True
    assert len(kept) == len(scores) // 2
    assert scores[mask].mean() > scores[~mask].mean()


class TestL1Filter(AlgorithmTesterBase):
    algorithm = "l1_filter"
    models = ["digits_cnn", "resnet_tiny"]
    reject_models = REJECT
    hyperparameters = {"sparsity": 0.5}

    def post_smash_hook(self, smashed, base, inputs):
        if base.slimkit_zoo_name == "digits_cnn":
            check_digits_half(smashed, base, inputs)
            l1 = base.features[0].weight.abs().sum(dim=(1, 2, 3))  # no coupling: the 16 largest-L1 filters stay
            assert _state(smashed)["kept_channels"]["features.0"]["out"] == sorted(l1.argsort()[16:].tolist())
            return
        check_shrunk(smashed, base, inputs, RESNET_SHAPES, (0.24, 0.29), (0.24, 0.29))
        kept = _state(smashed)["kept_channels"]  # residual branches agree on one channel set (dependency-aware)
        assert kept["layer2.0.conv2"]["out"] == kept["layer2.0.downsample.0"]["out"] == kept["fc"]["in"]
        assert kept["conv1"]["out"] == kept["layer1.0.conv2"]["out"] == kept["layer2.0.conv1"]["in"]


class TestL2FilterMobileNet(AlgorithmTesterBase):
    algorithm = "l2_filter"
    models = ["mobilenet_v2"]
    reject_models = REJECT
    hyperparameters = {"sparsity": 0.5}

    def post_smash_hook(self, smashed, base, inputs):
        shapes = {f"features.{i}.conv.0.0": (base.features[i].conv[0][0].out_channels // 2, None)
                  for i in range(2, 18)}
        for name, (out, _) in shapes.items():
            assert smashed.model.get_submodule(name).out_channels == out, name
        check_shrunk(smashed, base, inputs, {"features.18.0": (640, 160), "classifier.1": (1000, 640)},
                     (0.3, 0.4), (0.25, 0.3))


class TestFPGM(AlgorithmTesterBase):
    algorithm = "fpgm"
    models = ["resnet_tiny", "tiny_llama"]
    reject_models = REJECT
    hyperparameters = {"sparsity": 0.5, "dims": ["mlp", "hidden"]}  # ResNet: all of it; Llama: see the hook

    def post_smash_hook(self, smashed, base, inputs):
        if base.slimkit_zoo_name == "tiny_llama":  # hidden 64 -> 32 everywhere, MLP 128 -> 64, heads kept
            shapes = {}
            for i in range(2):
                layer = f"model.layers.{i}"
                shapes |= {f"{layer}.mlp.gate_proj": (64, 32), f"{layer}.mlp.down_proj": (32, 64),
                           f"{layer}.self_attn.q_proj": (64, 32), f"{layer}.self_attn.k_proj": (32, 32),
                           f"{layer}.self_attn.o_proj": (32, 64)}
            check_shrunk(smashed, base, inputs, shapes | {"lm_head": (256, 32)}, (0.3, 0.4), (0.35, 0.45))
            per_layer = 64 * 32 + 2 * 32 * 32 + 32 * 64 + 3 * 64 * 32 + 2 * 32  # q, k + v, o, MLP, two norms
            assert count_parameters(smashed.model) == 2 * per_layer + 2 * 256 * 32 + 32
            config = smashed.model.config
            assert (config.hidden_size, config.intermediate_size, config.num_attention_heads) == (32, 64, 4)
            return
        check_shrunk(smashed, base, inputs, RESNET_SHAPES, (0.24, 0.29), (0.24, 0.29))
        filters = base.layer1[0].conv1.weight.flatten(1)  # uncoupled: the 8 filters farthest from the others stay
        distance = torch.cdist(filters, filters).sum(dim=1)
        assert _state(smashed)["kept_channels"]["layer1.0.conv1"]["out"] == sorted(distance.argsort()[8:].tolist())


class TestLevel(AlgorithmTesterBase):
    algorithm = "level"
    models = ["digits_cnn", "mlp"]
    reject_models = REJECT
    hyperparameters = {"sparsity": 0.5}

    def post_smash_hook(self, smashed, base, inputs):
        layers = [(n, m) for n, m in base.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
        assert _state(smashed)["pruned_layers"] == sorted(n for n, _ in layers)
        for name, b in layers:
            new = smashed.model.get_submodule(name).weight
            assert new.shape == b.weight.shape
            assert int((new == 0).sum()) == b.weight.numel() // 2
            assert b.weight.abs()[new != 0].min() >= b.weight.abs()[new == 0].max()
        assert count_parameters(smashed.model) == count_parameters(base)
        assert abs(_state(smashed)["zero_fraction"] - 0.5) < 1e-3


class TestSlim(AlgorithmTesterBase):
    algorithm = "slim"
    models = ["digits_cnn"]
    reject_models = ["mlp", "conv_only", *REJECT]
    hyperparameters = {"sparsity": 0.5}

    def post_smash_hook(self, smashed, base, inputs):
        bns = ["features.1", "features.5", "features.9"]
        kept = _state(smashed)["kept_channels"]
        assert sum(smashed.model.get_submodule(n).num_features for n in bns) == 224 // 2
        for bn, conv in zip(bns, ["features.0", "features.4", "features.8"], strict=True):
            assert smashed.model.get_submodule(conv).out_channels == smashed.model.get_submodule(bn).num_features
        gammas = [base.get_submodule(n).weight.detach().abs() for n in bns]
        keep = [torch.zeros(len(g), dtype=torch.bool).index_fill_(0, torch.tensor(kept[n]["out"]), True)
                for n, g in zip(bns, gammas, strict=True)]
        kept_g = torch.cat([g[k] for g, k in zip(gammas, keep, strict=True)])
        pruned_g = torch.cat([g[~k] for g, k in zip(gammas, keep, strict=True)])
        assert kept_g.min() >= pruned_g.max()  # global ranking by |gamma|
        assert count_macs(smashed.model, inputs) < 0.3 * count_macs(base, inputs)
        assert count_parameters(smashed.model) < 0.5 * count_parameters(base)


class _DigitsData:
    """Mixin: the data-driven pruners rank filters on the Digits train split."""

    models = ["digits_cnn"]
    reject_models = REJECT
    hyperparameters = {"sparsity": 0.5, "batches": 2, "batch_size": 64}

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_data("Digits")

    @staticmethod
    def batches(smashed) -> list:
        loader = smashed.smash_config.data.train_dataloader(batch_size=64, shuffle=False)
        device = model_device(smashed)  # the harness also runs on CUDA
        return [(x.to(device), y.to(device)) for _, (x, y) in zip(range(2), loader, strict=False)]

    @staticmethod
    def features0_output(base, images) -> torch.Tensor:
        with torch.no_grad():
            return torch.relu(base.features[0](images)).transpose(0, 1).flatten(1).cpu()


class TestTaylorFOWeight(_DigitsData, AlgorithmTesterBase):
    algorithm = "taylor_fo_weight"

    def post_smash_hook(self, smashed, base, inputs):
        check_digits_half(smashed, base, inputs)
        score = torch.zeros(32)
        for images, labels in self.batches(smashed):
            base.zero_grad()
            torch.nn.functional.cross_entropy(base(images), labels).backward()
            w = base.features[0].weight
            score += (w * w.grad).flatten(1).sum(1).pow(2).detach().cpu()
        base.zero_grad()
        kept_vs_pruned(smashed, "features.0", score)


class TestActivationAPoZRank(_DigitsData, AlgorithmTesterBase):
    algorithm = "activation_apoz_rank"

    def post_smash_hook(self, smashed, base, inputs):
        check_digits_half(smashed, base, inputs)
        acts = torch.cat([self.features0_output(base, x) for x, _ in self.batches(smashed)], dim=1)
        kept_vs_pruned(smashed, "features.0", 1.0 - (acts == 0).float().mean(dim=1))


class TestActivationMeanRank(_DigitsData, AlgorithmTesterBase):
    algorithm = "activation_mean_rank"

    def post_smash_hook(self, smashed, base, inputs):
        check_digits_half(smashed, base, inputs)
        acts = torch.cat([self.features0_output(base, x) for x, _ in self.batches(smashed)], dim=1)
        kept_vs_pruned(smashed, "features.0", acts.mean(dim=1))


class TestAGP(_DigitsData, AlgorithmTesterBase):
    algorithm = "agp"
    hyperparameters = {"sparsity": 0.5, "epochs": 2, "batch_size": 64, "lr": 1e-3}

    def post_smash_hook(self, smashed, base, inputs):
        check_digits_half(smashed, base, inputs)
        train_items = len(smashed.smash_config.data.train)
        assert _state(smashed)["train_steps"] == 2 * -(-train_items // 64)
        _, _, x_test, y_test = digits_split()
        assert accuracy(smashed.model, x_test, y_test) > 0.95 # fine-tuned while pruning: still a digit classifier
        with torch.no_grad():
            assert run_model(smashed, inputs).argmax(1).float().std() > 0


def _reader_energy(base, reader: torch.nn.Module, batches: list) -> torch.Tensor:
    """E[x_k^2] * ||W[:, k]||^2 per input channel k of ``reader`` over ``batches`` of (inputs, targets)."""
    rows = []
    hook = reader.register_forward_pre_hook(lambda m, a: rows.append(
        (a[0] if isinstance(m, torch.nn.Linear) else a[0].movedim(1, -1)).detach().reshape(-1, a[0].shape[
            -1 if isinstance(m, torch.nn.Linear) else 1])))
    with torch.no_grad():
        for inputs, _ in batches:
            run_model(base, move_inputs(inputs, model_device(base)))
    hook.remove()
    weight = reader.weight.detach()
    return torch.cat(rows).pow(2).mean(0) * weight.transpose(0, 1).reshape(weight.shape[1], -1).pow(2).sum(1)


class TestChannelEnergy(_DigitsData, AlgorithmTesterBase):
    algorithm = "channel_energy"

    def post_smash_hook(self, smashed, base, inputs):
        from slimkit.data import split_batch

        check_digits_half(smashed, base, inputs)
        # features.0's channels reach features.4 through BN, ReLU and max-pooling: scored at features.4's input
        energy = _reader_energy(base, base.features[4], [split_batch(b) for b in self.batches(smashed)])
        assert _state(smashed)["kept_channels"]["features.0"]["out"] == sorted(energy.argsort()[16:].tolist())


class TestChannelEnergyLlama(AlgorithmTesterBase):
    """On a gated MLP the channel lives at down_proj's input (act(gate) * up): gate and up rows go together."""

    algorithm = "channel_energy"
    models = ["tiny_llama"]
    reject_models = REJECT
    hyperparameters = {"sparsity": 0.5, "batches": 2, "batch_size": 4, "dims": ["mlp"]}

    @classmethod
    def prepare_config(cls, cfg):
        from slimkit import zoo

        cfg.add_tokenizer(zoo.load("tiny_llama").tokenizer)
        cfg.add_data("PyDocText", max_seq_len=64, chunk_chars=256)

    def post_smash_hook(self, smashed, base, inputs):
        from slimkit.data import split_batch

        loader = smashed.smash_config.data.train_dataloader(batch_size=4, shuffle=False)
        batches = [split_batch(b) for _, b in zip(range(2), loader, strict=False)]
        kept = _state(smashed)["kept_channels"]
        for i in range(2):
            mlp = smashed.model.model.layers[i].mlp
            assert (mlp.gate_proj.out_features, mlp.up_proj.out_features, mlp.down_proj.in_features) == (64,) * 3
            energy = _reader_energy(base, base.model.layers[i].mlp.down_proj, batches)
            top = sorted(energy.argsort()[64:].tolist())
            for proj in ("gate_proj", "up_proj"):
                assert kept[f"model.layers.{i}.mlp.{proj}"]["out"] == top, (i, proj)
        assert count_parameters(smashed.model) == count_parameters(base) - 2 * 64 * 3 * 64
