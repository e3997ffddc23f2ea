"""``create_compressor``: the Auptimizer-shaped entry point a compression script calls.

Typical script (pruning)::

    compressor = slimkit.create_compressor(model, config, optimizer=optimizer)
    model = compressor.compress()
    model = compressor.apply_speedup(dummy_input=torch.randn(1, 1, 8, 8))   # optional: really remove channels
    ...fine-tune (make a new optimizer: the speedup replaced the pruned parameters)...
    compressor.export_model("model.safetensors", "mask.safetensors", speedup=True, folder_name="out")
    slimkit.print_result(accuracy)

Quantization works the same way: ``"type": "quantization"`` with an engine such as ``qat``/``lsq``/``dorefa``/
``bnn`` wraps the layers for training (``compress()``, train, ``export_model(...)`` freezes them to integer
codes and writes safetensors + a JSON layer record); an algorithm without an engine (``rtn``, ``gptq``,
``int8_dynamic``, ``half``...) runs as its smash algorithm in ``compress()`` and ``export_model`` writes a slimkit
save directory. :func:`slimkit.faces.auptimizer.load_compressed_model` reloads any of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from slimkit.config import SmashConfig
from slimkit.core.io import save_tensors_atomic, write_json_atomic
from slimkit.engine import SmashedModel, smash
from slimkit.engines.pruning import Pruner
from slimkit.engines.pruning.coupling import has_norm_masks
from slimkit.engines.pruning.coupling import norm_producer_masks as producer_masks
from slimkit.engines.pruning.io import MODEL_FORMAT, save_masks
from slimkit.engines.quantization import Quantizer, quantized_layer_specs
from slimkit.engines.quantization.io import CALIBRATION_FORMAT, save_calibration
from slimkit.engines.speedup import KeptChannels, ModelSpeedup
from slimkit.errors import ConfigError
from slimkit.experiment.compressors import (
    CompressorSpec,
    check_compressor_kwargs,
    config_list_hyperparameters,
    get_compressor_spec,
)
from slimkit.utils import model_device, move_inputs

from .compression_config import parse_compression_config
from .engine_calls import EngineCalls
from .export import (
    QUANTIZED_MODEL_FORMAT,
    SPEEDUP_MODEL_FORMAT,
    default_kept_channels_path,
    default_quantized_layers_path,
    place,
)


class Compressor(EngineCalls):
    """One compression job on one model: ``compress`` -> (``apply_speedup``) -> ``export_model``.

    ``kind`` is ``"pruning"`` or ``"quantization"``; only pruning compressors can be sped up. ``engine``
    is the underlying compression object (a :class:`~slimkit.engines.pruning.Pruner` or
    :class:`~slimkit.engines.quantization.Quantizer`; use it for ``update_epoch`` and the like), or ``None``
    for an algorithm that runs through smash (then :attr:`smashed` holds the result after :meth:`compress`).
    ``model`` is the current model: wrapped by the engine after :meth:`compress`, the physically smaller model
    after :meth:`apply_speedup`, the smashed model for smash-run algorithms.
    """

    def __init__(self, spec: CompressorSpec, engine: Any, model: nn.Module, dummy_input: Any,
                 options: Mapping[str, Any]) -> None:
        self.name = spec.name
        self.kind = spec.kind
        self.engine = engine
        self.dummy_input = dummy_input
        self._spec = spec
        self._options = dict(options)
        self._model = model
        self._compressed = False
        self._kept: KeptChannels | None = None
        self.speedup_warnings: list[str] = []
        #: the smash result of an engine-less algorithm (after :meth:`compress`)
        self.smashed: SmashedModel | None = None

    @property
    def model(self) -> nn.Module:
        """The current model (wrapped while pruning, shrunk after :meth:`apply_speedup`)."""
        return self._model

    @property
    def speedup_applied(self) -> bool:
        """Whether :meth:`apply_speedup` has removed the pruned channels."""
        return self._kept is not None

    @property
    def kept_channels(self) -> KeptChannels | None:
        """The JSON-ready record of what the speedup kept (``None`` before :meth:`apply_speedup`)."""
        return self._kept

    def compress(self, *args: Any, **kwargs: Any) -> nn.Module:
        """Compute the masks (one-shot pruners) or arm the training hooks (iterative ones); return the model.

        Arguments go to the engine's own ``compress``, for the pruners that take some: the sensitivity pruner's
        ``compress(eval_args=[model], finetune_args=[model])`` (what its evaluator and finetuner receive, and
        their ``eval_kwargs`` / ``finetune_kwargs``).
        """
        if args or kwargs:
            self._check_compress_arguments(args, kwargs)
        if self.speedup_applied:
            raise ConfigError("compress() after apply_speedup(): the model is already shrunk and detached from the "
                              "pruner. Create a new compressor on the shrunk model to compress it further.")
        if self.engine is None:
            self.smashed = self._smash()
            self._model = self.smashed.model
        else:
            self._model = self.engine.compress(*args, **kwargs)
        self._compressed = True
        return self._model

    def _smash(self) -> SmashedModel:
        """Run an engine-less algorithm (``rtn``, ``int8_dynamic``...) through smash with the job's settings."""
        options = dict(self._options)
        cfg = SmashConfig(device=str(model_device(self._model)))
        if options.get("tokenizer") is not None:
            cfg.add_tokenizer(options.pop("tokenizer"))
        if options.get("data") is not None:
            cfg.add_data(options.pop("data"))
        if self.dummy_input is not None:
            cfg.add_example_inputs(self.dummy_input)
        cfg.activate(self.name)
        for key, value in options.items():
            cfg[f"{self.name}_{key}"] = value
        return smash(self._model, cfg, verbose=False)

    def get_masks(self) -> dict[str, dict[str, torch.Tensor | None]]:
        """The pruning masks ``{layer: {"weight_mask", "bias_mask"}}`` (they describe the unshrunk model)."""
        self._require_pruning("get_masks()")
        return self.engine.get_masks()

    def _require_pruning(self, what: str) -> None:
        if self.kind != "pruning":
            raise ConfigError(f"{what} needs a pruning compressor; {self.name!r} is a {self.kind} compressor. Speedup "
                              "removes pruned channels, so it applies only to pruners such as 'l1_filter'.")

    def apply_speedup(self, dummy_input: Any = None) -> nn.Module:
        """Physically remove the pruned channels (``ModelSpeedup``); return the smaller model.

        ``dummy_input`` is an input the model accepts (defaults to the one given to ``create_compressor``).
        The pruner is detached first and the masks are multiplied into the weights, so the shrunk model
        computes what the masked one did. Parameters are replaced: build a new optimizer to fine-tune.
        """
        self._require_pruning("apply_speedup()")
        refusal = self._spec.speedup_refusal(self._options)
        if refusal is not None:
            raise ConfigError(f"apply_speedup() cannot shrink a {self.name!r}-pruned model: {refusal}.")
        if self.speedup_applied:
            raise ConfigError("apply_speedup() already ran: the model is shrunk. Use compressor.model, or "
                              "export_model(..., speedup=True) to save it.")
        if not self._compressed:
            raise ConfigError("apply_speedup() before compress(): there are no masks yet. Call compressor.compress() "
                              "(and train, for iterative pruners) first.")
        pending = getattr(self.engine, "statistics_pending", 0)
        if pending:
            raise ConfigError(f"apply_speedup(): {self.name!r} ranks filters on your training steps and needs "
                              f"{pending} more optimizer step(s) before its masks exist; train first.")
        dummy = self.dummy_input if dummy_input is None else dummy_input
        if dummy is None:
            raise ConfigError("apply_speedup() needs dummy_input, an input the model accepts, e.g. "
                              "apply_speedup(dummy_input=torch.randn(1, 3, 224, 224)).")
        pruner: Pruner = self.engine
        masks = pruner.get_masks()
        model = pruner.unwrap_model(apply_masks=True)
        dummy = move_inputs(dummy, model_device(model))
        try:
            if has_norm_masks(model, masks):
                masks = producer_masks(model, dummy, masks)
            speedup = ModelSpeedup(model, dummy, masks)
            model = speedup.speedup_model()
        except BaseException:
            pruner._wrap_model()  # back to the compressed (wrapped) state; ModelSpeedup restored the layers
            pruner.patch_optimizer()
            raise
        self._kept = speedup.kept_channels
        self.speedup_warnings = list(speedup.warnings)
        self._model = model
        return model

    def export_model(
        self,
        model_path: str | os.PathLike,
        mask_path: str | os.PathLike | None = None,
        speedup: bool = False,
        folder_name: str | os.PathLike | None = None,
        dummy_input: Any = None,
        kept_channels_path: str | os.PathLike | None = None,
        **job_config: Any,
    ) -> dict[str, Path | None]:
        """Save the compressed model (safetensors), optionally its masks, and after speedup the kept channels.

        ``speedup=True`` applies the speedup first if it has not run (needs ``dummy_input`` or the one given
        to ``create_compressor``). Once the model is sped up it is always saved shrunk, with its kept-channel
        record (default ``<model_path stem>.kept_channels.json``); load it with
        :func:`slimkit.faces.auptimizer.load_compressed_model`. With ``folder_name`` every file goes inside that
        folder. Returns the paths written: ``{"model", "mask", "kept_channels"}`` (``None`` when not written).
        For a quantizer, ``mask_path`` names the calibration file (bits, scales, zero points, ranges). The job
        config's keys may be passed too (``**config``, as Auptimizer's scripts do); they change nothing.
        """
        self._check_export_options(job_config, ("model_path", "mask_path", "speedup", "folder_name", "dummy_input",
                                                "kept_channels_path"))
        if self.kind == "quantization":
            if speedup:
                raise ConfigError(f"export_model(speedup=True) removes pruned channels; {self.name!r} is a "
                                  "quantization compressor. Call export_model(model_path) instead.")
            calibration = place(mask_path, folder_name) if mask_path is not None else None
            return self._export_quantized(place(model_path, folder_name), calibration)
        if speedup and not self.speedup_applied:
            self.apply_speedup(dummy_input)
        model_file = place(model_path, folder_name)
        mask_file = place(mask_path, folder_name) if mask_path is not None else None
        written: dict[str, Path | None] = {"model": model_file, "mask": mask_file, "kept_channels": None}
        masks = self.engine.get_masks() if mask_file is not None else None
        if self.speedup_applied:
            record_file = place(kept_channels_path or default_kept_channels_path(model_path), folder_name)
            state = {k: v.detach() for k, v in self._model.state_dict().items()}
            save_tensors_atomic(state, model_file, SPEEDUP_MODEL_FORMAT)
            write_json_atomic(record_file, self._kept)
            written["kept_channels"] = record_file
        else:
            save_tensors_atomic(self.engine.masked_state_dict(), model_file, MODEL_FORMAT)
        if mask_file is not None and masks is not None:
            save_masks(masks, mask_file)
        return written

    def _export_quantized(self, model_file: Path, calibration_file: Path | None = None) -> dict[str, Path | None]:
        """Freeze an engine's layers to integer codes and save them, or save a smash-run model as a directory."""
        if not self._compressed:
            raise ConfigError("export_model() before compress(): nothing is quantized yet. Call "
                              "compressor.compress() (and train) first.")
        if self.engine is None:
            if calibration_file is not None:
                raise ConfigError(f"export_model(mask_path=...): {self.name!r} runs through smash and saves a "
                                  "directory with its own scales; call export_model(model_path).")
            assert self.smashed is not None
            self.smashed.save_pretrained(model_file)
            return {"model": model_file, "mask": None, "quantized_layers": None}
        quantizer: Quantizer = self.engine
        if calibration_file is not None and quantizer.modules_wrapper:
            save_calibration(quantizer.calibration_config(), calibration_file, CALIBRATION_FORMAT)
        if quantizer.modules_wrapper:  # first export: freeze (later exports save the frozen model again)
            self._model = quantizer.freeze()
        record = default_quantized_layers_path(model_file)
        state = {k: v.detach() for k, v in self._model.state_dict().items()}
        save_tensors_atomic(state, model_file, QUANTIZED_MODEL_FORMAT)
        write_json_atomic(record, quantized_layer_specs(self._model))
        return {"model": model_file, "mask": calibration_file, "quantized_layers": record}


def create_compressor(
    model: nn.Module,
    config: Mapping[str, Any] | str,
    optimizer: torch.optim.Optimizer | None = None,
    dummy_input: Any = None,
    *,
    config_list: Sequence[Mapping[str, Any]] | None = None,
    **compressor_kwargs: Any,
) -> Compressor:
    """Build the compressor an experiment config names, attached to ``model``.

    ``config`` is an Auptimizer experiment dict (``{"compression": {"framework": "torch", "type": "pruning",
    "compressor": "l1_filter", "config_list": [...]}}``), just its ``compression`` block, the job config a
    script receives (``compressor``, ``config_list``, ``compression_type``...), or a compressor name with
    ``config_list=`` given here. ``optimizer`` lets pruners act during training (hooked ``step``);
    ``dummy_input`` is kept for :meth:`Compressor.apply_speedup` and given to pruners that trace the model.
    Extra keyword arguments go to the compressor (e.g. ``trainer=``/``criterion=`` for ``taylorfo``).
    """
    if not isinstance(model, nn.Module):
        raise ConfigError(f"create_compressor needs a torch.nn.Module; got {type(model).__name__}.")
    settings = parse_compression_config(config, config_list)
    spec = get_compressor_spec(settings.compressor, settings.type)
    if spec.engine is None:
        compressor_kwargs = {**config_list_hyperparameters(spec, settings.config_list), **compressor_kwargs}
    check_compressor_kwargs(spec, compressor_kwargs)
    engine = None
    if spec.engine is not None:
        engine = spec.build(model, settings.config_list, optimizer, dummy_input, compressor_kwargs)
    elif optimizer is not None:
        raise ConfigError(f"{spec.name!r} runs once on the trained model (it has no training hook), so it takes no "
                          "optimizer; call create_compressor without optimizer=.")
    compressor = Compressor(spec, engine, model, dummy_input, compressor_kwargs)
    if isinstance(config, Mapping):  # the job config's keys may come back in export_model(..., **config)
        compressor._job_keys = frozenset(map(str, config))
    return compressor
