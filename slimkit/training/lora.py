"""Low-rank adapters (LoRA) for training a large model cheaply, merged back into plain weights afterwards.

:func:`add_lora` wraps a model with Hugging Face ``peft``'s LoRA (``W x + (alpha / r) B A x`` beside each
chosen Linear layer, ``B`` starting at zero so the wrapped model computes exactly what the model did); only the
adapter matrices train. :func:`merge_lora` folds ``(alpha / r) B A`` into each base weight and returns the plain
model (same classes and parameter names as before), so a save holds ordinary weights and reloads without peft.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from slimkit.core.selection import select, unmatched
from slimkit.errors import ConfigError, MissingPackageError, check_int

#: the pip extra that installs peft
EXTRA = "lora"


def _peft() -> Any:
    try:
        import peft
    except ImportError as exc:
        raise MissingPackageError(f"LoRA needs peft: pip install 'slimkit[{EXTRA}]' (or pip install peft), or set "
                                  "the rank to 0 to fine-tune every weight.") from exc
    return peft


def _output_layer_names(model: nn.Module) -> set[str]:
    """Names of the output head (a Hugging Face model's output embeddings) -- adapted never by default."""
    getter = getattr(model, "get_output_embeddings", None)
    head = getter() if callable(getter) else None
    return {n for n, m in model.named_modules() if head is not None and m is head}


def lora_targets(model: nn.Module, targets: Sequence[str] = ()) -> list[str]:
    """The Linear layers LoRA adapts: those ``targets`` names (exact or glob), else every Linear but the output head.

    A target that names no layer, or one that is not a Linear layer, raises ConfigError naming the real layers.
    """
    linears = select(model, op_types=["Linear"])
    if targets:
        missing = unmatched([n for n, _ in model.named_modules() if n], list(targets))
        if missing:
            raise ConfigError(f"LoRA targets {missing} name no layer of the model. Linear layers: "
                              f"{', '.join(linears[:30])}{' ...' if len(linears) > 30 else ''}.")
        chosen = select(model, names=list(targets))
        wrong = [n for n in chosen if n not in linears]
        if wrong:
            raise ConfigError(f"LoRA adapts Linear layers only; {wrong[:5]} are not Linear. Name Linear layers "
                              f"(e.g. '*proj') or leave the targets empty for every Linear but the output head.")
        return chosen
    head = _output_layer_names(model)
    chosen = [n for n in linears if n not in head]
    if not chosen:
        raise ConfigError(f"LoRA found no Linear layer to adapt in {type(model).__name__}; set the rank to 0 to "
                          "fine-tune the whole model.")
    return chosen


def add_lora(model: nn.Module, rank: int, alpha: float | None = None, dropout: float = 0.0,
             targets: Sequence[str] = ()) -> nn.Module:
    """``model`` wrapped with rank-``rank`` LoRA adapters on :func:`lora_targets`; only adapters are trainable.

    ``alpha`` defaults to ``2 * rank`` (scale 2). The wrapper forwards calls to the model; the model itself is
    changed in place (its Linear layers become LoRA layers) until :func:`merge_lora`.
    """
    check_int("LoRA rank", rank)
    peft = _peft()
    names = lora_targets(model, targets)
    config = peft.LoraConfig(r=rank, lora_alpha=float(alpha if alpha else 2 * rank), lora_dropout=float(dropout),
                             target_modules=names, bias="none")
    return peft.tuners.lora.LoraModel(model, config, "default")


def is_lora(model: nn.Module) -> bool:
    """Whether ``model`` is a LoRA wrapper made by :func:`add_lora`."""
    return any(type(m).__module__.startswith("peft.") for m in model.modules())


def merge_lora(adapted: nn.Module) -> nn.Module:
    """Fold every adapter into its base weight and return the plain model (no peft class left in it)."""
    merge = getattr(adapted, "merge_and_unload", None)
    if not callable(merge):
        raise ConfigError(f"merge_lora needs the wrapper add_lora returned, got {type(adapted).__name__}.")
    model = merge()
    left = sorted({type(m).__name__ for m in model.modules() if type(m).__module__.startswith("peft.")})
    if left:
        raise ConfigError(f"Merging the LoRA adapters left peft layers {left} in the model; please report this bug.")
    for p in model.parameters():
        p.requires_grad_(True)
    return model
