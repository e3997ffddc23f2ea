"""Which layers and dimensions the smash pruners cut: hyperparameters, the effective config_list, and why not.

With ``speedup`` on, the model is traced once; ``"default"`` op types then mean the layers whose channels
the speedup can really remove in the dimensions ``dims`` asks for (``mlp``, ``heads``, ``hidden``, see
:mod:`slimkit.engines.pruning.dims`). The layers left dense are listed with the reason (the op and layer
that pins their channels, the producer they are tied to) and the hyperparameter that gets around it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from ConfigSpace import UniformIntegerHyperparameter
from torch import nn

from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import (
    Boolean,
    ConfigListHyperparameter,
    ListHyperparameter,
    NameRatiosHyperparameter,
    integer,
    real,
)
from slimkit.data import split_batch
from slimkit.engines.pruning import PruningConfigError, resolve_config_list
from slimkit.engines.pruning.blockers import Blocker, explain, summarize
from slimkit.engines.pruning.coupling import ChannelCoupling
from slimkit.engines.pruning.dims import DIMS, Dims
from slimkit.errors import ConfigError, DataError
from slimkit.utils import model_device, move_inputs


class Selecting(Protocol):
    """What the selection reads of a framework pruner (:class:`._framework.FrameworkPruner` is the one)."""

    algorithm_name: ClassVar[str]
    engine: ClassVar[Any]
    norms_decide: ClassVar[bool]

    def op_types(self, smash_config: SmashConfigPrefixWrapper) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
        """(what ``"default"`` expands to, the layer types the pruner accepts or None for any)."""


def selection_hyperparameters(default_sparsity: float, speedup: bool | None) -> list:
    """Sparsity, layer selection, the raw ``config_list`` and (for structured pruners) ``speedup``."""
    hps = [
        real("sparsity", 0.0, 0.99, default_sparsity, "Fraction of each selected layer's units (weights, filters or "
             "channels) to prune."),
        ListHyperparameter("op_types", ("default",),
                           meta={"desc": "Layer class names to prune; 'default' = the types the pruner supports "
                                         "(with speedup: those layers whose channels can really be removed)."}),
        ListHyperparameter("op_names", (), meta={"desc": "Qualified layer names to prune (model.named_modules()); "
                                                         "when given, only these layers are pruned."}),
        ListHyperparameter("exclude", (), meta={"desc": "Layer names left dense."}),
        ConfigListHyperparameter(
            "config_list",
            meta={"desc": "NNI-style config_list, e.g. [{'sparsity': 0.5, 'op_types': ['default']}, {'sparsity': "
                          "0.7, 'op_names': ['conv2']}, {'exclude': True, 'op_names': ['fc']}]; when non-empty it "
                          "replaces sparsity, op_types, op_names and exclude (later entries win per layer)."}),
    ]
    if speedup is not None:
        hps.append(Boolean("speedup", speedup, meta={"desc": "Physically remove the pruned channels (smaller, "
                                                             "faster layers) instead of keeping them as zeros."}))
    return hps


def dims_hyperparameter() -> NameRatiosHyperparameter:
    """``dims``: the dimensions to cut, each at the sparsity or at its own ratio."""
    return NameRatiosHyperparameter("dims", DIMS, DIMS, meta={"desc": (
        "What to prune (with speedup): 'mlp' (channels inside blocks: MLP intermediate channels, conv block "
        "channels, each MoE expert's intermediate channels), 'heads' (whole attention heads; under GQA a key/value "
        "head with its query heads) and 'hidden' (the residual stream: embeddings, every block's input and output "
        "projections, norms, final norm and head, alike in all blocks). A list prunes each at the sparsity; a dict "
        "such as {'mlp': 0.5, 'heads': 0.25, 'hidden': 0.3} gives each its own ratio (None: the sparsity).")})


def round_to_hyperparameter() -> UniformIntegerHyperparameter:
    """``round_to``: each coupled channel group keeps a multiple of this many channels (Torch-Pruning's)."""
    return integer("round_to", 1, 4096, 1, "Round every coupled channel group's kept count to the nearest multiple of "
                   "this when the channels are removed (never 0, never above the width; 1 = as pruning leaves it). 16 "
                   "(or 8) puts the widths on the blocks oneDNN's CPU convolutions use, which avoids its slow padded "
                   "reorders at batch 1.")


def dims_of(smash_config: SmashConfigPrefixWrapper, heads_flag: bool) -> Dims:
    """``{dim: ratio or None}`` from the ``dims`` (and legacy ``heads``) hyperparameters.

    None: the dimension is cut at its layers' sparsity (``sparsity``, or their config_list entry's).
    """
    value = smash_config["dims"]
    named = dict(value) if isinstance(value, dict) else dict.fromkeys(value)
    if heads_flag:
        named.setdefault("heads", None)
    return {d: None if r is None else float(r) for d, r in named.items()}


def resolve_dummy_input(name: str, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> Any:
    """The example inputs, else the first train batch's inputs; a clear error when the config has neither."""
    inputs = smash_config.example_inputs
    if inputs is None and smash_config.data is not None:
        try:
            inputs = split_batch(next(iter(smash_config.data.train_dataloader(batch_size=8, shuffle=False))))[0]
        except StopIteration as exc:
            raise DataError(f"{name}: the train data is empty, so it gives no input to trace the model with.") from exc
    if inputs is None:
        raise ConfigError(
            f"{name} with {name}_speedup=True runs the model once to find which channels it can remove, and this "
            "SmashConfig has no input for that. Call cfg.add_example_inputs(inputs) with one batch the model "
            f"accepts, or cfg.add_data(...); or set cfg['{name}_speedup'] = False to keep pruned channels as zeros."
        )
    return move_inputs(inputs, model_device(model))


def _copy_entry(entry: Any) -> Any:
    if not isinstance(entry, dict):
        return entry
    return {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in entry.items()}


def knobs(name: str) -> dict[str, str]:
    """How a SmashConfig spells the hyperparameters a blocker's fix names."""
    return {k: f"cfg['{name}_{k}']" for k in ("dims", "exclude", "op_names", "speedup")}


def effective_config_list(
    algo: Selecting, model: nn.Module, smash_config: SmashConfigPrefixWrapper, coupling: ChannelCoupling | None,
    dims: Dims | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Blocker]]:
    """The config_list handed to the framework pruner, and why each ``"default"`` layer left dense is left."""
    name = algo.algorithm_name
    given = smash_config["config_list"]
    if given:
        config_list, source = [_copy_entry(e) for e in given], f"{name}_config_list"
    else:
        entry: dict[str, Any] = {"sparsity": float(smash_config["sparsity"])}
        op_names, op_types = list(smash_config["op_names"]), list(smash_config["op_types"])
        if op_names:
            entry["op_names"] = op_names
        if op_types != ["default"] or not op_names:
            entry["op_types"] = op_types
        config_list, source = [entry], f"{name}_sparsity/op_types/op_names/exclude"
        if smash_config["exclude"]:
            config_list.append({"exclude": True, "op_names": list(smash_config["exclude"])})
    default_types, supported = algo.op_types(smash_config)
    try:
        resolved = resolve_config_list(model, config_list, default_types, supported,
                                       algo.engine.extra_config_keys)
    except PruningConfigError as exc:
        raise PruningConfigError(f"{name}: {exc} (config_list {config_list} from {source})") from exc
    if coupling is None:
        return config_list, {}
    by_default = [n for n, c in resolved.items() if "op_names" not in c
                  and "default" in c.get("op_types", ["default"]) and c["op_type"] not in c.get("op_types", ())]
    wanted = tuple(dims) if dims is not None else DIMS
    keep = coupling.shrinkable(resolved, algo.norms_decide, wanted)
    dropped = {n: explain(coupling, n, resolved, wanted, knobs(name)) for n in by_default if n not in keep}
    if dropped:
        config_list.append({"exclude": True, "op_names": list(dropped)})
    _refuse_pinned(name, coupling, [n for n in resolved if n not in by_default and n not in keep], resolved, wanted)
    return config_list, dropped


def _refuse_pinned(name: str, coupling: ChannelCoupling, named: list[str], resolved: Any, dims: Any) -> None:
    """Layers named explicitly whose channels an op pins: say so (with the exclude entry) instead of skipping."""
    blocked = {n: explain(coupling, n, resolved, dims, knobs(name)) for n in named}
    pinned = {n: b for n, b in blocked.items() if "flow into `" in b.reason}
    if pinned:
        layers = sorted(pinned)
        raise ConfigError(
            f"{name}: cannot remove the pruned channels of {layers}:\n{summarize(pinned)}\nExclude them with the "
            f"config_list entry {{'exclude': True, 'op_names': {layers}}} (in a SmashConfig: cfg['{name}_exclude'] = "
            f"{layers}), or set cfg['{name}_speedup'] = False to keep the pruned channels as zeros."
        )


def nothing_left(name: str, config_list: list[dict[str, Any]], dropped: dict[str, Blocker]) -> ConfigError:
    """The error when every selected layer was left dense: why each was, and how to get around it."""
    why = summarize(dropped) if dropped else "  (no layer matched the selection)"
    return ConfigError(
        f"{name}: no layer is left to prune. The 'default' layers cannot be shrunk:\n{why}\nName layers in "
        f"cfg['{name}_op_names'] or {name}_config_list to prune them anyway, or set cfg['{name}_speedup'] = False "
        f"to keep the masks as zeros. (config_list: {config_list})"
    )
