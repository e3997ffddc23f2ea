"""What every weight quantizer shares about its targets: the model check, the refusal, and the coverage record.

Targets are :mod:`slimkit.core.weights`' (Linear and subclasses, Conv1D, MoE experts); a quantizer names the
kinds it handles in ``target_kinds``. The model check refuses a model with none of them and says which types it
found and why none was taken; :func:`record_coverage` stores the :func:`slimkit.core.coverage.coverage` record in
the algorithm's replay state (``state["coverage"]``), so it is saved in ``smash_config.json`` and shown by the CLI
and :func:`slimkit.evaluation.compare`.

Pruna's quanto and torchao also take ``target_modules``, ``{"include": [patterns], "exclude": [patterns]}`` over
module paths (e.g. ``{"include": ["model.*attn*"], "exclude": ["*embed*"]}``); None means every layer the quantizer
handles. Patterns are globs on the full module path (``fnmatch``), as in Pruna.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from ConfigSpace import Constant
from torch import nn

from slimkit.core.coverage import coverage, refusal
from slimkit.core.hyperparameters import ListHyperparameter
from slimkit.core.weights import DENSE, EXCLUDED, Target, find_targets, select
from slimkit.errors import ConfigError, SaveLoadError

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


KEYS = ("include", "exclude")


class TargetModulesHyperparameter(Constant):
    """None, or a dict with optional ``include`` / ``exclude`` lists of glob patterns; only validated."""

    def __init__(self, name: str = "target_modules", meta: Mapping[Hashable, Any] | None = None) -> None:
        super().__init__(name, None, meta=meta)

    def legal_value(self, value: Any) -> bool:  # type: ignore[override]
        """Accept None or ``{"include": [str, ...], "exclude": [str, ...]}`` (either key optional)."""
        if value is None:
            return True
        return isinstance(value, Mapping) and set(value) <= set(KEYS) and all(
            isinstance(v, (list, tuple)) and all(isinstance(p, str) for p in v) for v in value.values())

    def describe(self) -> str:
        """What the hyperparameter accepts, for error messages and the docs."""
        return "None, or a dict {'include': [glob patterns], 'exclude': [glob patterns]} over module paths"


def layer_choice_hyperparameters(exclude_example: str) -> list:
    """Pruna's ``target_modules`` and ``exclude`` (module names kept in full precision, e.g. ``exclude_example``)."""
    return [
        TargetModulesHyperparameter(meta={"desc": "Pruna's layer choice: None (every Linear) or {'include': [globs], "
                                                  "'exclude': [globs]} over module paths, e.g. {'include': "
                                                  "['model.*attn*']}."}),
        ListHyperparameter("exclude", (), meta={"desc": "Module names kept in full precision: exact names or glob "
                                                        f"patterns, e.g. {exclude_example}."}),
    ]


def targeted(name: str, target_modules: Mapping[str, Sequence[str]] | None) -> bool:
    """Whether module path ``name`` is included and not excluded by ``target_modules`` (None: every module)."""
    if target_modules is None:
        return True
    include, exclude = target_modules.get("include", ["*"]), target_modules.get("exclude", [])
    return (any(fnmatch.fnmatchcase(name, p) for p in include)
            and not any(fnmatch.fnmatchcase(name, p) for p in exclude))


def choose(targets: Sequence[Target], kinds: Sequence[str], exclude: Sequence[str],
           target_modules: Mapping[str, Sequence[str]] | None, what: str) -> tuple[list[Target], dict[str, str]]:
    """The targets a quantizer takes (kinds, ``exclude``, then ``target_modules``) and the reason of each it leaves.

    Raises ConfigError naming the model's layers when ``target_modules`` leaves none.
    """
    candidates = select_or_refuse(targets, kinds, exclude, what)
    chosen = [t for t in candidates if targeted(t.name, target_modules)]
    if not chosen:
        raise ConfigError(f"{what}_target_modules={dict(target_modules or {})} matches none of the layers it could "
                          f"quantize ({', '.join(t.name for t in candidates[:4])}...); patterns are globs on full "
                          "module paths, e.g. {'include': ['model.layers.*']}.")
    reasons = {t.name: f"{EXCLUDED} target_modules={dict(target_modules or {})}" for t in candidates if t not in chosen}
    return chosen, reasons


def replay_layers(model: Any, state: Mapping[str, Any], who: str) -> list[str]:
    """The layers a save of ``who`` quantized (``state["layers"]``); a rebuilt model lacking one is refused."""
    names = list(state.get("layers", []))
    present = {n for n, _ in model.named_modules()}
    missing = [n for n in names if n not in present]
    if missing:
        raise SaveLoadError(f"The weights of the saved model do not fit the rebuilt architecture: {who} quantized "
                            f"{missing[:3]}, which it does not have. Pass model= the architecture that was smashed.")
    return names
