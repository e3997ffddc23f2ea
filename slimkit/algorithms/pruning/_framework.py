"""Shared machinery of the smash pruners built on :mod:`slimkit.compression.pruning` (one small file each).

``_apply`` of every such pruner runs the same steps:

1. build a ``config_list`` from the hyperparameters (``sparsity``, ``op_types``, ``op_names``, ``exclude``), or
   take ``config_list`` as given (NNI / Auptimizer form), and resolve it against the model (clear errors
   naming the real layers);
2. with ``speedup`` on, trace the model once on the example inputs: ``"default"`` op types then mean the
   layers whose channels the speedup can really remove (not the classifier feeding the model output, not
   layers tied to embeddings or attention projections), and masks inside a coupled group (residual add,
   gated MLP, depthwise conv) are made to agree (dependency-aware pruning);
3. run the framework pruner (data-driven ones on ``cfg.data``), multiply the masks into the weights and
   unwrap the model;
4. with ``speedup`` on, physically remove the pruned channels with ``ModelSpeedup`` and record
   ``kept_channels`` in the replay state, which ``replay()`` applies to a freshly built base model before
   the saved weights load strictly (``save_fn=REPLAY``). With ``speedup`` off the zeros stay in the weights.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ConfigSpace import UniformFloatHyperparameter
from torch import nn

from slimkit.compression.pruning import AttentionHeadPruner, Pruner, PruningConfigError, resolve_config_list
from slimkit.compression.pruning.coupling import ChannelCoupling
from slimkit.compression.speedup import ModelSpeedup, SpeedupError, UnsupportedOpError, apply_kept_channels
from slimkit.core.contract import SaveFn, SlimkitPruner, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean, ConfigListHyperparameter, ListHyperparameter
from slimkit.data import split_batch
from slimkit.errors import ConfigError, DataError, SlimkitError
from slimkit.utils import model_device, move_inputs

Masks = dict[str, dict[str, Any]]
LAYER_TYPES: tuple[type[nn.Module], ...] = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)


def selection_hyperparameters(default_sparsity: float, speedup: bool | None) -> list:
    """Sparsity, layer selection, the raw ``config_list`` and (for structured pruners) ``speedup``."""
    hps = [
        UniformFloatHyperparameter("sparsity", 0.0, 0.99, default_value=default_sparsity,
                                   meta={"desc": "Fraction of each selected layer's units (weights, filters or "
                                                 "channels) to prune."}),
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


def effective_config_list(
    algo: FrameworkPruner, model: nn.Module, smash_config: SmashConfigPrefixWrapper, coupling: ChannelCoupling | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The config_list handed to the framework pruner, and the ``"default"`` layers left dense for the speedup."""
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
        return config_list, []
    by_default = [n for n, c in resolved.items() if "op_names" not in c
                  and "default" in c.get("op_types", ["default"]) and c["op_type"] not in c.get("op_types", ())]
    keep = coupling.shrinkable(resolved, algo.norms_decide)
    dropped = [n for n in by_default if n not in keep]
    if dropped:
        config_list.append({"exclude": True, "op_names": dropped})
    return config_list, dropped


def merge_masks(first: Masks, second: Masks) -> Masks:
    """Union of two mask dicts; a layer in both gets the product of its masks."""
    merged = {name: dict(masks) for name, masks in first.items()}
    for name, masks in second.items():
        into = merged.setdefault(name, {})
        for key, mask in masks.items():
            old = into.get(key)
            if old is None:
                into[key] = mask
            elif mask is not None:
                into[key] = mask * old
    return merged


def head_masks(model: nn.Module, sparsity: float, importance: str) -> Masks:
    """Prune whole attention heads (kv-head groups under GQA) of every attention block; masks go into weights."""
    pruner = AttentionHeadPruner(model, [{"sparsity": sparsity, "op_types": ["default"]}], importance=importance)
    pruner.compress()
    pruner.unwrap_model(apply_masks=True)
    return pruner.get_masks()


class FrameworkPruner(SlimkitPruner):
    """Base of the smash pruners that run a :mod:`slimkit.compression.pruning` pruner (not registered)."""

    engine: ClassVar[type[Pruner]]
    #: whether masks remove whole output channels (then ``speedup`` can shrink the layers)
    structured: ClassVar[bool] = True
    #: Network Slimming prunes norms; their channels are removed through the layers that produce them
    norms_decide: ClassVar[bool] = False
    #: "l1"/"l2": the pruner also offers ``heads`` (attention-head pruning with that importance)
    head_importance: ClassVar[str | None] = None
    default_sparsity: ClassVar[float] = 0.5
    model_layer_types: ClassVar[tuple[type[nn.Module], ...]] = LAYER_TYPES
    save_fn = SaveFn.REPLAY
    #: on the experiment face too, coupled layers share one mask when an input to trace is given (what the
    #: SmashConfig face does with speedup), so one name prunes the same channels everywhere
    engine_defaults: ClassVar[dict[str, Any]] = {"dependency_aware": True}

    def get_hyperparameters(self) -> list:
        """Selection, config_list, speedup, then the pruner's own hyperparameters."""
        hps = selection_hyperparameters(self.default_sparsity, True if self.structured else None)
        if self.head_importance:
            hps.append(Boolean("heads", False, meta={
                "desc": "Also prune whole attention heads (kv-head groups under GQA) of Llama/BERT-style blocks at "
                        f"the same sparsity, ranked by the {self.head_importance.upper()} norm of their q/k/v/o "
                        "weights."}))
        return hps + self.extra_hyperparameters()

    def extra_hyperparameters(self) -> list:
        """The pruner's own hyperparameters (none by default)."""
        return []

    def model_check_fn(self, model: Any) -> bool:
        """Needs a layer the pruner can prune."""
        return isinstance(model, nn.Module) and any(isinstance(m, self.model_layer_types) for m in model.modules())

    def model_check_reason(self) -> str:
        """Which models are supported."""
        names = ", ".join(t.__name__ for t in self.model_layer_types)
        return f"It prunes {names} layers and the model has none."

    def op_types(self, smash_config: SmashConfigPrefixWrapper) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
        """(what ``"default"`` expands to, the layer types the pruner accepts or None for any)."""
        return self.engine.default_op_types, self.engine.supported_op_types

    def uses_speedup(self, smash_config: SmashConfigPrefixWrapper) -> bool:
        """Whether pruned channels are physically removed."""
        return self.structured and bool(smash_config["speedup"])

    def build_pruner(self, model: nn.Module, config_list: list[dict[str, Any]],
                     smash_config: SmashConfigPrefixWrapper) -> Pruner:
        """Construct the framework pruner (wraps the selected layers)."""
        return self.engine(model, config_list)

    def run_pruner(self, pruner: Pruner, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> None:
        """Compute the masks (one-shot by default; data-driven and training pruners override this)."""
        pruner.compress()

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        name = self.algorithm_name
        speedup = self.uses_speedup(smash_config)
        dummy = resolve_dummy_input(name, model, smash_config) if speedup else None
        coupling = ChannelCoupling(model, dummy) if speedup else None
        config_list, dropped = effective_config_list(self, model, smash_config, coupling)
        pruner = self.build_pruner(model, config_list, smash_config)
        heads = bool(self.head_importance) and bool(smash_config["heads"])
        if not pruner.get_modules_wrapper() and not heads:
            raise ConfigError(
                f"{name}: no layer is left to prune with config_list {config_list}. The 'default' layers {dropped} "
                "cannot be shrunk (their channels reach the model output or are tied to layers that are not "
                f"pruned); name layers in {name}_op_names or {name}_config_list to prune them anyway, or set "
                f"cfg['{name}_speedup'] = False to keep the masks as zeros."
            )
        try:
            self.run_pruner(pruner, model, smash_config)
        except (RuntimeError, TypeError, ValueError) as exc:
            if not self.dataset_required or isinstance(exc, SlimkitError):
                raise
            raise DataError(
                f"{name}: running the model on the train data failed ({type(exc).__name__}: {str(exc)[:300]}). The "
                "dataset's batches must be (inputs, targets) the model accepts; add matching data with "
                "cfg.add_data(...)."
            ) from exc
        if coupling is not None and not self.norms_decide:
            coupling.reconcile(pruner, lock=False, balance=True, min_layers=2)
        model = pruner.unwrap_model(apply_masks=True)
        masks: Masks = pruner.get_masks()
        state = smash_config.state
        state.update(config_list=config_list, left_dense=dropped, pruned_layers=sorted(masks), kept_channels={})
        if heads:
            extra = head_masks(model, float(smash_config["sparsity"]), str(self.head_importance))
            state["head_pruned_layers"] = sorted(extra)
            masks = merge_masks(masks, extra)
        if speedup:
            if self.norms_decide:
                masks = coupling.producer_masks(masks)
            state["kept_channels"], state["speedup_warnings"] = self._speedup(model, dummy, masks)
        return model

    def _speedup(self, model: nn.Module, dummy: Any, masks: Masks) -> tuple[dict[str, Any], list[str]]:
        name = self.algorithm_name
        try:
            speedup = ModelSpeedup(model, dummy, masks)
            speedup.speedup_model()
        except UnsupportedOpError as exc:
            raise ConfigError(f"{name}: {exc} In a SmashConfig: cfg['{name}_exclude'] = {exc.layers}, or "
                              f"cfg['{name}_speedup'] = False to keep the pruned channels as zeros.") from exc
        except SpeedupError as exc:
            raise ConfigError(f"{name}: {exc} Set cfg['{name}_speedup'] = False to keep the pruned channels as "
                              "zeros instead.") from exc
        return dict(speedup.kept_channels or {}), list(speedup.warnings)

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Shrink a freshly built base model to the recorded kept channels (weights then load strictly)."""
        kept = state.get("kept_channels") or {}
        return apply_kept_channels(model, kept) if kept else model


def count_zero_fraction(model: nn.Module, names: list[str]) -> float:
    """Fraction of zero weights over the named layers (reported in the replay state)."""
    total = zeros = 0
    for name in names:
        weight = model.get_submodule(name).weight
        total += weight.numel()
        zeros += int((weight == 0).sum())
    return zeros / total if total else 0.0

