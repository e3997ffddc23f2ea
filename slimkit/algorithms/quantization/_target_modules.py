"""Pruna's ``target_modules`` hyperparameter: ``{"include": [patterns], "exclude": [patterns]}`` over module paths.

Pruna's quanto and torchao take it (e.g. ``{"include": ["model.*attn*"], "exclude": ["*embed*"]}``); None means
every layer the quantizer handles. Patterns are globs on the full module path (``fnmatch``), as in Pruna.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from ConfigSpace import Constant

from slimkit.algorithms.quantization._targets import select_or_refuse
from slimkit.core.hyperparameters import ListHyperparameter
from slimkit.core.weights import EXCLUDED, Target
from slimkit.errors import ConfigError, SaveLoadError

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
