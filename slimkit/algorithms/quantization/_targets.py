"""What every weight quantizer shares about its targets: the model check, the refusal, and the coverage record.

Targets are :mod:`slimkit.core.weights`' (Linear and subclasses, Conv1D, MoE experts); a quantizer names the
kinds it handles in ``target_kinds``. The model check refuses a model with none of them and says which types it
found and why none was taken; :func:`record_coverage` stores the :func:`slimkit.core.coverage.coverage` record in
the algorithm's replay state (``state["coverage"]``), so it is saved in ``smash_config.json`` and shown by the CLI
and :func:`slimkit.evaluation.compare`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from torch import nn

from slimkit.core.coverage import coverage, refusal
from slimkit.core.weights import DENSE, Target, find_targets, select
from slimkit.errors import ConfigError

COVERAGE_KEY = "coverage"


class TargetsMixin:
    """Model check by targets: the model needs a supported target of ``target_kinds``.

    Mixed into a :class:`~slimkit.core.contract.SlimkitQuantizer`; the refusal (``model_check_reason``) names the
    layer types the model has and why none qualifies.
    """

    algorithm_name: ClassVar[str]
    #: the :mod:`slimkit.core.weights` kinds this quantizer replaces
    target_kinds: ClassVar[tuple[str, ...]] = DENSE
    #: the refusal for a model that is no nn.Module or has no target at all
    supported_models: ClassVar[str] = ("It quantizes nn.Linear layers (and subclasses computing x W^T + b) and "
                                       "transformers Conv1D layers; the model has none it can replace.")

    def usable(self, target: Target, model: nn.Module) -> bool:
        """Whether this quantizer can take ``target`` beyond the shared rules (override to narrow, e.g. by dtype)."""
        return True

    def model_check_fn(self, model: Any) -> bool:
        """Needs a supported target of ``target_kinds`` (see :func:`slimkit.core.weights.select`)."""
        self._refusal: str | None = None
        if not isinstance(model, nn.Module):
            return False
        targets = find_targets(model)
        if any(self.usable(t, model) for t in select(targets, self.target_kinds)):
            return True
        if targets:
            self._refusal = refusal(targets, self.target_kinds, what=self.algorithm_name)
        return False

    def model_check_reason(self) -> str:
        """Which models are supported, or, after a failed check, what the model has and why none qualifies."""
        return getattr(self, "_refusal", None) or self.supported_models


def select_or_refuse(targets: Sequence[Target], kinds: Iterable[str], exclude: Sequence[str],
                     what: str) -> list[Target]:
    """:func:`slimkit.core.weights.select`, raising a ConfigError naming what the model has when nothing is left."""
    kinds = tuple(kinds)
    chosen = select(targets, kinds, exclude)
    if not chosen:
        raise ConfigError(refusal(targets, kinds, exclude, what))
    return chosen


def record_coverage(state: dict[str, Any], targets: Sequence[Target], quantized: Iterable[str],
                    exclude: Sequence[str] = (), default_exclude: Sequence[str] = (),
                    reasons: dict[str, str] | None = None) -> dict[str, Any]:
    """Store ``coverage(...)`` as ``state["coverage"]`` (``targets`` found before quantizing) and return it."""
    record = coverage(targets, quantized, exclude, default_exclude, reasons)
    state[COVERAGE_KEY] = record
    return record


def model_targets(model: nn.Module) -> list[Target]:
    """Every target of ``model``, all kinds: what coverage is measured against (find them before quantizing)."""
    return find_targets(model)
