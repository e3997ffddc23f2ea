"""A streaming run's plan: the skeleton, each algorithm's per-block step or output format, and the block sizes.

:func:`make_plan` takes the :class:`~slimkit.engine.prepare.Prepared` of a folder (recipe, device, dtype and
format decided there), builds the skeleton on the meta device, binds the preparation to it (the model checks),
asks each algorithm for its per-block step or its output format, and sizes the largest block, so every refusal
comes before any file is written. It decides nothing :func:`~slimkit.engine.prepare.prepare` decided.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from slimkit.config.smash_config import SmashConfig
from slimkit.core import registry
from slimkit.core.contract import SlimkitAlgorithm, SmashConfigPrefixWrapper
from slimkit.core.weights import EXPERTS, Target, find_targets, target_kind, weight_of
from slimkit.engine.stream.checkpoint import Checkpoint
from slimkit.engine.stream.memory import format_bytes
from slimkit.engine.stream.skeleton import Blocks, Skeleton, build_model
from slimkit.engines.quantization.lowbit.experts_quantize import require_layout
from slimkit.errors import ConfigError

if TYPE_CHECKING:  # prepare reads folders through this package: the plan only reads a Prepared's fields
    from slimkit.engine.prepare import Prepared

__all__ = ["Plan", "make_plan"]


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
        ids, full = self.step.calibration_ids, self.config.to_dict()
        config = {"algorithms": full["algorithms"], "hyperparameters": full["hyperparameters"]}
        return {"model": self.checkpoint.fingerprint(), "config": config, "format": self.format,
                "dtype": str(self.dtype), "compute_dtype": str(self.compute_dtype), "device": self.device.type,
                "calibration_sha256": None if ids is None else hashlib.sha256(ids.numpy().tobytes()).hexdigest()}


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


def make_plan(prepared: Prepared) -> Plan:
    """Build the skeleton of ``prepared``'s folder, bind the preparation to it, and collect the per-block step."""
    if not prepared.stream:
        raise ConfigError("make_plan() needs the Prepared of a folder that streams: prepare(folder, cfg, stream=True).")
    checkpoint, device, dtype = prepared.checkpoint, torch.device(prepared.device), prepared.dtype
    compute = torch.float32 if device.type == "cpu" else dtype  # CPU matmuls in bf16/fp16 are slow (no AMX)
    model = build_model(checkpoint.folder, compute)
    config = prepared.bind(model).config  # the model checks, the folder's tokenizer: before any block is read
    found = find_targets(model)  # every target, found before quantizing: what the coverage record is measured against
    skeleton = Skeleton(model, checkpoint)
    algorithms, steps, owner = [], [], None
    for i, name in enumerate(prepared.algorithms):
        algo, view = registry.get(name)(), config.get_prefix_wrapper(name)
        algorithms.append((name, algo, view))
        step = algo.stream_step(model, view)
        steps += [(i, step)] if step is not None else []
        owner = i if algo.stream_format is not None else owner
    blocks = skeleton.blocks()
    step_owner, step = steps[0]  # prepare() refused recipes without exactly one block-wise quantizer
    targets = step.targets(model)
    block_bytes = [checkpoint.nbytes(skeleton.stored_names(blocks.prefix(i)), compute)
                   for i in range(len(blocks.modules))]
    fmt = prepared.output_format if owner is None else algorithms[owner][1].stream_format
    return Plan(config, checkpoint, skeleton, blocks, algorithms, step, step_owner, targets, fmt, owner, dtype,
                compute, device, block_bytes, _statistics_bytes(skeleton, blocks, targets, step.calibrated, device),
                found)
