"""The calls Auptimizer's scripts make on a compressor besides compress / speedup / export.

``compressor.compress(eval_args=..., finetune_args=...)`` reaches the engine's ``compress`` (the sensitivity
pruner's arguments); ``compressor.update_epoch(epoch)`` and ``compressor.step()`` reach the engine's schedule
(AGP's epochs, a quantizer's step counter); ``get_prune_iterations()`` / ``prune_iteration_start()`` drive
iterative pruners that have rounds; ``compressor.count_flops_params((1, 1, 28, 28))`` counts the current model
(wrapped, sped up or smashed) with :func:`slimkit.evaluation.flops.count_flops_params`.
``export_model(..., **config)``: the job config a script received may be passed along, as Auptimizer's example
scripts do.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from torch import nn

from slimkit.errors import ConfigError
from slimkit.evaluation.flops import count_flops_params

#: Auptimizer's export_model option that slimkit has no use for (it keeps one model per job anyway)
AUPTIMIZER_EXPORT_OPTIONS = ("save_best_only",)


class EngineCalls:
    """Mixin of :class:`~slimkit.faces.auptimizer.compressor.Compressor`: Auptimizer's pass-through calls."""

    name: str
    engine: Any
    _model: nn.Module
    _job_keys: frozenset[str] = frozenset()

    def _engine_call(self, method: str, *args: Any) -> Any:
        if self.engine is None:
            raise ConfigError(f"{method}() needs a compressor that trains; {self.name!r} runs once through smash "
                              "when you call compress(), so there is nothing to schedule.")
        function = getattr(self.engine, method, None)
        if not callable(function):
            raise ConfigError(f"{method}() is not something {self.name!r} ({type(self.engine).__name__}) does; "
                              "it belongs to iterative pruners such as lottery_ticket.")
        return function(*args)

    def _check_compress_arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Refuse compress() arguments the engine's ``compress`` does not take, naming the ones it does."""
        given = ", ".join([*(type(a).__name__ for a in args), *(f"{k}=..." for k in kwargs)])
        if self.engine is None:
            raise ConfigError(f"compress({given}): {self.name!r} runs through smash and its compress() takes no "
                              "arguments; give its settings to create_compressor instead.")
        signature = inspect.signature(self.engine.compress)
        try:
            signature.bind(*args, **kwargs)
        except TypeError:
            accepted = [n for n in signature.parameters if n != "self"]
            raise ConfigError(f"compress({given}): {self.name!r} ({type(self.engine).__name__}) takes "
                              + (f"only {', '.join(accepted)}" if accepted else "no arguments")
                              + " in compress(); its other settings go to create_compressor(...).") from None

    def update_epoch(self, epoch: int) -> None:
        """Tell the engine epoch ``epoch`` starts (AGP's epoch schedule moves its masks then)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ConfigError(f"update_epoch(epoch) takes the epoch number, a whole number >= 0; got {epoch!r}.")
        self._engine_call("update_epoch", epoch)

    def step(self) -> None:
        """Advance the engine one training step by hand (what ``optimizer.step()`` does when it was given)."""
        self._engine_call("step")

    def get_prune_iterations(self) -> Any:
        """The pruning rounds of an iterative pruner (lottery ticket), to loop over in the script."""
        return self._engine_call("get_prune_iterations")

    def prune_iteration_start(self) -> Any:
        """Start the next round of an iterative pruner (masks move, weights rewind)."""
        return self._engine_call("prune_iteration_start")

    def count_flops_params(self, x: Any, custom_ops: Mapping[type, Any] | None = None, verbose: bool = True,
                           mode: str = "default") -> tuple[int, int, list[dict[str, Any]]]:
        """NNI's FLOPs/parameter table of the current model (masks respected while it is still wrapped)."""
        model = self._model
        if not isinstance(model, nn.Module):
            model = getattr(model, "model", model)
        return count_flops_params(model, x, custom_ops, verbose, mode)

    def _check_export_options(self, options: Mapping[str, Any], accepted: Iterable[str]) -> None:
        """Allow the job config's own keys (``**config``) and Auptimizer's ``save_best_only``; refuse others."""
        allowed = set(self._job_keys) | set(AUPTIMIZER_EXPORT_OPTIONS)
        unknown = sorted(k for k in options if k not in allowed)
        if unknown:
            raise ConfigError(f"export_model() got unexpected argument(s) {', '.join(unknown)}. It takes "
                              f"{', '.join(accepted)}, and the keys of the job config the script received "
                              "(export_model(..., **config)).")
