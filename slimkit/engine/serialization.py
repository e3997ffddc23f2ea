"""Save and load SmashedModels as a directory of JSON + safetensors (DESIGN.md §4). Pickle only on request."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from slimkit.config.files import CONFIG_FILE, EXAMPLE_INPUTS_FILE, PROCESSOR_DIR, TOKENIZER_DIR, load_inputs
from slimkit.config.smash_config import SmashConfig
from slimkit.core import registry
from slimkit.core.contract import SaveFn
from slimkit.core.io import atomic_directory, recover_directory
from slimkit.core.tensors import flatten_state_dict, load_flat_state_dict
from slimkit.engine.base_model import REBUILT_KINDS, meta_tensors, rebuild_base
from slimkit.engine.checks import check_budget, check_payload, known_algorithms, weights_digest
from slimkit.engine.interop import check_target
from slimkit.errors import ConfigError, SaveLoadError, SlimkitError
from slimkit.formats import FORMAT_VERSION, WEIGHTS_FILE

#: What a load rebuilds, in ``SmashedModel``'s constructor order: model, config, applied records, base spec,
#: the pre-apply model (SAVE_BEFORE_APPLY) and the index of the algorithm it was saved before.
Loaded = tuple[Any, SmashConfig, list[dict[str, Any]], dict[str, Any], Any, "int | None"]

PICKLE_FILE = "model.pt"


def _artifacts_index(applied: list[dict[str, Any]]) -> int | None:
    """Index of the applied algorithm whose ``save_fn`` is ARTIFACTS (it must be the last), or None."""
    found = [i for i, a in enumerate(applied) if registry.get(a["name"]).save_fn == SaveFn.ARTIFACTS]
    if not found:
        return None
    if found[-1] != len(applied) - 1:
        later = [a["name"] for a in applied[found[-1] + 1 :]]
        raise SaveLoadError(
            f"{applied[found[-1]]['name']} saves the final model as its own files, but {', '.join(later)} ran after "
            "it, so the saved files would miss their effect. Smash without them to save this model."
        )
    return found[-1]


def _save_weights(to_save: Any, tmp: Path, allow_pickle: bool) -> str:
    """Write ``to_save``'s tensors as safetensors (or pickle it when allowed); return the format written."""
    try:
        flat = flatten_state_dict(to_save)
        save_file(flat, str(tmp / WEIGHTS_FILE), metadata={"format": "pt", "slimkit_format": str(FORMAT_VERSION)})
        return "safetensors"
    except TypeError as exc:
        if not allow_pickle:
            raise SaveLoadError(
                f"The smashed model holds state that safetensors cannot store ({exc}). slimkit never pickles "
                "by default; pass allow_pickle=True to save_pretrained (and later to from_pretrained) if you "
                "accept a pickle file."
            ) from exc
        torch.save(to_save, tmp / PICKLE_FILE)
        return "pickle"


def save_smashed(parts: Loaded, path: str | os.PathLike, allow_pickle: bool = False, readme: str | None = None) -> None:
    """Write a SmashedModel's ``parts`` (as :func:`load_smashed` returns them) to ``path`` atomically (+ README)."""
    model, smash_config, applied, base_spec, pre_apply_model, saved_before = parts
    with atomic_directory(check_target(path, exports=False), replace=True) as tmp:
        artifacts = _artifacts_index(applied)
        if artifacts is not None:  # the algorithm's own files are the whole model: no torch weights
            record = applied[artifacts]
            registry.get(record["name"])().save_artifacts(model, tmp, record.get("state", {}))
            fmt = "artifacts"
        else:
            fmt = _save_weights(pre_apply_model if saved_before is not None else model, tmp, allow_pickle)
        extra: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "weights_format": fmt,
            "weights_file": {"safetensors": WEIGHTS_FILE, "pickle": PICKLE_FILE}.get(fmt),
            "applied": applied,
            "saved_before": None if artifacts is not None else saved_before,
            "base": base_spec,
        }
        if artifacts is not None:
            extra["artifacts"] = artifacts
        if fmt == "safetensors":
            extra["weights_sha256"] = weights_digest(tmp / WEIGHTS_FILE)
        smash_config.save_to_json(tmp, extra=extra)
        if readme is not None:
            (tmp / "README.md").write_text(readme)


def _read_payload(folder: Path) -> dict[str, Any]:
    recover_directory(folder)  # a replacing save killed mid-swap (non-Linux fallback) left the old one aside
    if not folder.is_dir():
        raise SaveLoadError(f"No saved model at {folder}: the directory does not exist.")
    file = folder / CONFIG_FILE
    if not file.is_file():
        raise SaveLoadError(f"{file} is missing: {folder} is not a complete slimkit save.")
    try:
        payload = json.loads(file.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise SaveLoadError(f"{file} is not valid JSON ({exc}): the file is truncated or corrupt.") from exc
    if not isinstance(payload, dict) or payload.get("format_version") != FORMAT_VERSION:
        got = payload.get("format_version") if isinstance(payload, dict) else type(payload).__name__
        raise SaveLoadError(f"{file} has format_version {got!r}; this slimkit reads {FORMAT_VERSION}.")
    check_payload(payload, file)
    return payload


def _guard(field: str, call: Callable[[], Any]) -> Any:
    """Run one load step; errors other than a SaveLoadError become one naming ``field`` (the record at fault)."""
    try:
        return call()
    except SlimkitError as exc:
        if isinstance(exc, SaveLoadError) and (CONFIG_FILE in str(exc) or WEIGHTS_FILE in str(exc)):
            raise
        raise SaveLoadError(f"{field}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - third-party init code (transformers) raises any type on bad values
        raise SaveLoadError(
            f"{field} does not fit the rebuilt model ({type(exc).__name__}: {str(exc)[:300]}): the save was edited "
            "or is corrupt. Save the model again; if this save was never edited, please report it as a slimkit bug."
        ) from exc


def _load_weights(model: torch.nn.Module, file: Path, assign: bool = False) -> None:
    """Load the saved weights strictly; ``assign`` puts them into a meta-device skeleton (nothing may stay meta)."""
    if not file.is_file():
        raise SaveLoadError(f"{file} is missing: the save is incomplete.")
    try:
        flat = load_file(str(file))
    except (SafetensorError, OSError, ValueError) as exc:
        raise SaveLoadError(f"{file} cannot be read ({exc}): the file is truncated or corrupt.") from exc
    try:
        load_flat_state_dict(model, flat, strict=True, assign=assign)
    except (RuntimeError, KeyError, ValueError, IndexError, AttributeError, TypeError) as exc:
        raise SaveLoadError(
            f"The weights in {file} do not fit the rebuilt architecture: {str(exc)[:600]}. If you passed model=, "
            "pass the same architecture you smashed."
        ) from exc
    missing = meta_tensors(model) if assign else []
    if missing:
        raise SaveLoadError(
            f"After loading {file}, {len(missing)} tensor(s) of the rebuilt model have no data (still on the meta "
            f"device): {', '.join(missing[:8])}. The save does not hold them; this is a slimkit bug, please report "
            "it. Meanwhile load with model=<a fresh instance of the architecture> (a full fp32 build)."
        )


def _load_artifacts(folder: Path, payload: dict[str, Any], cfg: SmashConfig, algos: list[Any]) -> Loaded:
    """Rebuild a model saved with ``save_fn=ARTIFACTS`` from its algorithm's files: no base model, no weights."""
    try:  # records written under a retired name (an alias now) read as the algorithm's own
        applied: list[dict[str, Any]] = [{**a, "name": registry.resolve(a["name"])} for a in payload["applied"]]
    except (ConfigError, KeyError, TypeError) as exc:
        raise SaveLoadError(f"{folder / CONFIG_FILE}: 'applied' must list algorithm records with a known "
                            f"'name' ({exc}).") from exc
    index = payload.get("artifacts")
    if type(index) is not int or index != len(applied) - 1:
        raise SaveLoadError(
            f"{folder / CONFIG_FILE} has 'artifacts': {index!r}, expected {len(applied) - 1} (the last applied "
            "algorithm): the file was edited or is corrupt. Save the model again."
        )
    algo, record = algos[index], applied[index]
    if algo.save_fn != SaveFn.ARTIFACTS:
        raise SaveLoadError(
            f"{folder} holds the files of {record['name']}, but this slimkit's {record['name']} saves as "
            f"{algo.save_fn.value!r}, not 'artifacts'. Load it with the slimkit version that saved it, or smash again."
        )
    model = algo.load_artifacts(folder, cfg.get_prefix_wrapper(record["name"]), record.get("state", {}))
    if isinstance(model, torch.nn.Module):
        model = model.eval()
    return model, cfg, applied, payload["base"], None, None


def load_smashed(
    path: str | os.PathLike, model: Any = None, allow_pickle: bool = False, device: str | None = None,
    trust_code: bool = False,
) -> Loaded:
    """Rebuild the parts of a SmashedModel saved by :func:`save_smashed` (``SmashedModel(*parts)``).

    A save whose last algorithm wrote its own files (``SaveFn.ARTIFACTS``) loads from them alone: ``model=`` is
    not needed there and is ignored.
    """
    folder = Path(path)
    payload = _read_payload(folder)
    file = folder / CONFIG_FILE
    try:
        cfg = SmashConfig.from_dict(payload)
    except ConfigError as exc:
        raise SaveLoadError(f"{file}: {exc}") from exc
    if device is not None:
        cfg.device = device
    for obj_dir, adder in ((TOKENIZER_DIR, cfg.add_tokenizer), (PROCESSOR_DIR, cfg.add_processor)):
        if (folder / obj_dir).is_dir():
            _guard(f"{folder / obj_dir}", lambda add=adder, sub=obj_dir: add(str(folder / sub)))
    if (folder / EXAMPLE_INPUTS_FILE).is_file():
        cfg.example_inputs = _guard(f"{folder / EXAMPLE_INPUTS_FILE}", lambda: _read_inputs(folder))
    applied = known_algorithms(payload, file)
    saved_before = payload.get("saved_before")
    cut = len(applied) if saved_before is None else saved_before
    algos = [registry.get(a["name"])() for a in applied]

    if payload["weights_format"] == "artifacts":
        return _guard(f"{file}: applied[-1]", lambda: _load_artifacts(folder, payload, cfg, algos))
    if payload["weights_format"] == "pickle":
        if not allow_pickle:
            raise SaveLoadError(
                f"{folder / PICKLE_FILE} is a pickle file, which can run arbitrary code when loaded. "
                "Pass allow_pickle=True only if you trust its source."
            )
        if not (folder / PICKLE_FILE).is_file():
            raise SaveLoadError(f"{folder / PICKLE_FILE} is missing: the save is incomplete.")
        base = _guard(str(folder / PICKLE_FILE), lambda: torch.load(folder / PICKLE_FILE, weights_only=False))
    else:
        weights = folder / WEIGHTS_FILE
        if payload.get("weights_file") != WEIGHTS_FILE or not weights.is_file():
            raise SaveLoadError(f"{weights} is missing: the save is incomplete.")
        _check_digest(payload, weights)
        replays = [(f"{file}: applied[{i}] ({r['name']}).state",
                    lambda m, a=a, r=r: a.replay(m, cfg.get_prefix_wrapper(r["name"]), r.get("state", {})))
                   for i, (a, r) in enumerate(zip(algos[:cut], applied[:cut], strict=True))
                   if a.save_fn == SaveFn.REPLAY]
        spec = payload["base"]
        recipe = (lambda: rebuild_base(spec)) if spec.get("kind") in REBUILT_KINDS else None
        _guard(f"{file}: base", lambda: check_budget(recipe, model, replays, weights))
        # parameters on meta when slimkit builds the base and every replay before the load works on a skeleton
        on_meta = model is None and all(a.replay_on_meta for a in algos[:cut] if a.save_fn == SaveFn.REPLAY)
        base = _guard(f"{file}: base", lambda: rebuild_base(spec, model, on_meta=on_meta, trust_code=trust_code))
        for field, replay in replays:
            base = _guard(field, lambda m=base, replay=replay: replay(m))
        _load_weights(base, weights, assign=on_meta)
    if isinstance(base, torch.nn.Module):
        base = base.to(cfg.device).eval()

    pre_apply = None
    for i, (algo, record) in enumerate(zip(algos, applied, strict=True)):
        if i == cut:
            pre_apply = base
        if i >= cut or algo.save_fn == SaveFn.REAPPLY:
            base = _guard(f"{file}: applied[{i}] ({record['name']})",
                          lambda m=base, a=algo, r=record: a.apply(m, cfg.get_prefix_wrapper(r["name"])))
    return base, cfg, applied, payload["base"], pre_apply, saved_before


def _read_inputs(folder: Path) -> Any:
    try:
        return load_inputs(folder / EXAMPLE_INPUTS_FILE)
    except (SafetensorError, OSError) as exc:
        raise SaveLoadError(f"{folder / EXAMPLE_INPUTS_FILE} cannot be read ({exc}): truncated or corrupt.") from exc


def _check_digest(payload: dict[str, Any], weights: Path) -> None:
    """Compare the weights with the SHA-256 the save recorded (saves from before it was recorded skip this)."""
    expected = payload.get("weights_sha256")
    if expected is not None and weights_digest(weights) != expected:
        raise SaveLoadError(
            f"{weights} cannot be read as saved (its SHA-256 differs from weights_sha256 in {CONFIG_FILE}): the "
            "file is truncated or corrupt, was changed, or comes from another save. Save the model again."
        )
