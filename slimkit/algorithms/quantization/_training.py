"""Shared machinery of the training-aware smash quantizers (qat, dorefa, bnn, lsq).

Each of them wraps the model's Linear/Conv layers with a quantizer from
:mod:`slimkit.compression.quantization`, fine-tunes for a few epochs on the SmashConfig's train data with a
cross-entropy loss, then freezes the result (:meth:`Quantizer.freeze`): every quantized layer becomes a
:class:`QuantizedLayer` holding integer weight codes (uint8) with their scales and zero points as buffers,
and fixed activation scales. That is what is saved (``save_fn=REPLAY``): ``replay()`` re-creates the empty
``QuantizedLayer`` structure from the layer specs recorded in the replay state, then the saved codes and
scales load strictly, so a reloaded model reproduces the smashed outputs exactly.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from ConfigSpace import UniformFloatHyperparameter, UniformIntegerHyperparameter
from torch import nn

from slimkit.compression.quantization import Quantizer, quantized_layer_specs, rebuild_quantized_layers
from slimkit.core.hyperparameters import ListHyperparameter
from slimkit.errors import ConfigError, DataError
from slimkit.utils import main_tensor, model_device, move_inputs, run_model

#: Layer types the smash quantizers quantize (their weights, and the inputs when activations are on).
LAYER_TYPES: tuple[str, ...] = ("Linear", "Conv1d", "Conv2d", "Conv3d")
#: Activation layers whose outputs ``bnn`` binarizes when ``binarize_activations`` is on.
ACTIVATION_TYPES: tuple[str, ...] = ("ReLU", "ReLU6", "Hardtanh", "LeakyReLU", "GELU", "SiLU", "Tanh")

QuantizerFactory = Callable[[nn.Module, list[dict[str, Any]], torch.optim.Optimizer], Quantizer]


def layer_names(model: nn.Module, types: Sequence[str] = LAYER_TYPES) -> list[str]:
    """Names of the modules of ``model`` whose class name is in ``types`` (exact classes, model order)."""
    return [name for name, m in model.named_modules() if name and type(m).__name__ in types
            and type(m) is getattr(nn, type(m).__name__, None)]


def has_quantizable_layers(model: Any) -> bool:
    """Whether ``model`` is an ``nn.Module`` with at least one Linear or Conv layer."""
    return isinstance(model, nn.Module) and bool(layer_names(model))


def training_hyperparameters(epochs: int = 2, lr: float = 1e-3) -> list:
    """Hyperparameters every training-aware quantizer shares: epochs, lr, batch_size, exclude, seed."""
    return [
        UniformIntegerHyperparameter("epochs", 1, 100, default_value=epochs,
                                     meta={"desc": "Passes over the train data while quantized (fine-tuning)."}),
        UniformFloatHyperparameter("lr", 1e-6, 1.0, default_value=lr, log=True,
                                   meta={"desc": "Adam learning rate of the quantization-aware fine-tuning."}),
        UniformIntegerHyperparameter("batch_size", 1, 4096, default_value=64,
                                     meta={"desc": "Train batch size."}),
        ListHyperparameter("exclude", (), meta={"desc": "fnmatch patterns of layer names kept in full precision, "
                                                        "e.g. ['classifier.3'] for the last layer."}),
        UniformIntegerHyperparameter("seed", 0, 2**31 - 1, default_value=0,
                                     meta={"desc": "Seed of data shuffling and of any randomness in training."}),
        UniformIntegerHyperparameter("num_threads", 0, 1024, default_value=0,
                                     meta={"desc": "CPU threads while training (0 keeps torch's setting). Small "
                                                   "models train several times faster on 1 thread of a busy CPU."}),
    ]


def build_config_list(
    model: nn.Module, quant_types: Sequence[str], bits: Mapping[str, int], exclude: Sequence[str],
    extra: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """A config_list quantizing ``quant_types`` of every Linear/Conv layer except the ``exclude`` patterns."""
    names = layer_names(model)
    excluded: list[str] = []
    for pattern in exclude:
        matched = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not matched:
            raise ConfigError(
                f"exclude pattern {pattern!r} matches no Linear/Conv layer. Layer names: {', '.join(names)}."
            )
        excluded.extend(m for m in matched if m not in excluded)
    if len(excluded) == len(names):
        raise ConfigError(f"exclude {list(exclude)} removes every Linear/Conv layer; nothing would be quantized.")
    types = sorted({type(model.get_submodule(n)).__name__ for n in names})
    config: list[dict[str, Any]] = [
        {"quant_types": list(quant_types), "quant_bits": {t: bits[t] for t in quant_types}, "op_types": types,
         **dict(extra or {})}
    ]
    if excluded:
        config.append({"exclude": True, "op_names": excluded})
    return config


def _split_batch(batch: Any) -> tuple[Any, torch.Tensor]:
    if isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(batch[1], torch.Tensor):
        inputs, labels = batch
        if not labels.dtype.is_floating_point:
            return inputs, labels
    raise DataError(
        "Training-aware quantizers fine-tune with a cross-entropy loss and need (inputs, integer labels) batches, "
        f"as classification data gives (e.g. cfg.add_data('Digits')); got a batch of type {type(batch).__name__}."
    )


def train_and_freeze(
    model: nn.Module, smash_config: Any, make_quantizer: QuantizerFactory, config_list: list[dict[str, Any]]
) -> nn.Module:
    """Wrap ``model`` with the quantizer, fine-tune it on the train data, freeze it and record the replay state.

    The model comes back in the train/eval mode it had; the final training loss and the number of steps go
    into ``smash_config.state`` next to the frozen layer specs ``replay()`` needs.
    """
    data = smash_config.data
    seed = int(smash_config["seed"])
    loader = data.train_dataloader(batch_size=int(smash_config["batch_size"]), shuffle=True,
                                   generator=torch.Generator().manual_seed(seed))
    device = model_device(model)
    was_training = model.training
    threads = torch.get_num_threads()
    if int(smash_config["num_threads"]) > 0 and device.type == "cpu":
        torch.set_num_threads(int(smash_config["num_threads"]))
    try:
        quantizer, steps, last_loss = _train(model, smash_config, make_quantizer, config_list, loader, device)
    finally:
        torch.set_num_threads(threads)
    model.train(was_training)
    quantizer.freeze()
    smash_config.state["layers"] = quantized_layer_specs(model)
    smash_config.state["train_steps"] = steps
    smash_config.state["final_loss"] = round(last_loss, 6)
    return model


def _train(
    model: nn.Module, smash_config: Any, make_quantizer: QuantizerFactory, config_list: list[dict[str, Any]],
    loader: Any, device: torch.device,
) -> tuple[Quantizer, int, float]:
    """The fine-tuning loop (seeded, on a forked RNG so the caller's random state is untouched)."""
    seed = int(smash_config["seed"])
    steps, last_loss = 0, math.nan
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        optimizer = torch.optim.Adam(model.parameters(), lr=float(smash_config["lr"]))
        quantizer = make_quantizer(model, config_list, optimizer)
        model.train()
        for epoch in range(int(smash_config["epochs"])):
            quantizer.update_epoch(epoch)
            for batch in loader:
                inputs, labels = _split_batch(batch)
                logits = main_tensor(run_model(model, move_inputs(inputs, device)))
                loss = F.cross_entropy(logits.flatten(0, -2) if logits.dim() > 2 else logits,
                                       labels.to(device).flatten() if logits.dim() > 2 else labels.to(device))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                steps, last_loss = steps + 1, float(loss.detach())
        if steps == 0:
            raise DataError("The train dataloader yielded no batch; add train data with cfg.add_data(...).")
    return quantizer, steps, last_loss


def replay_frozen(model: nn.Module, state: Mapping[str, Any]) -> nn.Module:
    """Re-create the frozen quantized layers recorded in ``state`` on a fresh base model (weights load next)."""
    if "layers" not in state:
        raise ConfigError("The saved replay state has no 'layers'; the save is incomplete or from another version.")
    return rebuild_quantized_layers(model, state["layers"])
