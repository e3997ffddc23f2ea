"""The search space of ``darts`` and ``dsnas`` (not an algorithm): each eligible conv becomes a choice of candidates.

An eligible ``nn.Conv2d`` (odd square kxk, k > 1, groups=1, dilation 1, 'same' zero padding) is offered as itself,
a 1x1 conv (its centre taps), a depthwise kxk + pointwise 1x1, and skip where input and output shapes match; all
give its output shape. The choice is a :class:`~slimkit.engines.nas.DiffMutableOP` (DARTS) or a
:class:`~slimkit.engines.nas.OneHotMutableOP` (DSNAS); the argmax candidates are exported as plain layers, and a
save records ``choices`` (layer -> candidate) that :meth:`ConvChoiceModels.replay` puts back on a freshly built model.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from slimkit.algorithms.distillation._nas import example_batch, train_on_data
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import integer, real
from slimkit.engines.nas import DiffMutableOP, NasMutator, export_subnet
from slimkit.errors import ConfigError
from slimkit.evaluation import count_macs
from slimkit.evaluation.runtime import eval_mode
from slimkit.training import BatchLoss, FitResult
from slimkit.utils import main_tensor, run_model

#: what the search needs of a model (for model_check_reason)
MODELS = ("It searches nn.Conv2d layers with an odd square kernel above 1, groups=1, dilation 1, zero 'same' "
          "padding (k // 2); the model has none.")


def eligible(conv: nn.Module) -> bool:
    """A conv whose candidates (1x1, separable, skip) give its output shape."""
    if type(conv) is not nn.Conv2d or conv.groups != 1 or conv.padding_mode != "zeros":
        return False
    k = conv.kernel_size
    return k[0] == k[1] > 1 and k[0] % 2 == 1 and conv.dilation == (1, 1) and conv.padding == (k[0] // 2,) * 2


def candidates(conv: nn.Conv2d) -> dict[str, nn.Module]:
    """``conv`` itself, a 1x1 conv (its centre taps), depthwise kxk + pointwise 1x1, and skip where shapes allow."""
    k, bias = conv.kernel_size[0], conv.bias is not None
    point = nn.Conv2d(conv.in_channels, conv.out_channels, 1, conv.stride, bias=bias)
    sep = nn.Sequential(nn.Conv2d(conv.in_channels, conv.in_channels, k, conv.stride, k // 2,
                                  groups=conv.in_channels, bias=False),
                        nn.Conv2d(conv.in_channels, conv.out_channels, 1, bias=bias))
    point.to(conv.weight), sep.to(conv.weight)
    with torch.no_grad():
        point.weight.copy_(conv.weight[:, :, k // 2, k // 2, None, None])
        if bias:
            point.bias.copy_(conv.bias)
    out = {"conv": conv, "point": point, "sep": sep}
    if conv.in_channels == conv.out_channels and conv.stride == (1, 1):
        out["skip"] = nn.Identity()
    return out


def _cost(conv: nn.Conv2d, out_hw: int) -> dict[str, float]:
    """Multiply-accumulates of each candidate at ``out_hw`` output positions."""
    c_in, c_out, k2 = conv.in_channels, conv.out_channels, conv.kernel_size[0] ** 2
    return {"conv": out_hw * c_in * c_out * k2, "point": out_hw * c_in * c_out,
            "sep": out_hw * (c_in * k2 + c_in * c_out), "skip": 0.0}


def choice_hyperparameters(arch_lr: float) -> list:
    """Training length, weight and architecture learning rates, the FLOPs penalty, batch size, seed, threads."""
    return [
        integer("epochs", 1, 1000, 3, "Passes over the train data."),
        integer("steps", 0, 10**7, 0, "Stop after this many steps (0: no limit)."),
        real("lr", 1e-7, 1.0, 3e-3, "Adam learning rate of the weights."),
        real("arch_lr", 1e-6, 10.0, arch_lr, "Adam learning rate of the architecture parameters alpha."),
        real("arch_weight_decay", 0.0, 1.0, 1e-3, "Weight decay of alpha."),
        real("flops_weight", 0.0, 100.0, 0.0, "Weight of the expected MACs (relative to the model's) in alpha's "
                                                   "loss: the FLOPs budget as a penalty."),
        integer("batch_size", 2, 4096, 32, "Train batch size."),
        integer("seed", 0, 2**31 - 1, 0, "Seed of data shuffling and of alpha's initialisation."),
        integer("num_threads", 0, 1024, 0, "CPU threads while training (0 keeps torch's setting)."),
    ]


class ConvChoices:
    """``model``'s copy with each eligible conv replaced by a ``op_type`` choice; the expected-MACs penalty."""

    def __init__(self, model: nn.Module, example: Any, op_type: type[DiffMutableOP], arch_lr: float,
                 weight_decay: float) -> None:
        self.example, self.supernet, sizes = example, copy.deepcopy(model), {}
        with eval_mode(model):
            self.total = float(count_macs(model, example))
        convs = {n: m for n, m in self.supernet.named_modules() if eligible(m)}
        hooks = [m.register_forward_hook(lambda mod, i, o, n=n: sizes.__setitem__(n, o.shape[-1] * o.shape[-2]))
                 for n, m in convs.items()]
        with eval_mode(self.supernet), torch.no_grad():
            run_model(self.supernet, example)
        for h in hooks:
            h.remove()
        self.ops: dict[str, DiffMutableOP] = {}
        self.costs: dict[str, torch.Tensor] = {}
        for name, conv in convs.items():
            op = op_type(candidates(conv), init_choice="conv").to(conv.weight.device)
            parent, _, leaf = name.rpartition(".")
            setattr(self.supernet.get_submodule(parent), leaf, op)
            self.ops[name] = op
            self.costs[name] = torch.tensor([_cost(conv, sizes[name])[c] for c in op.choices])
        self.arch_opt = torch.optim.Adam([op.arch_parameter() for op in self.ops.values()], lr=arch_lr,
                                         betas=(0.5, 0.999), weight_decay=weight_decay)

    def expected_macs(self) -> torch.Tensor:
        """Sum over choices of softmax(alpha) x each candidate's MACs, relative to the model's MACs."""
        total = sum((op.weights() * self.costs[n].to(op.arch_param)).sum() for n, op in self.ops.items())
        return total / max(self.total, 1.0)

    def export(self, training: bool) -> tuple[nn.Module, dict[str, Any]]:
        """The plain model of the argmax choices and its state (choices, MACs, gap to the supernet's path)."""
        choices = {n: op.fix_argmax() for n, op in self.ops.items()}
        student = export_subnet(self.supernet, NasMutator(self.supernet).fix_subnet())
        with eval_mode(self.supernet), eval_mode(student), torch.no_grad():
            path = main_tensor(run_model(self.supernet, self.example))
            gap = float((main_tensor(run_model(student, self.example)) - path).abs().max())
            macs = float(count_macs(student, self.example))
        student.train(training)
        probs = {n: [round(p, 4) for p in torch.softmax(op.arch_param.detach(), 0).tolist()]
                 for n, op in self.ops.items()}
        return student, {"choices": choices, "macs_before": self.total, "macs_after": macs, "export_max_abs_diff": gap,
                         "probabilities": probs, "candidates": {n: op.choices for n, op in self.ops.items()}}


class ConvChoiceModels:
    """The models ``darts`` and ``dsnas`` take, their training call and the replay of a save (a mixin)."""

    algorithm_name: str

    def model_check_fn(self, model: Any) -> bool:
        """Needs an eligible convolution."""
        return isinstance(model, nn.Module) and any(eligible(m) for m in model.modules())

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return MODELS

    def choices_for(self, model: nn.Module, smash_config: SmashConfigPrefixWrapper,
                    op_type: type[DiffMutableOP]) -> ConvChoices:
        """The search space on ``model`` (seeded; alpha's optimizer from ``arch_lr`` / ``arch_weight_decay``)."""
        torch.manual_seed(int(smash_config["seed"]))
        return ConvChoices(model, example_batch(smash_config, model, self.algorithm_name), op_type,
                           float(smash_config["arch_lr"]), float(smash_config["arch_weight_decay"]))

    def train(self, space: ConvChoices, smash_config: SmashConfigPrefixWrapper, loss: BatchLoss) -> FitResult:
        """Slimkit's training loop over the train split with ``loss`` (which also steps alpha)."""
        return train_on_data(space.supernet, smash_config, loss, int(smash_config["seed"]),
                             f"{self.algorithm_name} supernet", prefix="")

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Put each searched choice in place of its conv on a freshly built model (the weights then load)."""
        owner = self.algorithm_name
        if not isinstance(state.get("choices"), dict):
            raise ConfigError(f"The saved {owner} state has no 'choices'; the save is incomplete.")
        for name, choice in state["choices"].items():
            try:
                conv = model.get_submodule(name)
            except AttributeError:
                conv = None
            options = candidates(conv) if conv is not None and eligible(conv) else {}
            if choice not in options:
                raise ConfigError(f"{owner} replay: layer {name!r} cannot take the saved choice {choice!r} (its "
                                  f"candidates: {sorted(options)}); is this the model the save was made from?")
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent), leaf, options[choice])
        return model
