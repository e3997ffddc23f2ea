"""Shared machinery of the training-aware smash quantizers (qat, dorefa, bnn, lsq).

Each of them (a :class:`TrainingQuantizer`) wraps the model's Linear/Conv layers with a quantizer from
:mod:`slimkit.engines.quantization`, fine-tunes for a few epochs on the SmashConfig's train data with
:func:`slimkit.training.fit` (default loss: cross-entropy), then freezes the result
(:meth:`Quantizer.freeze`): every quantized layer becomes a :class:`QuantizedLayer` holding integer weight
codes (uint8) with their scales and zero points as buffers, and fixed activation scales. That is what is
saved (``save_fn=REPLAY``): ``replay()`` re-creates the empty ``QuantizedLayer`` structure from the layer
specs recorded in the replay state, then the saved codes and scales load strictly, so a reloaded model
reproduces the smashed outputs exactly.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from ConfigSpace import UniformFloatHyperparameter, UniformIntegerHyperparameter
from torch import nn

from slimkit.algorithms.quantization._targets import record_coverage
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean, ListHyperparameter, declared_values
from slimkit.core.selection import matches
from slimkit.core.weights import DENSE, Target, find_targets, select
from slimkit.engines.quantization import Quantizer, quantized_layer_specs, rebuild_quantized_layers
from slimkit.errors import ConfigError
from slimkit.training import fit, make_optimizer

#: Convolutions the smash quantizers quantize (exact torch classes) besides the dense targets of core.weights.
CONV_TYPES: tuple[str, ...] = ("Conv1d", "Conv2d", "Conv3d")
#: Layer types the smash quantizers quantize (their weights, and the inputs when activations are on): Linear and
#: its subclasses computing ``x W^T + b``, transformers' Conv1D (see :mod:`slimkit.core.weights`), convolutions.
LAYER_TYPES: tuple[str, ...] = ("Linear", "Conv1D", *CONV_TYPES)
#: Activation layers whose outputs ``bnn`` binarizes when ``binarize_activations`` is on.
ACTIVATION_TYPES: tuple[str, ...] = ("ReLU", "ReLU6", "Hardtanh", "LeakyReLU", "GELU", "SiLU", "Tanh")


def _exact_torch(module: nn.Module, types: Sequence[str]) -> bool:
    return type(module).__name__ in types and type(module) is getattr(nn, type(module).__name__, None)


def layer_names(model: nn.Module, types: Sequence[str] | None = None) -> list[str]:
    """Names of the layers the smash quantizers quantize (model order), or of exact torch classes named in ``types``.

    Without ``types``: the supported dense targets of :mod:`slimkit.core.weights` (Linear and subclasses that
    compute ``x W^T + b``, Conv1D) and the exact torch convolutions of :data:`CONV_TYPES`.
    """
    if types is not None:
        return [name for name, m in model.named_modules() if name and _exact_torch(m, types)]
    dense = {t.name for t in select(find_targets(model, DENSE), DENSE)}
    return [name for name, m in model.named_modules() if name and (name in dense or _exact_torch(m, CONV_TYPES))]


def training_hyperparameters(epochs: int = 2, lr: float = 1e-3) -> list:
    """Hyperparameters every training-aware quantizer shares: epochs, lr, batch_size, exclude, seed."""
    return [
        UniformIntegerHyperparameter("epochs", 1, 100, default_value=epochs,
                                     meta={"desc": "Passes over the train data while quantized (fine-tuning)."}),
        UniformFloatHyperparameter("lr", 1e-6, 1.0, default_value=lr, log=True,
                                   meta={"desc": "Adam learning rate of the quantization-aware fine-tuning."}),
        UniformIntegerHyperparameter("batch_size", 1, 4096, default_value=64,
                                     meta={"desc": "Train batch size."}),
        ListHyperparameter("exclude", (), meta={"desc": "Layers kept in full precision: exact names or glob patterns, "
                                                        "e.g. ['classifier.3'] for the last layer."}),
        UniformIntegerHyperparameter("seed", 0, 2**31 - 1, default_value=0,
                                     meta={"desc": "Seed of data shuffling and of any randomness in training."}),
        UniformIntegerHyperparameter("num_threads", 0, 1024, default_value=0,
                                     meta={"desc": "CPU threads while training (0 keeps torch's setting). Small "
                                                   "models train several times faster on 1 thread of a busy CPU."}),
    ]


def bits_hyperparameters(activations: str) -> list:
    """``bits`` of weights and activations, and ``quantize_activations`` (described by ``activations``)."""
    return [
        UniformIntegerHyperparameter("bits", 2, 8, default_value=8,
                                     meta={"desc": "Bit width of weights and activations."}),
        Boolean("quantize_activations", True, meta={"desc": activations}),
    ]


def bits_config_list(model: nn.Module, smash_config: Any,
                     extra: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Weights (and inputs, with ``quantize_activations``) of every Linear/Conv layer at ``bits``."""
    types = ["weight", "input"] if smash_config["quantize_activations"] else ["weight"]
    return build_config_list(model, types, dict.fromkeys(types, int(smash_config["bits"])), smash_config["exclude"],
                             extra)


def build_config_list(
    model: nn.Module, quant_types: Sequence[str], bits: Mapping[str, int], exclude: Sequence[str],
    extra: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """A config_list quantizing ``quant_types`` of every :func:`layer_names` layer except the ``exclude`` patterns.

    Layers are named exactly (``op_names``), so a Linear the target definition refuses (e.g.
    ``nn.MultiheadAttention.out_proj``) is never picked up through its type.
    """
    names = layer_names(model)
    excluded: list[str] = []
    for pattern in exclude:
        matched = [n for n in names if matches(n, [pattern])]
        if not matched:
            raise ConfigError(
                f"exclude pattern {pattern!r} matches no Linear/Conv layer. Layer names: {', '.join(names)}."
            )
        excluded.extend(m for m in matched if m not in excluded)
    kept = [n for n in names if n not in excluded]
    if not kept:
        raise ConfigError(f"exclude {list(exclude)} removes every Linear/Conv layer; nothing would be quantized.")
    return [{"quant_types": list(quant_types), "quant_bits": {t: bits[t] for t in quant_types}, "op_names": kept,
             **dict(extra or {})}]


def freeze_and_record(quantizer: Quantizer, smash_config: Any, targets: Sequence[Target]) -> None:
    """Freeze ``quantizer``'s layers; record their specs (what ``replay()`` rebuilds) and the weight coverage."""
    quantizer.freeze()
    smash_config.state["layers"] = quantized_layer_specs(quantizer.bound_model)
    weights = [n for n, spec in smash_config.state["layers"].items() if "weight" in spec["bits"]]
    record_coverage(smash_config.state, targets, weights, tuple(smash_config["exclude"]))


class FrozenQuantizer(SlimkitQuantizer):
    """Base of the smash quantizers that end in frozen integer-code layers (not registered): check and replay.

    The model check asks for a Linear or Conv layer; ``replay`` rebuilds the frozen layers recorded by
    :func:`freeze_and_record`, into which the saved codes and scales then load strictly.
    """

    save_fn: ClassVar[SaveFn] = SaveFn.REPLAY
    replay_on_meta: ClassVar[bool] = True  # replay wraps layers in empty frozen-code layers; reads no weight values
    #: what the algorithm does to a layer, for the model-check refusal ("It quantizes ... layers")
    verb: ClassVar[str] = "quantizes"

    def model_check_fn(self, model: Any) -> bool:
        """Needs a Linear or Conv layer."""
        return isinstance(model, nn.Module) and bool(layer_names(model))

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return f"It {self.verb} {', '.join(LAYER_TYPES)} layers and the model has none."

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild the frozen quantized layers; the saved codes and scales then load strictly."""
        if "layers" not in state:
            raise ConfigError("The saved replay state has no 'layers'; the save is incomplete or from another "
                              "version.")
        return rebuild_quantized_layers(model, state["layers"])


class TrainingQuantizer(FrozenQuantizer):
    """Base of the training-aware smash quantizers (not registered): wrap, fine-tune, freeze, replay.

    A subclass sets ``algorithm_name``/``engine``/``references``, the training defaults and ``engine_args``, and
    implements :meth:`quantizer_hyperparameters` and :meth:`config_list`; the training hyperparameters and
    ``_apply`` (fine-tuning, then :func:`freeze_and_record`) live here, the model check and ``replay`` in
    :class:`FrozenQuantizer`.
    """

    dataset_required: ClassVar[bool] = True
    #: defaults of the shared ``epochs`` and ``lr`` hyperparameters
    default_epochs: ClassVar[int] = 2
    default_lr: ClassVar[float] = 1e-3
    #: hyperparameters handed to ``engine`` as the keyword arguments of the same name
    engine_args: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def quantizer_hyperparameters(self) -> list:
        """The algorithm's own hyperparameters (bits, ...), listed before the shared training ones."""

    @abstractmethod
    def config_list(self, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> list[dict[str, Any]]:
        """The engine's config_list for ``model`` (usually :func:`build_config_list`)."""

    def make_quantizer(self, model: nn.Module, config_list: list[dict[str, Any]], optimizer: torch.optim.Optimizer,
                       smash_config: SmashConfigPrefixWrapper) -> Quantizer:
        """``engine`` wrapping ``model`` (its optimizer steps drive the quantizer), given the ``engine_args``."""
        assert self.engine is not None
        return self.engine(model, config_list, optimizer,
                           **declared_values(self.get_hyperparameters(), smash_config, self.engine_args))

    def get_hyperparameters(self) -> list:
        """The algorithm's own hyperparameters, then the shared training settings."""
        return [*self.quantizer_hyperparameters(), *training_hyperparameters(self.default_epochs, self.default_lr)]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        """Wrap ``model`` with the engine, fine-tune it with :func:`slimkit.training.fit`, freeze, record the state.

        The loss is the training package's default (cross-entropy on the batch targets, or the model's own
        ``.loss``); shuffling and the run are seeded with ``seed``. The model comes back in the train/eval mode it
        had; the final training loss and the number of steps go into ``smash_config.state`` next to the frozen
        layer specs ``replay()`` needs.
        """
        config_list = self.config_list(model, smash_config)
        targets = find_targets(model)  # before wrapping: what coverage is measured against
        seed = int(smash_config["seed"])
        loader = smash_config.data.train_dataloader(batch_size=int(smash_config["batch_size"]), shuffle=True,
                                                    generator=torch.Generator().manual_seed(seed))
        optimizer = make_optimizer("adam", model.parameters(), lr=float(smash_config["lr"]))
        quantizer = self.make_quantizer(model, config_list, optimizer, smash_config)
        threads = int(smash_config["num_threads"])
        result = fit(model, loader, optimizer=optimizer, epochs=int(smash_config["epochs"]), seed=seed,
                     on_epoch=quantizer.update_epoch, num_threads=threads if threads > 0 else None,
                     desc=self.algorithm_name)
        freeze_and_record(quantizer, smash_config, targets)
        smash_config.state["train_steps"] = result.steps
        smash_config.state["final_loss"] = round(result.final_loss, 6)
        return model
