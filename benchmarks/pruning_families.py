"""Parameters kept at 50% on tiny random configs of transformers' families: slimkit l1_filter vs Torch-Pruning.

    PYTHONPATH=. .venv/bin/python benchmarks/pruning_families.py

The configs are those of ``tests/algorithms/pruning/families.py`` (hidden 64, 4 heads, MLP 128, 2 layers; RegNet,
ConvNeXt, Swin and MobileViT at their own tiny sizes). slimkit: ``l1_filter`` at sparsity 0.5 with its default
``dims`` (MLP channels, whole heads, hidden width). Torch-Pruning: ``MetaPruner`` + ``MagnitudeImportance(p=1)``
at ``pruning_ratio=0.5`` with the classifier / LM head ignored. "fails" gives the exception a library raised
(while pruning, or when the pruned model ran on the example input).
"""

from __future__ import annotations

import copy
import warnings

import torch

from slimkit import SmashConfig, smash
from slimkit.evaluation import count_parameters
from tests.algorithms.pruning.families import FAMILIES, build

HEADS = {"roberta": "classifier.out_proj", "electra": "classifier.out_proj", "regnet": "classifier.1",
         "gpt2": "lm_head", "phi3": "lm_head", "mixtral": "lm_head"}


def slimkit_kept(model: torch.nn.Module, inputs: dict) -> str:
    cfg = SmashConfig({"l1_filter": {"sparsity": 0.5}}, device="cpu")
    cfg.add_example_inputs(inputs)
    try:
        small = smash(copy.deepcopy(model), cfg, verbose=False).model
    except Exception as exc:  # noqa: BLE001 - a benchmark reports failures
        return f"fails ({type(exc).__name__})"
    return f"{count_parameters(small) / count_parameters(model):.0%}"


def torch_pruning_kept(model: torch.nn.Module, inputs: dict, head: str) -> str:
    import torch_pruning as tp

    pruned = copy.deepcopy(model)
    try:
        pruner = tp.pruner.MetaPruner(pruned, inputs, importance=tp.importance.MagnitudeImportance(p=1),
                                      pruning_ratio=0.5, ignored_layers=[pruned.get_submodule(head)])
        pruner.step()
        with torch.no_grad():
            pruned(**inputs)
    except Exception as exc:  # noqa: BLE001 - a benchmark reports failures
        return f"fails ({type(exc).__name__}: {str(exc)[:48]})"
    return f"{count_parameters(pruned) / count_parameters(model):.0%}"


def main() -> None:
    warnings.filterwarnings("ignore")
    print("| family | parameters | slimkit kept | Torch-Pruning kept |\n|---|---:|---:|---:|")
    for name in FAMILIES:
        model, inputs = build(name)
        print(f"| {name} | {count_parameters(model):,} | {slimkit_kept(model, inputs)} | "
              f"{torch_pruning_kept(model, inputs, HEADS.get(name, 'classifier'))} |", flush=True)


if __name__ == "__main__":
    main()
