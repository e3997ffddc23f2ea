"""Checks a load makes before it trusts a saved directory: field types, the weights' checksum, a size budget.

A saved ``smash_config.json`` may be edited, truncated or crafted. :func:`check_payload` refuses wrong types
with the field's path. :func:`check_budget` rebuilds the architecture and replays the recorded structure on the
meta device (no memory) and refuses a model that would need far more memory than the weights file holds, so a
record claiming a huge layer never makes a load allocate it. :func:`weights_digest` is the SHA-256 a save
records and a load compares, so bit flips and weights from another save are caught.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import safetensors
import torch

from slimkit.core import registry
from slimkit.errors import SaveLoadError, SlimkitError

#: the file names a save may point at for its weights (nothing outside the save folder)
WEIGHTS_FILES = ("model.safetensors", "model.pt", None)
FORMATS = ("safetensors", "pickle", "artifacts")
BASE_KINDS = ("zoo", "hf", "factory", "user")
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
#: a rebuilt model may need this many times the weights file's bytes (int8 from float64) plus a fixed slack
BUDGET_FACTOR, BUDGET_SLACK = 8, 64 * 2**20
TENSOR_SLACK = 1024  # a rebuilt model may register this many tensors more than 8x those the file holds
MAX_MODULES = 500_000  # a meta build past this many modules is a crafted record (the largest real models hold ~100k)
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")


def _fail(file: Path, field: str, want: str, got: Any) -> SaveLoadError:
    shown = repr(got)
    shown = shown if len(shown) <= 120 else shown[:117] + "..."
    return SaveLoadError(f"{file}: {field!r} must be {want}; got {shown}. The file was edited or is corrupt: "
                         "save the model again.")


def check_payload(payload: Any, file: Path) -> None:
    """Refuse a ``smash_config.json`` whose engine fields have the wrong type or an unknown value."""
    if not isinstance(payload, dict):
        raise _fail(file, "(top level)", "a JSON object", type(payload).__name__)
    applied = payload.get("applied")
    if not isinstance(applied, list):
        raise _fail(file, "applied", "a list of algorithm records", applied)
    for i, record in enumerate(applied):
        if not isinstance(record, dict) or not isinstance(record.get("name"), str):
            raise _fail(file, f"applied[{i}]", "an object with a string 'name'", record)
        if not isinstance(record.get("state", {}), dict):
            raise _fail(file, f"applied[{i}].state", "an object", record["state"])
    if payload.get("weights_format") not in FORMATS:
        raise _fail(file, "weights_format", f"one of {FORMATS}", payload.get("weights_format"))
    if payload.get("weights_file") not in WEIGHTS_FILES:
        raise _fail(file, "weights_file", f"one of {WEIGHTS_FILES}", payload.get("weights_file"))
    before = payload.get("saved_before")
    if before is not None and (type(before) is not int or not 0 <= before <= len(applied)):
        raise _fail(file, "saved_before", f"null or an index into 'applied' (0..{len(applied)})", before)
    if "weights_sha256" in payload and not isinstance(payload["weights_sha256"], str):
        raise _fail(file, "weights_sha256", "a hex string", payload["weights_sha256"])
    _check_base(payload.get("base"), file)


def _check_base(base: Any, file: Path) -> None:
    if not isinstance(base, dict) or base.get("kind") not in BASE_KINDS:
        raise _fail(file, "base", f"an object whose 'kind' is one of {BASE_KINDS}", base)
    if base.get("dtype") is not None and base["dtype"] not in FLOAT_DTYPES:
        raise _fail(file, "base.dtype", f"null or one of {FLOAT_DTYPES}", base["dtype"])
    dtypes = base.get("buffer_dtypes", {})
    if not isinstance(dtypes, dict) or any(not isinstance(k, str) or v not in FLOAT_DTYPES for k, v in dtypes.items()):
        raise _fail(file, "base.buffer_dtypes", f"an object mapping buffer names to one of {FLOAT_DTYPES}", dtypes)
    kind = base["kind"]
    if kind == "zoo" and (not isinstance(base.get("name"), str) or not isinstance(base.get("kwargs", {}), dict)):
        raise _fail(file, "base", "a zoo recipe: a string 'name' and an object 'kwargs'", base)
    if kind == "hf" and (not isinstance(base.get("hf_class"), str) or not _IDENTIFIER.match(base["hf_class"])
                         or not isinstance(base.get("config"), dict)):
        raise _fail(file, "base", "a Hugging Face recipe: a class name 'hf_class' and an object 'config'", base)
    packed = base.get("packed", {})
    if not isinstance(packed, dict) or not all(isinstance(k, str) and isinstance(v, dict) for k, v in packed.items()):
        raise _fail(file, "base.packed", "an object of packed layer specs by layer name", packed)
    if kind == "factory" and not isinstance(base.get("factory"), str):
        raise _fail(file, "base.factory", "a 'package.module:function' string", base.get("factory"))


def weights_digest(file: Path) -> str:
    """SHA-256 of ``file`` (hex), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def _nbytes(model: torch.nn.Module) -> int:
    unique = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    return sum(t.numel() * t.element_size() for t in unique.values())


def _meta_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``model`` whose parameters and buffers are on the meta device (allocates no tensor data)."""
    memo: dict[int, Any] = {id(b): b.detach().to("meta") for b in model.buffers()}
    memo.update({id(p): torch.nn.Parameter(p.detach().to("meta"), requires_grad=p.requires_grad)
                 for p in model.parameters()})
    return copy.deepcopy(model, memo)


def check_budget(build: Callable[[], Any] | None, user_model: Any, replays: list[tuple[str, Callable[[Any], Any]]],
                 weights: Path) -> None:
    """Rebuild on meta and replay; refuse when the result needs far more memory than ``weights`` holds.

    ``build`` makes the base architecture (called under the meta device; ``None``: user code, not run here);
    ``user_model`` (an ``nn.Module`` the caller passed) replaces it. ``replays`` are ``(field, replay)`` pairs.
    Replays that need real weight values cannot run on meta and are skipped (they only shrink a model). An
    architecture that cannot be built on meta is not budgeted (the real build follows and is checked there).
    """
    held = weights.stat().st_size
    try:
        with torch.device("meta"), _growth_limit(BUDGET_FACTOR * held + BUDGET_SLACK, weights):
            if isinstance(user_model, torch.nn.Module):
                skeleton = _meta_copy(user_model)
            elif build is not None and user_model is None:
                skeleton = build()
            else:
                return
    except SlimkitError:
        raise
    except Exception:  # init code that needs real data: nothing to budget on meta
        return
    if not isinstance(skeleton, torch.nn.Module):
        return
    for field, replay in replays:
        try:
            with torch.device("meta"):
                skeleton = replay(skeleton)
        except SlimkitError as exc:
            raise SaveLoadError(f"{field}: the replay state does not fit the rebuilt model: {exc}") from exc
        except Exception:  # needs real values: skipped on meta
            continue
    size = _nbytes(skeleton)
    if size > BUDGET_FACTOR * held + BUDGET_SLACK:
        raise _too_big(f"a model of {size / 2**20:.1f} MiB", held, weights)


def _too_big(what: str, held: int | str, weights: Path) -> SaveLoadError:
    holds = held if isinstance(held, str) else f"{held / 2**20:.1f} MiB"
    return SaveLoadError(
        f"The save describes {what} (its 'base' recipe and 'applied' replay state) but {weights} holds only "
        f"{holds}: the record was edited or is corrupt, and loading it would allocate memory the "
        "file never held. Save the model again."
    )


def _tensor_count(weights: Path) -> float:
    """How many tensors the safetensors file holds (infinite when its header cannot be read: no limit then)."""
    try:
        with safetensors.safe_open(str(weights), framework="pt") as f:
            return len(list(f.keys()))
    except Exception:  # an unreadable header is reported by the weight loading that follows
        return float("inf")


@contextlib.contextmanager
def _growth_limit(limit: float, weights: Path) -> Iterator[None]:
    """Stop a (meta) build as soon as its registered tensors pass ``limit`` bytes or its modules ``MAX_MODULES``.

    A crafted config (a million layers) would otherwise spend minutes and gigabytes of Python objects before the
    size check after the build could refuse it.
    """
    held = weights.stat().st_size
    count = {"bytes": 0, "modules": 0, "tensors": 0}
    n_file = _tensor_count(weights)
    most_tensors = BUDGET_FACTOR * n_file + TENSOR_SLACK

    def on_tensor(module: torch.nn.Module, name: str, t: torch.Tensor | None) -> None:
        count["bytes"] += t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0
        count["tensors"] += 1
        if count["bytes"] > limit:
            raise _too_big(f"a model of {count['bytes'] / 2**20:.1f} MiB or more", held, weights)
        if count["tensors"] > most_tensors:
            raise _too_big(f"a model of more than {most_tensors} tensors", f"{n_file} tensors", weights)

    def on_module(module: torch.nn.Module, name: str, child: torch.nn.Module | None) -> None:
        count["modules"] += 1
        if count["modules"] > MAX_MODULES:
            raise _too_big(f"a model of more than {MAX_MODULES} modules", held, weights)

    handles = [torch.nn.modules.module.register_module_parameter_registration_hook(on_tensor),
               torch.nn.modules.module.register_module_buffer_registration_hook(on_tensor),
               torch.nn.modules.module.register_module_module_registration_hook(on_module)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def known_algorithms(payload: dict[str, Any], file: Path) -> list[dict[str, Any]]:
    """The applied records with names resolved to the registry's (retired names read as their successors)."""
    out = []
    for i, record in enumerate(payload["applied"]):
        try:
            out.append({**record, "name": registry.resolve(record["name"])})
        except SlimkitError as exc:
            raise SaveLoadError(f"{file}: applied[{i}].name: {exc}") from exc
    return out
