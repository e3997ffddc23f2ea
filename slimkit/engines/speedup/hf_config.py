"""Write a shrunk Hugging Face model's new sizes into its config, so ``from_pretrained`` rebuilds it.

After a speedup every block of a transformers model may have fewer hidden channels, heads or MLP channels.
:func:`record_sizes` finds config values that describe the shrunk model — ``num_attention_heads`` /
``num_key_value_heads`` from the attention blocks, and each other size field (``hidden_size``,
``intermediate_size`` and the names a config maps onto them, such as ``n_embd``) from how the parameter
shapes follow it — then proves them: a skeleton of the same class built from the new config on the meta
device must have exactly the shrunk model's parameter shapes and head counts. Only then is the config
changed; otherwise it keeps describing the base model and the reason is returned (the slimkit save still
rebuilds the model by replaying the shrink). Blocks that were given their own config copy by the shrink
(their head count differed from the shared config) share the updated config again.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from .attention_spec import NUM_HEADS_ATTRS, NUM_KV_HEADS_ATTRS, attention_spec

SIZE_FIELDS = ("hidden_size", "embedding_size", "pooler_hidden_size", "intermediate_size", "moe_intermediate_size",
               "hidden_dim", "ffn_dim", "d_ff", "head_dim")
HEAD_FIELDS = {"num_attention_heads": NUM_HEADS_ATTRS, "num_key_value_heads": NUM_KV_HEADS_ATTRS}


def _build(model: nn.Module, config: Any) -> nn.Module | None:
    try:
        with torch.device("meta"):
            return type(model)(config)
    except Exception:  # noqa: BLE001 - a config the class rejects is simply not a description of the model
        return None


def _shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {n: tuple(p.shape) for n, p in model.named_parameters()}


def _heads(model: nn.Module) -> dict[str, dict[str, int]]:
    found = {}
    for name, module in model.named_modules():
        if attention_spec(module) is not None:
            found[name] = {a: getattr(module, a) for attrs in HEAD_FIELDS.values() for a in attrs
                           if isinstance(getattr(module, a, None), int)}
    return found


def _uniform_heads(model: nn.Module) -> dict[str, int]:
    """Head counts every attention block agrees on (from its attributes or its own config)."""
    specs = [spec for spec in map(attention_spec, model.modules()) if spec is not None]
    values = {"num_attention_heads": {s.num_heads for s in specs},
              "num_key_value_heads": {s.num_kv_heads for s in specs}}
    return {k: v.pop() for k, v in values.items() if len(v) == 1}


def _solve(model: nn.Module, config: Any, field: str, target: dict[str, tuple[int, ...]],
           base: dict[str, tuple[int, ...]]) -> int | None:
    """The value of ``field`` the shrunk shapes imply (from the dims that move when the field moves by one)."""
    value = getattr(config, field, None)
    if not isinstance(value, int) or isinstance(value, bool) or value < 2:
        return None
    probe = copy.deepcopy(config)
    half = value // 2  # half the size keeps it a multiple of the head count, which some configs insist on
    setattr(probe, field, half)
    moved = _build(model, probe)
    if moved is None:
        return None
    guesses = set()
    for name, shape in _shapes(moved).items():  # each moved dim grows linearly with the field
        if name not in base or name not in target or len(shape) != len(base[name]):
            continue
        for d, (old, small) in enumerate(zip(base[name], shape, strict=True)):
            if old == small:
                continue
            step = (old - small) / (value - half)
            guess = value - (old - target[name][d]) / step
            guesses.add(round(guess) if abs(guess - round(guess)) < 1e-6 else -1)
    return guesses.pop() if len(guesses) == 1 and -1 not in guesses else None


def record_sizes(model: nn.Module) -> tuple[dict[str, int], str]:
    """Update ``model.config`` to the shrunk sizes; returns (the fields changed, '' or why nothing changed)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        return {}, "the model has no Hugging Face config"
    target = _shapes(model)
    new = copy.deepcopy(config)
    changed: dict[str, int] = {}
    for field, value in _uniform_heads(model).items():
        if isinstance(getattr(new, field, None), int) and getattr(new, field) != value:
            setattr(new, field, value)
            changed[field] = value
    for field in SIZE_FIELDS:  # one field at a time, each against the config as updated so far
        current = _build(model, new)
        if current is None:
            return {}, f"{type(model).__name__} cannot be rebuilt from its config on the meta device"
        base = _shapes(current)
        if base == target:
            break
        solved = _solve(model, new, field, target, base)
        if solved is not None and solved != getattr(new, field):
            setattr(new, field, solved)
            changed[field] = solved
    rebuilt = _build(model, new)
    if rebuilt is None or _shapes(rebuilt) != target or _heads(rebuilt) != _heads(model):
        return {}, ("no single value per config field describes every block (blocks pruned unevenly, or a size "
                    "the config derives, such as head_dim = hidden_size / num_attention_heads, no longer holds)")
    if not changed:
        return {}, ""
    for field, value in changed.items():
        setattr(config, field, value)
    for module in model.modules():  # blocks given their own config copy share the updated one again
        own = getattr(module, "config", None)
        if own is not config and type(own) is type(config):
            module.config = config
    return changed, ""
