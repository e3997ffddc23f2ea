"""Everything a streaming run decides before it touches a weight: what, in which dtypes, into which format.

:func:`make_plan` reads the folder's headers and config, builds the skeleton, validates the SmashConfig against
it exactly as ``smash`` does (:func:`slimkit.engine.smash.check_config`), asks each algorithm for its per-block
step or its output format, and sizes the largest block, so every refusal comes before any file is written.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from slimkit.compression.quantization.lowbit.experts_quantize import require_layout
from slimkit.config.smash_config import SmashConfig
from slimkit.core import registry
from slimkit.core.contract import SlimkitAlgorithm, SmashConfigPrefixWrapper
from slimkit.core.weights import EXPERTS, Target, find_targets, target_kind, weight_of
from slimkit.engine.interop import check_model_recipe, check_recipe
from slimkit.engine.smash import check_config
from slimkit.engine.stream.checkpoint import Checkpoint
from slimkit.engine.stream.memory import format_bytes
from slimkit.engine.stream.skeleton import Blocks, Skeleton, build_model
from slimkit.errors import ConfigError

__all__ = ["Plan", "config_streams", "exporters", "make_plan", "parse_dtype", "streamable_algorithms"]

SLIMKIT = "slimkit"
_DTYPE_NAMES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
                "half": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def parse_dtype(value: str | torch.dtype | None) -> torch.dtype | None:
    """``"bf16"``/``"bfloat16"``/``torch.bfloat16``... -> the torch dtype (None stays None)."""
    if value is None or isinstance(value, torch.dtype):
        if isinstance(value, torch.dtype) and value not in _DTYPE_NAMES.values():
            raise ConfigError(f"dtype {value} is not a model dtype; use float32, float16 or bfloat16.")
        return value
    key = str(value).lower().removeprefix("torch.")
    if key not in _DTYPE_NAMES:
        raise ConfigError(f"dtype {value!r} is not supported; use one of float32, float16, bfloat16 (or fp32, fp16, "
                          "bf16).")
    return _DTYPE_NAMES[key]


def streamable_algorithms() -> list[str]:
    """Algorithms that quantize one block at a time (implement ``stream_step``)."""
    return [n for n in registry.names()
            if registry.get(n).stream_step is not SlimkitAlgorithm.stream_step]


def exporters() -> list[str]:
    """Algorithms that choose the output format of a streaming run (declare ``stream_format``)."""
    return [n for n in registry.names() if registry.get(n).stream_format is not None]


def config_streams(smash_config: SmashConfig) -> bool:
    """Whether every active algorithm of ``smash_config`` can take part in a streaming run (one quantizer)."""
    names = smash_config.get_active_algorithms()
    steps = [n for n in names if n in streamable_algorithms()]
    return len(steps) == 1 and all(n in steps or n in exporters() for n in names)


@dataclass
class Plan:
    """A streaming run's decisions (see :func:`make_plan`)."""

    config: SmashConfig
    checkpoint: Checkpoint
    skeleton: Skeleton
    blocks: Blocks
    #: (name, algorithm instance, its config view) in stage order
    algorithms: list[tuple[str, SlimkitAlgorithm, SmashConfigPrefixWrapper]]
    step: Any
    #: index in ``algorithms`` of the quantizer that returned ``step``
    step_owner: int
    targets: list[str]
    format: str
    #: index in ``algorithms`` of the one that chose the format (None: slimkit's own format)
    format_owner: int | None
    dtype: torch.dtype
    compute_dtype: torch.dtype
    device: torch.device
    block_bytes: list[int] = field(default_factory=list)
    statistics_bytes: int = 0
    #: every target of the skeleton (all kinds), found before quantizing: what coverage is measured against
    model_targets: list[Target] = field(default_factory=list)

    @property
    def model(self) -> torch.nn.Module:
        """The skeleton model."""
        return self.skeleton.model

    def largest_block(self) -> tuple[int, int]:
        """(index, bytes in the compute dtype) of the largest block."""
        index = max(range(len(self.block_bytes)), key=self.block_bytes.__getitem__)
        return index, self.block_bytes[index]

    def working_set(self) -> int:
        """Bytes one block needs while processed: its weights twice (float copy + quantized), plus statistics."""
        return 2 * self.largest_block()[1] + self.statistics_bytes

    def describe_block(self) -> str:
        """``block 3 (model.layers.3) is 872 MB in float32 (+ 1.3 GB of Hessians)`` for messages."""
        index, size = self.largest_block()
        extra = f" (+ {format_bytes(self.statistics_bytes)} of calibration statistics)" if self.statistics_bytes else ""
        return (f"block {index} ({self.blocks.prefix(index)}) is {format_bytes(size)} in "
                f"{str(self.compute_dtype).split('.')[-1]}{extra}")

    def fingerprint(self) -> dict[str, Any]:
        """What must be equal for a resumed run to continue this one's files."""
        ids = self.step.calibration_ids
        config = self.algorithms_config()
        return {"model": self.checkpoint.fingerprint(), "config": config, "format": self.format,
                "dtype": str(self.dtype), "compute_dtype": str(self.compute_dtype), "device": self.device.type,
                "calibration_sha256": None if ids is None else hashlib.sha256(ids.numpy().tobytes()).hexdigest()}

    def algorithms_config(self) -> dict[str, Any]:
        """The active algorithms and their hyperparameters."""
        full = self.config.to_dict()
        return {"algorithms": full["algorithms"], "hyperparameters": full["hyperparameters"]}


def _statistics_bytes(skeleton: Skeleton, blocks: Blocks, targets: list[str], calibrated: bool,
                      device: torch.device) -> int:
    """Upper bound of one block's calibration statistics in bytes.

    An ``[in, in]`` float32 matrix per target (per expert and projection for MoE experts, whose statistics are
    gathered for the whole block before any expert is quantized), and on CUDA a second copy of the widest while it
    is factorised (on the CPU GPTQ factorises inside the matrix itself).
    """
    if not calibrated:
        return 0
    prefix = blocks.prefix(0) + "."
    widths: list[int] = []
    for n in targets:
        if not n.startswith(prefix):
            continue
        module = skeleton.model.get_submodule(n)
        if target_kind(module) == EXPERTS:
            layout = require_layout(module, n)
            widths += [layout.hidden, layout.intermediate] * layout.num_experts
        else:
            widths.append(int(weight_of(module).shape[-1]))
    if not widths:
        return 0
    return 4 * (sum(w * w for w in widths) + (max(widths) ** 2 if device.type != "cpu" else 0))


def make_plan(folder: str | Path, smash_config: SmashConfig, dtype: str | torch.dtype | None = None,
              save_format: str = SLIMKIT) -> Plan:
    """Read ``folder``'s headers, build the skeleton and validate ``smash_config`` for a streaming run.

    ``save_format`` is slimkit's own (default, or GGUF when ``llama_cpp`` is in the config), or a checkpoint format
    other runtimes open (``"compressed-tensors"``, ``"gptq"``), refused here when the recipe cannot be held.
    """
    if not isinstance(smash_config, SmashConfig):
        raise ConfigError(f"Streaming needs a SmashConfig, got {type(smash_config).__name__}; build one with "
                          "SmashConfig({'gptq': {'bits': 4}}).")
    if save_format != SLIMKIT:
        check_recipe(smash_config, save_format)  # an unknown format or a recipe it cannot hold: before any read
    checkpoint = Checkpoint(folder)
    out_dtype = parse_dtype(dtype) or checkpoint.dtype()
    if out_dtype not in _DTYPE_NAMES.values():
        raise ConfigError(f"{folder} stores its weights as {out_dtype}; pass dtype='bfloat16', 'float16' or "
                          "'float32' to choose the model's dtype.")
    device = torch.device(smash_config.device)
    compute = torch.float32 if device.type == "cpu" else out_dtype  # CPU matmuls in bf16/fp16 are slow (no AMX)
    model = build_model(checkpoint.folder, compute)
    if save_format != SLIMKIT:
        check_model_recipe(model, smash_config, save_format)  # group size vs the widths: before any block is read
    found = find_targets(model)  # every target, found before quantizing: what the coverage record is measured against
    skeleton = Skeleton(model, checkpoint)
    if smash_config.tokenizer is None and any((checkpoint.folder / f).is_file()
                                              for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        smash_config.add_tokenizer(str(checkpoint.folder))
    names = check_config(skeleton.model, smash_config)
    algorithms, steps, formats = [], [], []
    for i, name in enumerate(names):
        algo, view = registry.get(name)(), smash_config.get_prefix_wrapper(name)
        step = algo.stream_step(skeleton.model, view)
        if step is None and algo.stream_format is None:
            raise ConfigError(
                f"{name} cannot run on a model streamed block by block. Streaming runs the block-wise quantizers "
                f"({', '.join(streamable_algorithms())}), optionally with an exporter that writes the result "
                f"({', '.join(exporters())}); smash in memory instead (--no-stream).")
        algorithms.append((name, algo, view))
        if step is not None:
            steps.append((i, step))
        if algo.stream_format is not None:
            formats.append((i, algo.stream_format))
    if len(steps) != 1:
        raise ConfigError(f"Streaming needs exactly one block-wise quantizer ({', '.join(streamable_algorithms())}) "
                          f"in the SmashConfig; it has {len(steps)}: {names}.")
    if len(formats) > 1:
        raise ConfigError(f"Two algorithms choose the output format ({formats}); keep one.")
    if formats and save_format != SLIMKIT:
        raise ConfigError(f"{names[formats[0][0]]} writes a {formats[0][1]} file, and the save format asked for is "
                          f"{save_format}; drop one of them.")
    blocks = skeleton.blocks()
    step_owner, step = steps[0]
    targets = step.targets(skeleton.model)
    block_bytes = [checkpoint.nbytes(skeleton.stored_names(blocks.prefix(i)), compute)
                   for i in range(len(blocks.modules))]
    owner, fmt = formats[0] if formats else (None, save_format)
    return Plan(smash_config, checkpoint, skeleton, blocks, algorithms, step, step_owner, targets, fmt, owner,
                out_dtype, compute, device, block_bytes,
                _statistics_bytes(skeleton, blocks, targets, step.calibrated, device), found)
