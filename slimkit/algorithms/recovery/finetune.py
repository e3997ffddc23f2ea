"""finetune: recover quality after compression by training on the task loss of ``cfg.data``."""

from __future__ import annotations

from typing import Any

from slimkit.algorithms.recovery._training import (
    WeightTrainer,
    lora_hyperparameters,
    student_hyperparameters,
    train_adapted,
)
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.registry import register


@register
class Finetune(WeightTrainer):
    """Fine-tuning: train the compressed model on the task loss of the SmashConfig's data.

    The loss is cross-entropy on the batch targets (or the model's own ``.loss``), through slimkit's one
    training loop: seeded shuffling, a progress bar, a step and time budget, and optional early stopping on
    the validation split (``patience``) with the best weights kept. For large language models ``lora_rank`` > 0
    trains low-rank adapters (LoRA, via peft) instead of every weight and merges them into the weights at the
    end. The weights change, the architecture does not, so a save stores plain weights as they are.
    """

    algorithm_name = "finetune"
    #: Pruna's names for close algorithms (errors point here)
    near_names = ("text_to_image_perp", "text_to_image_inplace_perp", "text_to_image_lora")
    aliases = ("fine_tune", "text_to_text_lora")
    #: Pruna's LoRA recoverer: its names for the same settings, and LoRA on by default under that name
    renamed_hyperparameters = {"text_to_text_lora": {"lora_r": "lora_rank", "learning_rate": "lr",
                                                     "training_batch_size": "batch_size", "num_epochs": "epochs"}}
    alias_defaults = {"text_to_text_lora": {"lora_rank": 8}}
    references = {"Guide": "https://pytorch.org/tutorials/beginner/finetuning_torchvision_models_tutorial.html"}

    def get_hyperparameters(self) -> list:
        """The shared training settings (epochs, steps, max_seconds, lr, batch_size, patience, seed...)."""
        return [*student_hyperparameters(epochs=2, lr=1e-3), *lora_hyperparameters()]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        return train_adapted(model, smash_config, None, self.algorithm_name)
