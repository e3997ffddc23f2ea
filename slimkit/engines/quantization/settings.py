"""NNI 2.x's quantization scheme settings: ``set_quant_scheme_dtype`` and the ``quant_scheme``/``quant_dtype`` keys.

A scheme is ``per_tensor_affine``, ``per_tensor_symmetric``, ``per_channel_affine`` or ``per_channel_symmetric``;
a dtype ``int`` or ``uint``. ``set_quant_scheme_dtype("weight", "per_channel_symmetric", "int")`` sets the
default for every quantizer built afterwards in this process; a ``config_list`` entry's ``quant_scheme`` /
``quant_dtype`` (a name, or ``{type: name}``) overrides it for its layers. Quantizers that support schemes
(``QAT_Quantizer``) read them with :func:`scheme_of`. slimkit stores codes unsigned in ``[0, 2**bits - 1]``, so
the dtype does not change the numbers: a signed symmetric grid is the unsigned one shifted by ``2**(bits-1)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.errors import closest

__all__ = ["DTYPES", "SCHEMES", "reset_quant_scheme_dtype", "scheme_of", "set_quant_scheme_dtype"]

SCHEMES = ("per_tensor_affine", "per_tensor_symmetric", "per_channel_affine", "per_channel_symmetric")
DTYPES = ("int", "uint")
_TYPES = ("weight", "input", "output")
_DEFAULTS: dict[str, dict[str, str | None]] = {t: {"scheme": None, "dtype": None} for t in _TYPES}


def _check(kind: str, value: Any, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise QuantizationConfigError(f"{where}: {kind} {value!r} is unknown.{closest(str(value), allowed)} "
                                      f"Use one of {', '.join(allowed)}.")
    return value


def set_quant_scheme_dtype(quant_type: str, new_scheme: str | None = None, new_dtype: str | None = None) -> None:
    """Set the default scheme and/or dtype of ``quant_type`` (``"weight"``, ``"input"`` or ``"output"``)."""
    where = f"set_quant_scheme_dtype({quant_type!r}, ...)"
    _check("quant type", quant_type, _TYPES, where)
    if new_scheme is not None:
        _DEFAULTS[quant_type]["scheme"] = _check("scheme", new_scheme, SCHEMES, where)
    if new_dtype is not None:
        _DEFAULTS[quant_type]["dtype"] = _check("dtype", new_dtype, DTYPES, where)


def reset_quant_scheme_dtype() -> None:
    """Forget every default set with :func:`set_quant_scheme_dtype`."""
    for quant_type in _TYPES:
        _DEFAULTS[quant_type] = {"scheme": None, "dtype": None}


def _entry_value(config: Mapping[str, Any], key: str, quant_type: str) -> Any:
    value = config.get(key)
    if isinstance(value, Mapping):
        return value.get(quant_type)
    return value


def scheme_of(config: Mapping[str, Any], quant_type: str, layer: str) -> tuple[str | None, str | None]:
    """``(scheme, dtype)`` of one layer's ``quant_type``: its config entry's keys, else the process default."""
    scheme = _entry_value(config, "quant_scheme", quant_type) or _DEFAULTS[quant_type]["scheme"]
    dtype = _entry_value(config, "quant_dtype", quant_type) or _DEFAULTS[quant_type]["dtype"]
    where = f"layer {layer!r} {quant_type}"
    return (None if scheme is None else _check("quant_scheme", scheme, SCHEMES, where),
            None if dtype is None else _check("quant_dtype", dtype, DTYPES, where))
