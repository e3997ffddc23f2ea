"""Shared machinery of the recoverers and distillers that train a model on ``cfg.data`` (not an algorithm).

:func:`student_hyperparameters` are the training settings they share (length, budget, early stopping,
seed); :func:`train_student` runs :func:`slimkit.training.fit` with them: seeded shuffling, a progress bar,
a step and time budget, and early stopping on the held-out (validation) split's task loss with the best
weights restored. The validation loss before and after training goes into the replay state, so a save
records what the training bought.
"""

from __future__ import annotations

from typing import Any

import torch
from ConfigSpace import UniformFloatHyperparameter, UniformIntegerHyperparameter
from torch import nn

from slimkit.core.contract import SlimkitRecoverer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import ListHyperparameter, TextHyperparameter
from slimkit.errors import DataError
from slimkit.evaluation.runtime import eval_mode
from slimkit.training import BatchLoss, FitResult, default_loss, fit, model_loss, move_batch, split_batch
from slimkit.training.lora import add_lora, lora_targets, merge_lora
from slimkit.utils import model_device, run_model


def student_hyperparameters(epochs: int = 2, lr: float = 1e-3) -> list:
    """Training length, budget, learning rate, batch size, early stopping, seed and threads."""
    return [
        UniformIntegerHyperparameter("epochs", 1, 1000, default_value=epochs,
                                     meta={"desc": "Passes over the train data."}),
        UniformIntegerHyperparameter("steps", 0, 10**7, default_value=0,
                                     meta={"desc": "Stop after this many optimizer steps (0: no step limit)."}),
        UniformFloatHyperparameter("max_seconds", 0.0, 1e6, default_value=0.0,
                                   meta={"desc": "Wall-clock budget of the training in seconds (0: none)."}),
        UniformFloatHyperparameter("lr", 1e-7, 1.0, default_value=lr, log=True,
                                   meta={"desc": "Adam learning rate."}),
        UniformIntegerHyperparameter("batch_size", 1, 4096, default_value=32, meta={"desc": "Train batch size."}),
        UniformIntegerHyperparameter("patience", 0, 1000, default_value=0,
                                     meta={"desc": "Early stopping: evaluations (one per epoch) without a lower "
                                                   "validation loss before stopping; the best weights are kept "
                                                   "(0: train the whole length)."}),
        UniformIntegerHyperparameter("seed", 0, 2**31 - 1, default_value=0,
                                     meta={"desc": "Seed of data shuffling and of any randomness in training."}),
        UniformIntegerHyperparameter("num_threads", 0, 1024, default_value=0,
                                     meta={"desc": "CPU threads while training (0 keeps torch's setting)."}),
    ]


def teacher_hyperparameter(default: str) -> TextHyperparameter:
    """``teacher_ckpt``: a folder to load the teacher from instead of ``default`` (what the algorithm distils from)."""
    return TextHyperparameter("teacher_ckpt", "", meta={
        "desc": f"Folder of the teacher to distil from instead of {default}: a slimkit save (smash_config.json) or "
                "a Hugging Face model folder (config.json + weights); empty: the default."})


def chosen_teacher(smash_config: SmashConfigPrefixWrapper, default: nn.Module) -> nn.Module:
    """The teacher loaded from ``teacher_ckpt`` when smash handed one over, else ``default``."""
    teacher = getattr(smash_config, "teacher", None)
    return teacher if isinstance(teacher, nn.Module) else default


def lora_hyperparameters() -> list:
    """LoRA: the adapter rank (0 trains every weight), scale, dropout and which Linear layers get adapters."""
    return [
        UniformIntegerHyperparameter("lora_rank", 0, 4096, default_value=0,
                                     meta={"desc": "Rank of low-rank adapters (LoRA, via peft) trained instead of the "
                                                   "weights and merged into them afterwards; 0 trains every weight."}),
        UniformFloatHyperparameter("lora_alpha", 0.0, 1e5, default_value=0.0,
                                   meta={"desc": "LoRA scale numerator (adapter scale = alpha / rank); 0 uses "
                                                 "2 x rank."}),
        UniformFloatHyperparameter("lora_dropout", 0.0, 0.9, default_value=0.0,
                                   meta={"desc": "Dropout on the adapters' input while training."}),
        ListHyperparameter("lora_targets", (), meta={"desc": "Linear layers that get adapters (names or globs such as "
                                                             "'*proj'); empty: every Linear but the output head."}),
    ]


class WeightTrainer(SlimkitRecoverer):
    """Base of the recoverers that train the model's floating-point weights on ``cfg.data`` (not registered)."""

    dataset_required = True

    def model_check_fn(self, model: Any) -> bool:
        """Needs a module with trainable parameters."""
        return isinstance(model, nn.Module) and any(p.is_floating_point() for p in model.parameters())

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return "It trains floating-point parameters and the model has none."


def train_adapted(model: nn.Module, smash_config: SmashConfigPrefixWrapper, loss: BatchLoss | None,
                  desc: str) -> nn.Module:
    """:func:`train_student` on all weights, or, with ``lora_rank`` > 0, on LoRA adapters merged in afterwards.

    Returns the trained model: the same object when every weight trained; with LoRA the plain model with the
    adapters folded into its weights (no peft layer left, so it saves and reloads like any model). The state
    records ``lora_rank``, ``lora_layers`` and ``trainable_params``.
    """
    rank = int(smash_config["lora_rank"])
    if rank == 0:
        smash_config.state["trainable_params"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
        train_student(model, smash_config, loss, desc)
        return model
    targets = lora_targets(model, tuple(smash_config["lora_targets"]))
    adapted = add_lora(model, rank, float(smash_config["lora_alpha"]) or None, float(smash_config["lora_dropout"]),
                       targets)
    params = [p for p in adapted.parameters() if p.requires_grad]
    smash_config.state.update(lora_rank=rank, lora_layers=len(targets), trainable_params=sum(p.numel() for p in params))
    train_student(adapted, smash_config, loss, desc, params=params)
    return merge_lora(adapted)


def validation_loss(model: nn.Module, batches: Any, max_batches: int = 50, loss: BatchLoss | None = None) -> float:
    """Mean of ``loss`` over up to ``max_batches`` batches, in eval mode without gradients.

    ``loss`` defaults to :func:`slimkit.training.default_loss` (the task loss).
    """
    loss = loss or default_loss
    device, total, n = model_device(model), 0.0, 0
    with eval_mode(model), torch.no_grad():
        for i, batch in enumerate(batches):
            if i >= max_batches:
                break
            total += float(loss(model, move_batch(batch, device)))
            n += 1
    if n == 0:
        raise DataError("The validation split yielded no batch; add data with a non-empty validation split.")
    return total / n


def _has_task_loss(model: nn.Module, batches: Any) -> bool:
    """Whether the task loss can be computed: the first batch has targets, or the model returns a ``.loss``."""
    batch = next(iter(batches), None)
    if batch is None:
        return False
    inputs, targets = split_batch(batch)
    if targets is not None:
        return True
    with eval_mode(model), torch.no_grad():
        return model_loss(run_model(model, move_batch(inputs, model_device(model)))) is not None


def val_batches(smash_config: SmashConfigPrefixWrapper, batch_size: int) -> Any:
    """The data's validation batches, or None when it has no validation split."""
    try:
        return smash_config.data.val_dataloader(batch_size=batch_size)
    except DataError:
        return None


def train_student(model: nn.Module, smash_config: SmashConfigPrefixWrapper, loss: BatchLoss | None,
                  desc: str, params: Any = None) -> FitResult:
    """Train ``model`` (or only ``params`` when given) with ``loss`` on ``cfg.data``; record the outcome.

    ``smash_config.state`` gets ``train_steps``, ``final_loss``, ``stopped_early`` and, when the data has a
    validation split, ``val_loss_before`` / ``val_loss_after`` with ``val_loss_kind``: ``"task"`` (the task loss,
    when the batches carry targets or the model returns a ``.loss``) or ``"objective"`` (``loss`` itself, e.g.
    the distillation loss of a sentence encoder trained on unlabelled text).
    """
    seed, batch_size = int(smash_config["seed"]), int(smash_config["batch_size"])
    loader = smash_config.data.train_dataloader(batch_size=batch_size, shuffle=True,
                                                generator=torch.Generator().manual_seed(seed))
    val = val_batches(smash_config, batch_size)
    patience = int(smash_config["patience"])
    if patience and val is None:
        raise DataError(f"{desc}_patience needs a validation split to stop on; add data that has one, or set "
                        f"cfg['{desc}_patience'] = 0.")
    state = smash_config.state
    val_fn = None
    if val is not None:
        task = loss is None or _has_task_loss(model, val)
        state["val_loss_kind"] = "task" if task else "objective"
        val_loss = None if task else loss
        val_fn = lambda m: validation_loss(m, val, loss=val_loss)  # noqa: E731
        state["val_loss_before"] = round(val_fn(model), 6)
    threads, steps = int(smash_config["num_threads"]), int(smash_config["steps"])
    seconds = float(smash_config["max_seconds"])
    optimizer = torch.optim.Adam(params if params is not None else model.parameters(), lr=float(smash_config["lr"]))
    result = fit(model, loader, loss=loss, optimizer=optimizer, epochs=int(smash_config["epochs"]),
                 steps=steps or None, seed=seed, num_threads=threads or None, desc=desc,
                 max_seconds=seconds or None, eval_fn=val_fn if patience else None,
                 patience=patience or None, mode="min", restore_best=bool(patience))
    if val_fn is not None:
        state["val_loss_after"] = round(val_fn(model), 6)
    state.update(train_steps=result.steps, final_loss=round(result.final_loss, 6), stopped_early=result.stopped_early)
    return result
