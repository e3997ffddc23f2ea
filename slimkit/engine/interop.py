"""Save a SmashedModel as another tool's checkpoint (compressed-tensors, GPTQ), and open theirs as a SmashedModel.

Export (:func:`save_checkpoint`) refuses, before anything is written, a recipe or model that the format cannot
hold (:func:`check_recipe` for what a SmashConfig will produce, :func:`slimkit.compression.formats.plan` for the
model itself). Import (:func:`import_checkpoint`) rebuilds the architecture from ``config.json`` on the meta
device and puts the checkpoint's codes, scales and zero points into :class:`PackedLinear` layers: nothing is
re-quantized or dequantized, and the result runs on slimkit's CPU kernel, saves in slimkit's format, serves, and
compiles to GGUF where the grid has a GGUF twin.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from slimkit.compression import formats
from slimkit.compression.formats import FORMAT_ALGORITHMS, FORMAT_BITS, FormatError, check_format, supported_text
from slimkit.compression.formats.writer import refuse_experts
from slimkit.compression.quantization.lowbit.layers import select_targets
from slimkit.compression.quantization.lowbit.linear import PER_CHANNEL
from slimkit.config.files import CONFIG_FILE
from slimkit.config.smash_config import SmashConfig
from slimkit.core.weights import EXPERTS, weight_of
from slimkit.engine.base_model import describe_base, meta_parameters, meta_tensors
from slimkit.engine.model_card import build_card
from slimkit.errors import SaveLoadError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def check_recipe(smash_config: SmashConfig, fmt: str) -> None:
    """Refuse a SmashConfig whose result ``fmt`` cannot hold, before anything runs (``slimkit smash --format``)."""
    check_format(fmt)
    names = smash_config.get_active_algorithms()
    problems = []
    others = [n for n in names if n not in FORMAT_ALGORITHMS]
    if others:
        problems.append(f"{', '.join(others)} change the model in ways {fmt} has no place for (it stores an unchanged "
                        "transformers architecture with packed Linear weights)")
    quantizers = [n for n in names if n in FORMAT_ALGORITHMS]
    if not quantizers:
        problems.append(f"no low-bit quantizer: add one of {', '.join(FORMAT_ALGORITHMS[:3])}")
    for name in quantizers:
        hps = smash_config.hyperparameters_of(name)
        if name == "hqq":
            problems.append("hqq fits each group's zero point as a fraction, and the format stores integer zero "
                            "points; use rtn, gptq or awq")
        if hps.get("bits") not in FORMAT_BITS:
            problems.append(f"{name}_bits={hps.get('bits')} (supported: {', '.join(map(str, FORMAT_BITS))})")
        if name == "awq" and not hps.get("fold_only", False):
            problems.append("awq keeps an input scale on layers no preceding layer absorbs, which the format cannot "
                            "store; set awq_fold_only=true")
    if problems:
        raise FormatError(f"Cannot save this recipe as {fmt}: {'; '.join(problems)}. {supported_text(fmt)}")


def check_model_recipe(model: torch.nn.Module, smash_config: SmashConfig, fmt: str) -> None:
    """Refuse, before the quantizer runs, a group size that does not split the rows of the layers it will take.

    Mixture-of-experts modules the quantizer would take are refused too (:func:`~slimkit.compression.formats.writer
    .refuse_experts`).

    ``fmt`` holds whole groups only (compressed-tensors' forward raises on a partial last group); a model whose
    layers are narrower than one group is fine (one group per row). Complements :func:`check_recipe`, which
    cannot see the model's widths.
    """
    for name in smash_config.get_active_algorithms():
        if name not in FORMAT_ALGORITHMS:
            continue
        hps = smash_config.hyperparameters_of(name)
        refuse_experts([t.name for t in select_targets(model, tuple(hps.get("exclude") or ()), (EXPERTS,))], fmt,
                       f"{name}_exclude")
        group = int(hps.get("group_size") or PER_CHANNEL)
        if group == PER_CHANNEL:
            continue
        widths = {t.name: int(weight_of(model.get_submodule(t.name)).shape[1])
                  for t in select_targets(model, tuple(hps.get("exclude") or ()))}
        bad: dict[int, list[str]] = {}
        for layer, width in widths.items():
            if width > group and width % group:
                bad.setdefault(width, []).append(layer)
        if bad:
            fits = [g for g in (16, 32, 64, 128, 256) if all(w % g == 0 or w <= g for w in widths.values())]
            parts = [f"{width} input columns ({', '.join(names[:3])}"
                     f"{f' and {len(names) - 3} more' if len(names) > 3 else ''})" for width, names in bad.items()]
            raise FormatError(f"Cannot save this model as {fmt} with {name}_group_size={group}: {'; '.join(parts)} do "
                              f"not split into whole groups of {group}. Set {name}_group_size to "
                              f"{' or '.join(map(str, fits)) if fits else '-1 (per-channel)'}, or exclude those "
                              f"layers. {supported_text(fmt)}")


def _check_applied(smashed: Any, fmt: str) -> None:
    others = [a["name"] for a in smashed.applied if a["name"] not in FORMAT_ALGORITHMS]
    if others:
        raise FormatError(f"Cannot save as {fmt}: {', '.join(others)} ran on this model, and {fmt} stores an "
                          "unchanged transformers architecture whose Linear layers are packed by "
                          f"{', '.join(FORMAT_ALGORITHMS[:3])}. Smash with only one of those to export. "
                          f"{supported_text(fmt)}")


def check_target(path: str | os.PathLike) -> Path:
    """Refuse to overwrite a folder that is neither empty nor an earlier slimkit save or export."""
    target = Path(path)
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (
            (target / CONFIG_FILE).exists() or "slimkit" in _read(target / "README.md")))):
        raise SaveLoadError(f"Refusing to save into {target}: it exists and is not an earlier slimkit save, so its "
                            "files would be lost. Choose a new or empty directory.")
    return target


def _read(file: Path) -> str:
    try:
        return file.read_text()[:2000]
    except (OSError, UnicodeDecodeError):
        return ""


def save_checkpoint(smashed: Any, path: str | os.PathLike, fmt: str,
                    measurements: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``smashed`` to ``path`` as a ``fmt`` checkpoint with its tokenizer and model card; checks first."""
    check_format(fmt)
    _check_applied(smashed, fmt)
    target = check_target(path)
    act_order, damp = False, None
    for record in smashed.applied:
        hps = smashed.smash_config.hyperparameters_of(record["name"])
        if record["name"] == "gptq":
            act_order, damp = bool(hps.get("act_order")), hps.get("damp")
    formats.plan(smashed.model, fmt, act_order, damp)  # refuses before the card or any file is made
    card = build_card(smashed, fmt, measurements)
    return formats.export_checkpoint(smashed.model, target, fmt, smashed.smash_config.tokenizer, card,
                                     act_order=act_order, damp=damp)


def foreign_format(path: str | os.PathLike) -> str | None:
    """The format of a folder made by another tool (config.json with a quantization_config, no slimkit record).

    ``None`` for slimkit saves and folders without a quantization_config; unknown methods raise a FormatError.
    """
    folder = Path(path)
    if not folder.is_dir() or (folder / CONFIG_FILE).is_file() or not (folder / "config.json").is_file():
        return None
    fmt, _ = formats.read_quantization_config(folder)
    return fmt


def _hf_config(folder: Path) -> tuple[Any, type]:
    import transformers

    data = json.loads((folder / "config.json").read_text())
    data.pop("quantization_config", None)
    model_type = data.get("model_type")
    arch = (data.get("architectures") or [None])[0]
    cls = getattr(transformers, str(arch), None) if arch else None
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        raise FormatError(f"{folder}/config.json names architecture {arch!r}, which this transformers has no model "
                          "class for; set 'architectures' to a transformers causal LM class.")
    try:
        config = transformers.AutoConfig.for_model(model_type, **{k: v for k, v in data.items() if k != "model_type"})
    except Exception as exc:  # noqa: BLE001 - transformers raises many types for a bad config
        raise FormatError(f"{folder}/config.json is not a config transformers can build ({exc}).") from exc
    return config, cls


def import_checkpoint(path: str | os.PathLike, device: str | None = None) -> tuple:
    """Open another tool's compressed-tensors or GPTQ folder as SmashedModel parts (see the module doc)."""
    folder = Path(path)
    fmt, qc = formats.read_quantization_config(folder)
    if fmt is None:
        raise SaveLoadError(f"{folder} has no quantization_config: it is a plain Hugging Face folder, not a slimkit "
                            "save. Smash it with `slimkit smash --model DIR` or load it with transformers.")
    config, cls = _hf_config(folder)
    with meta_parameters():
        model = cls(config)
    info = formats.load_into(model, folder, fmt, qc, torch.float32)
    missing = meta_tensors(model)
    if missing:
        raise FormatError(f"{folder}: {len(missing)} tensor(s) of {cls.__name__} are not in the checkpoint: "
                          f"{', '.join(missing[:6])}.")
    cfg = SmashConfig(device=device or "cpu")
    if any((folder / f).is_file() for f in TOKENIZER_FILES):
        cfg.add_tokenizer(str(folder))
    model = model.to(cfg.device).eval()
    base = describe_base(model)
    base["source"] = {"format": fmt, "path": str(folder.resolve()), "schemes": sorted(set(info["schemes"].values())),
                      "quantization_config": qc}
    return model, cfg, [], base, None, None


__all__ = ["check_model_recipe", "check_recipe", "check_target", "foreign_format", "import_checkpoint",
           "save_checkpoint"]
