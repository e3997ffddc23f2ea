"""Layer-stack surgery for the layer-dropping distiller (not an algorithm).

Find a transformer's block list, keep a subset of its blocks, and say which teacher block each kept student
block should imitate.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from slimkit.errors import ConfigError


def find_layer_stack(model: nn.Module) -> tuple[str, nn.ModuleList] | None:
    """The longest ``nn.ModuleList`` of >= 2 blocks of one class, as ``(qualified name, list)``.

    E.g. ``model.layers`` (Llama), ``bert.encoder.layer``, ``transformer.h``; None when the model has none.
    """
    best: tuple[str, nn.ModuleList] | None = None
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) >= 2 and len({type(b) for b in module}) == 1:
            if best is None or len(module) > len(best[1]):
                best = (name, module)
    return best


def check_keep(keep: Sequence[int], total: int, where: str) -> list[int]:
    """``keep`` as a sorted list of distinct block indices in ``[0, total)``, at least one and not all."""
    if any(isinstance(i, bool) or not isinstance(i, int) for i in keep):
        raise ConfigError(f"{where} must list block indices (integers), got {list(keep)!r}.")
    chosen = sorted(set(keep))
    if not chosen or chosen[0] < 0 or chosen[-1] >= total or len(chosen) == total:
        raise ConfigError(f"{where} = {list(keep)!r} must name between 1 and {total - 1} distinct blocks of the "
                          f"{total} in the model (indices 0 to {total - 1}).")
    return chosen


def default_keep(total: int) -> list[int]:
    """Every other block, starting with the first: ``[0, 2, 4, ...]``."""
    return list(range(0, total, 2))


def teacher_targets(keep: Sequence[int], total: int) -> list[int]:
    """For each kept block, the teacher block whose output it should reproduce.

    That is the last block of the span it replaces: the block before the next kept one, and the teacher's
    last block for the last kept one.
    """
    return [*(k - 1 for k in keep[1:]), total - 1]


def check_teacher_stack(teacher: nn.Module, stack: str, total: int) -> None:
    """The hidden-state targets index the teacher's blocks as the model's: same block list, same depth."""
    found = find_layer_stack(teacher)
    if found is None or found[0] != stack or len(found[1]) != total:
        got = f"{found[0]!r} with {len(found[1])} blocks" if found else "no block list"
        raise ConfigError(f"layer_drop_teacher_ckpt: the teacher has {got}, the model {stack!r} with {total} blocks; "
                          "hidden-state distillation pairs blocks by index, so they must match. Set "
                          "layer_drop_hidden_weight = 0 to distil the outputs only.")


def keep_layers(model: nn.Module, stack: str, keep: Sequence[int]) -> nn.Module:
    """Keep only blocks ``keep`` of the ``nn.ModuleList`` named ``stack``, in place; return ``model``.

    Kept blocks are renumbered (their ``layer_idx``, used by key/value caches) and a Hugging Face config's
    ``num_hidden_layers`` (and ``layer_types``) follow.
    """
    blocks = model.get_submodule(stack)
    if not isinstance(blocks, nn.ModuleList):
        raise ConfigError(f"{stack!r} is a {type(blocks).__name__}, not the nn.ModuleList of blocks.")
    chosen = check_keep(keep, len(blocks), "keep_layers")
    kept = nn.ModuleList([blocks[i] for i in chosen])
    for new_index, block in enumerate(kept):
        for module in block.modules():
            if isinstance(getattr(module, "layer_idx", None), int):
                module.layer_idx = new_index
    parent, _, attr = stack.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attr, kept)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "num_hidden_layers"):
        layer_types = getattr(config, "layer_types", None)
        if isinstance(layer_types, list) and len(layer_types) == len(blocks):
            config.layer_types = [layer_types[i] for i in chosen]
        config.num_hidden_layers = len(chosen)
    return model
