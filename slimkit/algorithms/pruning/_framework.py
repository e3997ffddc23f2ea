"""Shared machinery of the smash pruners built on :mod:`slimkit.engines.pruning` (one small file each).

``_apply`` of every such pruner runs the same steps:

1. build a ``config_list`` from the hyperparameters (``sparsity``, ``op_types``, ``op_names``, ``exclude``), or
   take ``config_list`` as given (NNI / Auptimizer form), and resolve it against the model (clear errors
   naming the real layers);
2. with ``speedup`` on, trace the model once on the example inputs: ``"default"`` op types then mean the
   layers whose channels the speedup can really remove in the dimensions ``dims`` names (``mlp``, ``heads``,
   ``hidden``; not the classifier feeding the model output), and masks inside a coupled group (residual
   stream, gated MLP, depthwise conv, attention heads) are made to agree (dependency-aware pruning);
3. run the framework pruner (data-driven ones on ``cfg.data``), multiply the masks into the weights and
   unwrap the model;
4. with ``speedup`` on, physically remove the pruned channels with ``ModelSpeedup`` and record
   ``kept_channels`` in the replay state, which ``replay()`` applies to a freshly built base model before
   the saved weights load strictly (``save_fn=REPLAY``); a Hugging Face model's config gets the new sizes
   when one value per field describes every block. With ``speedup`` off the zeros stay in the weights.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from slimkit.algorithms.pruning._selection import (
    dims_hyperparameter,
    dims_of,
    effective_config_list,
    nothing_left,
    resolve_dummy_input,
    round_to_hyperparameter,
    selection_hyperparameters,
)
from slimkit.core.contract import SaveFn, SlimkitPruner, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean, declared_values
from slimkit.engines.pruning import DependencyAwarePruner, Pruner
from slimkit.engines.pruning.coupling import ChannelCoupling
from slimkit.engines.speedup import ModelSpeedup, SpeedupError, UnsupportedOpError, apply_kept_channels
from slimkit.engines.speedup.hf_config import record_sizes
from slimkit.errors import ConfigError, DataError, SlimkitError

Masks = dict[str, dict[str, Any]]
LAYER_TYPES: tuple[type[nn.Module], ...] = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)


class FrameworkPruner(SlimkitPruner):
    """Base of the smash pruners that run a :mod:`slimkit.engines.pruning` pruner (not registered)."""

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
    #: hyperparameters handed to the engine as keywords of the same name
    engine_args: ClassVar[tuple[str, ...]] = ()
    #: replay-state key -> the engine attribute recorded there once the engine has run
    recorded: ClassVar[dict[str, str]] = {}

    def get_hyperparameters(self) -> list:
        """Selection, config_list, speedup, dims, then the pruner's own hyperparameters."""
        hps = selection_hyperparameters(self.default_sparsity, True if self.structured else None)
        if self.dimensional:
            hps += [dims_hyperparameter(), round_to_hyperparameter()]
        if self.head_importance:
            hps.append(Boolean("heads", False, meta={
                "desc": "Kept for older configs: True adds 'heads' to dims (whole attention heads, kv-head groups "
                        "under GQA); dims includes it by default."}))
        return hps + self.extra_hyperparameters()

    @property
    def dimensional(self) -> bool:
        """Whether the pruner takes ``dims`` (a dependency-aware filter pruner)."""
        return self.structured and not self.norms_decide and issubclass(self.engine, DependencyAwarePruner)

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
        """Construct the framework pruner (wraps the selected layers) with the :attr:`engine_args`."""
        return self.engine(model, config_list, **self.engine_kwargs(smash_config))

    def engine_kwargs(self, smash_config: SmashConfigPrefixWrapper) -> dict[str, Any]:
        """The :attr:`engine_args` hyperparameters, as int or float where they are declared so."""
        return declared_values(self.get_hyperparameters(), smash_config, self.engine_args)

    def run_pruner(self, pruner: Pruner, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> None:
        """Compute the masks (one-shot by default; data-driven and training pruners override this); record them."""
        pruner.compress()
        smash_config.state.update({key: getattr(pruner, attr) for key, attr in self.recorded.items()})

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        name = self.algorithm_name
        speedup = self.uses_speedup(smash_config)
        dummy = resolve_dummy_input(name, model, smash_config) if speedup else None
        coupling = ChannelCoupling(model, dummy) if speedup else None
        heads = bool(self.head_importance) and bool(smash_config["heads"])
        dims = dims_of(smash_config, heads) if self.dimensional else None
        if heads and coupling is not None and not coupling.graph.attention:
            raise ConfigError(f"{name}_heads=True, but the speedup found no attention block in this model; it knows "
                              "blocks with q/k/v(/o) projections (separate or fused) and a head size (Llama, BERT, "
                              f"ViT, GPT-2, Phi-3, ...). Set cfg['{name}_heads'] = False.")
        config_list, dropped = effective_config_list(self, model, smash_config, coupling, dims)
        pruner = self.build_pruner(model, config_list, smash_config)
        if not pruner.get_modules_wrapper():
            raise nothing_left(name, config_list, dropped)
        if coupling is not None and isinstance(pruner, DependencyAwarePruner):
            pruner.use_coupling(coupling, dims, int(smash_config["round_to"]) if self.dimensional else 1)
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
        if coupling is not None and not self.norms_decide and not isinstance(pruner, DependencyAwarePruner):
            coupling.reconcile(pruner, lock=False, balance=True, min_layers=2)
        model = pruner.unwrap_model(apply_masks=True)
        masks: Masks = pruner.get_masks()
        state = smash_config.state
        state.update(config_list=config_list, left_dense=sorted(dropped), pruned_layers=sorted(masks), kept_channels={})
        if dropped:
            state["left_dense_why"] = {n: b.reason for n, b in dropped.items()}
        if speedup:
            if self.norms_decide:
                masks = coupling.producer_masks(masks)
            state["kept_channels"], state["speedup_warnings"] = self._speedup(model, dummy, masks)
            state["config_sizes"], why = record_sizes(model)
            if why:
                state["config_sizes_kept_because"] = why
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
        if not kept:
            return model
        apply_kept_channels(model, kept)
        if state.get("config_sizes"):
            record_sizes(model)
        return model


def count_zero_fraction(model: nn.Module, names: list[str]) -> float:
    """Fraction of zero weights over the named layers (reported in the replay state)."""
    total = zeros = 0
    for name in names:
        weight = model.get_submodule(name).weight
        total += weight.numel()
        zeros += int((weight == 0).sum())
    return zeros / total if total else 0.0

