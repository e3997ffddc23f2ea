"""Shared machinery of the PERP recoverers (``text_to_text_perp``, ``text_to_text_inplace_perp``); not an algorithm.

PERP (Zimmer et al., "PERP: Rethinking the Prune-Retrain Paradigm in the Era of LLMs", 2023) recovers a compressed
causal language model by training few parameters: the normalization layers, the biases and the output head in
place, and (the non-inplace recoverer) low-rank MaskLoRA adapters merged into the weights at the end with the
pruned zeros kept. Everything else stays frozen. The hyperparameter names are Pruna's; training goes through
slimkit's one loop (:func:`slimkit.training.fit`) with AdamW, gradient accumulation and a warm-up + cosine
learning-rate schedule. The held-out (validation split) perplexity before and after training goes into the
replay state.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ConfigSpace import (
    CategoricalHyperparameter,
    Constant,
    OrdinalHyperparameter,
    UniformFloatHyperparameter,
    UniformIntegerHyperparameter,
)
from torch import nn

from slimkit.algorithms.recovery._masked_lora import VARIANTS, adapter_dropout, add_adapters, merge_adapters
from slimkit.algorithms.recovery._perp_training import check_settings, keep_zeros, train
from slimkit.core.contract import SlimkitRecoverer, SmashConfigPrefixWrapper
from slimkit.core.selection import select
from slimkit.errors import ConfigError

#: the optimizers Pruna names; the 8-bit ones come from bitsandbytes
OPTIMIZERS: tuple[str, ...] = ("AdamW", "AdamW8bit", "PagedAdamW8bit")
#: attention projections LoRA adapts by default when peft knows no table for the architecture
_DEFAULT_TARGETS = ("*q_proj", "*v_proj", "*query", "*value", "*c_attn")


def training_hyperparameters() -> list:
    """Pruna's finetuner settings plus slimkit's step/time budget and thread count."""
    return [
        UniformIntegerHyperparameter("training_batch_size", 1, 4096, default_value=1,
                                     meta={"desc": "Batch size for finetuning."}),
        UniformIntegerHyperparameter("gradient_accumulation_steps", 1, 1024, default_value=1,
                                     meta={"desc": "Batches whose gradients add up to one optimizer step."}),
        UniformFloatHyperparameter("num_epochs", 0.001, 4096.0, default_value=1.0,
                                   meta={"desc": "Passes over the train data (a fraction trains part of one)."}),
        UniformFloatHyperparameter("learning_rate", 0.0, 1.0, default_value=2e-4,
                                   meta={"desc": "Peak AdamW learning rate (linear warm-up, then cosine decay)."}),
        Constant("dataset_text_field", "text", meta={"desc": "Text field of the train items (Pruna's name; "
                                                             "slimkit's text collate reads 'text')."}),
        CategoricalHyperparameter("report_to", ["none", "wandb", "tensorboard"], default_value="none",
                                  meta={"desc": "Where to report training; slimkit records it in the save's state "
                                                "(only 'none' is supported)."}),
        CategoricalHyperparameter("optimizer", list(OPTIMIZERS), default_value="AdamW",
                                  meta={"desc": "AdamW (torch) or bitsandbytes' AdamW8bit / PagedAdamW8bit."}),
        UniformIntegerHyperparameter("steps", 0, 10**7, default_value=0,
                                     meta={"desc": "Stop after this many optimizer steps (0: no step limit)."}),
        UniformFloatHyperparameter("max_seconds", 0.0, 1e6, default_value=0.0,
                                   meta={"desc": "Wall-clock budget of the training in seconds (0: none)."}),
        UniformIntegerHyperparameter("num_threads", 0, 1024, default_value=0,
                                     meta={"desc": "CPU threads while training (0 keeps torch's setting)."}),
        UniformIntegerHyperparameter("seed", 0, 2**32 - 1, default_value=0,
                                     meta={"desc": "Random seed of adapter initialisation and data shuffling."}),
    ]


def lora_hyperparameters() -> list:
    """Pruna's LoRA adapter settings (``lora_`` prefixed)."""
    return [
        OrdinalHyperparameter("lora_r", [4, 8, 16, 32, 64, 128], default_value=8,
                              meta={"desc": "Rank of the LoRA layers."}),
        OrdinalHyperparameter("lora_alpha_r_ratio", [0.5, 1.0, 2.0], default_value=2.0,
                              meta={"desc": "Alpha/Rank ratio of the LoRA layers (the adapters' scale)."}),
        CategoricalHyperparameter("lora_target_modules", [None, "all-linear"], default_value=None,
                                  meta={"desc": "Layers that get adapters: None, the attention query and value "
                                                "projections (peft's table for the architecture); 'all-linear', "
                                                "every Linear but the output head."}),
        UniformFloatHyperparameter("lora_dropout", 0.0, 0.9, default_value=0.05,
                                   meta={"desc": "Dropout on the adapters' input while training."}),
        CategoricalHyperparameter("lora_variant", list(VARIANTS), default_value="lora",
                                  meta={"desc": "Adapter initialisation: 'lora' (B = 0) or 'pissa' (the top singular "
                                                "directions of the weight)."}),
    ]


def in_place_parameters(model: nn.Module) -> dict[str, list[str]]:
    """Names of the parameters PERP trains in place: ``norm`` (normalization layers), ``bias``, ``head``.

    A normalization layer is a module whose class name ends in ``Norm`` or names a batch/group/instance norm; a
    bias is a parameter named ``bias``; the head is the model's output embeddings. Quantized (non-float) ones are
    left out. A parameter is listed once (the head's bias under ``head``).
    """
    head = model.get_output_embeddings()
    head_names = [n for n, m in model.named_modules() if m is head]
    found: dict[str, list[str]] = {"norm": [], "bias": [], "head": []}
    for module_name, module in model.named_modules():
        kind = type(module).__name__
        is_norm = kind.endswith("Norm") or any(k in kind for k in ("BatchNorm", "GroupNorm", "InstanceNorm"))
        for pname, param in module.named_parameters(recurse=False):
            full = f"{module_name}.{pname}" if module_name else pname
            if not param.is_floating_point() or hasattr(param, "qtype"):
                continue
            if module_name in head_names:
                found["head"].append(full)
            elif is_norm:
                found["norm"].append(full)
            elif pname == "bias":
                found["bias"].append(full)
    return found


def lora_layers(model: nn.Module, target_modules: str | None) -> list[str]:
    """Linear layers that get adapters: peft's default attention targets for the architecture, or every Linear."""
    head = model.get_output_embeddings()
    linears = [n for n in select(model, op_types=["Linear"]) if model.get_submodule(n) is not head]
    if target_modules == "all-linear":
        return linears
    patterns = list(_DEFAULT_TARGETS)
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    try:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as table
    except ImportError:
        table = {}
    if model_type in table:
        patterns = [f"*{p}" for p in table[model_type]]
    chosen = [n for n in select(model, names=patterns) if n in linears]
    if not chosen:
        raise ConfigError(f"text_to_text_perp found no attention projection ({', '.join(patterns)}) among the Linear "
                          f"layers of {type(model).__name__}; set cfg['text_to_text_perp_lora_target_modules'] = "
                          "'all-linear'.")
    return chosen


class PERPRecoverer(SlimkitRecoverer):
    """Base of the PERP recoverers: train norms, biases and the head in place, with or without MaskLoRA adapters.

    Not registered itself; ``text_to_text_perp`` and ``text_to_text_inplace_perp`` are.
    """

    #: whether MaskLoRA adapters are trained (and merged) besides the in-place parameters
    use_lora: ClassVar[bool] = False
    tokenizer_required = True
    dataset_required = True
    references = {"Paper": "https://arxiv.org/abs/2312.15230"}

    def get_hyperparameters(self) -> list:
        """Pruna's names: the LoRA settings (non-inplace only), then the finetuner's."""
        return [*(lora_hyperparameters() if self.use_lora else []), *training_hyperparameters()]

    def model_check_fn(self, model: Any) -> bool:
        """A Hugging Face-style causal language model: ``...ForCausalLM`` / ``...LMHeadModel`` with a Linear head."""
        if not isinstance(model, nn.Module) or not type(model).__name__.endswith(("ForCausalLM", "LMHeadModel")):
            return False
        getter = getattr(model, "get_output_embeddings", None)
        return callable(getter) and isinstance(getter(), nn.Linear)

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return ("It recovers causal language models (a ...ForCausalLM / ...LMHeadModel with a Linear output head); "
                "for other models use 'finetune' or 'kd_recover'.")

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        desc = self.algorithm_name
        check_settings(smash_config, desc)
        was = {n: p.requires_grad for n, p in model.named_parameters()}
        for p in model.parameters():
            p.requires_grad_(False)
        chosen = in_place_parameters(model)
        named = dict(model.named_parameters(remove_duplicate=False))  # a tied head is listed under its own name
        params = list({id(named[n]): named[n] for names in chosen.values() for n in names}.values())
        state = smash_config.state
        state.update({f"{k}_params": sum(named[n].numel() for n in v) for k, v in chosen.items()})
        report, hooks = None, []
        try:
            for p in params:
                p.requires_grad_(True)
            hooks = keep_zeros(params)
            state["zero_kept_params"] = sum(h.zeros for h in hooks)
            if self.use_lora:
                layers = lora_layers(model, smash_config["lora_target_modules"])
                report = add_adapters(model, layers, int(smash_config["lora_r"]),
                                      float(smash_config["lora_alpha_r_ratio"]), str(smash_config["lora_variant"]),
                                      int(smash_config["seed"]))
                params += [p for n, p in model.named_parameters() if "lora_" in n]
                state.update(lora_layers=report.layers, lora_masked_layers=len(report.masked),
                             lora_skipped_layers=report.skipped, lora_params=report.params)
            state["trainable_params"] = sum(p.numel() for p in params)
            if not params:
                raise ConfigError(f"{desc} found nothing to train in {type(model).__name__}: no float normalization "
                                  "layer, bias, head or adapter (a fully quantized model?).")
            dropout = float(smash_config["lora_dropout"]) if self.use_lora else 0.0
            with adapter_dropout(model, report.layers if report else [], dropout):
                train(model, params, smash_config, desc)
        finally:
            for hook in hooks:
                hook.remove()
            if report is not None:
                merge_adapters(model, report.layers)
            for n, p in model.named_parameters():
                p.requires_grad_(was.get(n, True))
        model.eval()
        return model

