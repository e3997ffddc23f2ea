"""darts: DARTS (Liu, Simonyan & Yang, 2019) on the model's own convolutions, with a FLOPs penalty on the choice."""

from __future__ import annotations

import copy
from typing import Any

import torch
from ConfigSpace import UniformFloatHyperparameter, UniformIntegerHyperparameter
from torch import nn

from slimkit.algorithms.distillation._nas import example_batch
from slimkit.core.contract import SaveFn, SlimkitDistiller, SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.nas import DiffMutableOP, NasMutator, export_subnet
from slimkit.errors import ConfigError
from slimkit.evaluation import count_macs
from slimkit.evaluation.runtime import eval_mode
from slimkit.training import default_loss, fit, split_batch
from slimkit.utils import main_tensor, run_model

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


@register
class DartsSearch(SlimkitDistiller):
    """DARTS over each eligible convolution: {itself, 1x1, depthwise-separable, skip}, mixed by softmax(alpha).

    Every eligible ``nn.Conv2d`` (odd kxk, k > 1, 'same' zero padding) becomes a
    :class:`~slimkit.engines.nas.DiffMutableOP` of those candidates (skip only where input and output shapes
    match). Each step of slimkit's training loop first updates alpha (first-order DARTS, Adam at ``arch_lr``) on
    one half of the batch: task loss plus ``flops_weight`` x the expected MACs of the mixed choices relative to the
    model's MACs (the FLOPs budget as a penalty); the weights then train on the other half. The argmax candidate of
    each choice is exported as plain layers: a chosen 1x1, separable or skip is physically smaller. The save records
    each choice and rebuilds the layers before the weights load.
    """

    algorithm_name = "darts"
    dataset_required = True
    save_fn = SaveFn.REPLAY
    references = {"Paper (DARTS)": "https://arxiv.org/abs/1806.09055",
                  "MMRazor DARTS": "https://github.com/open-mmlab/mmrazor/tree/main/configs/nas/mmcls/darts"}

    def get_hyperparameters(self) -> list:
        """Training length, weight and architecture learning rates, the FLOPs penalty, batch size, seed, threads."""
        def _int(name: str, low: int, high: int, default: int, desc: str) -> UniformIntegerHyperparameter:
            return UniformIntegerHyperparameter(name, low, high, default_value=default, meta={"desc": desc})

        def _float(name: str, low: float, high: float, default: float, desc: str) -> UniformFloatHyperparameter:
            return UniformFloatHyperparameter(name, low, high, default_value=default, meta={"desc": desc})

        return [
            _int("epochs", 1, 1000, 3, "Passes over the train data."),
            _int("steps", 0, 10**7, 0, "Stop after this many steps (0: no limit)."),
            _float("lr", 1e-7, 1.0, 3e-3, "Adam learning rate of the weights."),
            _float("arch_lr", 1e-6, 10.0, 3e-4, "Adam learning rate of the architecture parameters alpha."),
            _float("arch_weight_decay", 0.0, 1.0, 1e-3, "Weight decay of alpha."),
            _float("flops_weight", 0.0, 100.0, 0.0, "Weight of the expected relative MACs in alpha's loss."),
            _int("batch_size", 2, 4096, 32, "Train batch size (each batch is split in two halves: alpha, weights)."),
            _int("seed", 0, 2**31 - 1, 0, "Seed of data shuffling and of alpha's initialisation."),
            _int("num_threads", 0, 1024, 0, "CPU threads while training (0 keeps torch's setting)."),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs an eligible convolution."""
        return isinstance(model, nn.Module) and any(eligible(m) for m in model.modules())

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return MODELS

    def _supernet(self, model: nn.Module, example: Any) -> tuple[nn.Module, dict[str, DiffMutableOP], dict]:
        supernet, sizes = copy.deepcopy(model), {}
        convs = {n: m for n, m in supernet.named_modules() if eligible(m)}
        hooks = [m.register_forward_hook(lambda mod, i, o, n=n: sizes.__setitem__(n, o.shape[-1] * o.shape[-2]))
                 for n, m in convs.items()]
        with eval_mode(supernet), torch.no_grad():
            run_model(supernet, example)
        for h in hooks:
            h.remove()
        ops, costs = {}, {}
        for name, conv in convs.items():
            op = DiffMutableOP(candidates(conv), init_choice="conv")
            op.to(conv.weight.device)
            parent, _, leaf = name.rpartition(".")
            setattr(supernet.get_submodule(parent), leaf, op)
            ops[name] = op
            costs[name] = torch.tensor([_cost(conv, sizes[name])[c] for c in op.choices])
        return supernet, ops, costs

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        seed = int(smash_config["seed"])
        torch.manual_seed(seed)
        example = example_batch(smash_config, model, self.algorithm_name)
        with eval_mode(model):
            total = float(count_macs(model, example))
        supernet, ops, costs = self._supernet(model, example)
        alphas = [op.arch_parameter() for op in ops.values()]
        arch_opt = torch.optim.Adam(alphas, lr=float(smash_config["arch_lr"]), betas=(0.5, 0.999),
                                    weight_decay=float(smash_config["arch_weight_decay"]))
        penalty = float(smash_config["flops_weight"])

        def step_loss(net: nn.Module, batch: Any) -> torch.Tensor:
            inputs, targets = split_batch(batch)
            if not isinstance(inputs, torch.Tensor) or targets is None:
                raise ConfigError("darts splits each batch in halves (alpha, weights): it needs tensor inputs with "
                                  "targets, as cfg.add_data('Digits') or (inputs, labels) datasets give.")
            if inputs.shape[0] < 2:  # a last batch of one sample trains the weights only
                return default_loss(net, batch)
            cut = inputs.shape[0] // 2
            for op in ops.values():
                op.arch_grad = True
            loss = default_loss(net, (inputs[:cut], targets[:cut]))
            if penalty > 0:
                expected = sum((op.weights() * costs[n].to(op.arch_param)).sum() for n, op in ops.items())
                loss = loss + penalty * expected / max(total, 1.0)
            grads = torch.autograd.grad(loss, [op.arch_parameter() for op in ops.values()], allow_unused=True)
            for op, grad in zip(ops.values(), grads, strict=True):
                op.arch_grad = False
                op.arch_param.grad = torch.zeros_like(op.arch_param) if grad is None else grad.detach()
            arch_opt.step()
            return default_loss(net, (inputs[cut:], targets[cut:]))

        loader = smash_config.data.train_dataloader(batch_size=int(smash_config["batch_size"]), shuffle=True,
                                                    generator=torch.Generator().manual_seed(seed))
        steps, threads = int(smash_config["steps"]), int(smash_config["num_threads"])
        trained = fit(supernet, loader, loss=step_loss, lr=float(smash_config["lr"]),
                      epochs=int(smash_config["epochs"]), steps=steps or None, seed=seed,
                      num_threads=threads or None, desc="darts supernet")
        choices = {n: op.fix_argmax() for n, op in ops.items()}
        student = export_subnet(supernet, NasMutator(supernet).fix_subnet())
        with eval_mode(supernet), eval_mode(student), torch.no_grad():
            path = main_tensor(run_model(supernet, example))
            gap = float((main_tensor(run_model(student, example)) - path).abs().max())
            macs = float(count_macs(student, example))
        student.train(model.training)
        smash_config.state.update(
            choices=choices, supernet_steps=trained.steps, macs_before=total, macs_after=macs,
            export_max_abs_diff=gap,
            probabilities={n: [round(p, 4) for p in op.weights().tolist()] for n, op in ops.items()},
            candidates={n: op.choices for n, op in ops.items()})
        return student

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Put each searched choice in place of its conv on a freshly built model (the weights then load)."""
        if not isinstance(state.get("choices"), dict):
            raise ConfigError("The saved darts state has no 'choices'; the save is incomplete.")
        for name, choice in state["choices"].items():
            conv = model.get_submodule(name)
            options = candidates(conv) if eligible(conv) else {}
            if choice not in options:
                raise ConfigError(f"darts replay: layer {name!r} cannot take the saved choice {choice!r} "
                                  f"(its candidates: {sorted(options)}); is this the model the save was made from?")
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent), leaf, options[choice])
        return model
