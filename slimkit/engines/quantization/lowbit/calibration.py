"""Calibration for data-driven quantizers (GPTQ, AWQ): token blocks from data, and a block-by-block runner.

The runner walks a transformer's blocks one at a time: it captures the inputs of block 0 (the model runs up to
it and stops), then for each block runs it on those inputs with hooks that hand every target layer's input to
the quantizer, lets the quantizer replace the block's layers, and runs the (now quantized) block again to
produce the next block's inputs. Only one block's inputs are alive at any time, so peak memory stays near one
block's activations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from slimkit.engines.quantization.lowbit.layers import KINDS, release_caches, select_targets
from slimkit.errors import DataError, ModelNotSupportedError
from slimkit.utils import model_device, move_inputs


class _Stop(Exception):
    """Raised by the capture hook to stop the forward pass at block 0."""


def find_blocks(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The transformer's block list: the ``nn.ModuleList`` holding the most quantizable layers.

    Quantizable means a supported target of the low-bit kinds (:func:`select_targets`: Linear and subclasses,
    Conv1D). Raises ModelNotSupportedError when the model has no list of blocks with such layers.
    """
    best: tuple[int, str, nn.ModuleList] | None = None
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) == 0:
            continue
        counts = [len(select_targets(child, kinds=KINDS)) for child in module]
        if min(counts) == 0:
            continue
        total = sum(counts)
        if best is None or total > best[0]:
            best = (total, name, module)
    if best is None:
        raise ModelNotSupportedError(
            f"{type(model).__name__} has no list of transformer blocks (an nn.ModuleList whose blocks contain "
            "nn.Linear or Conv1D layers it can quantize), which calibration-based quantization walks block by block."
        )
    return best[1], best[2]


def calibration_ids(
    data: Any, tokenizer: Any, n_samples: int, seq_len: int, vocab_size: int | None = None
) -> torch.Tensor:
    """``[n_samples, seq_len]`` token ids from the train split of a DataModule (deterministic, in order).

    Items with a ``"text"`` field are tokenized with ``tokenizer`` and joined with its EOS token into one
    stream that is cut into consecutive blocks; other datasets are read through their train DataLoader and
    the first tensor of each batch is used as token ids. Ids outside ``vocab_size`` raise a DataError.
    """
    train = getattr(data, "train", None)
    if train is None:
        raise DataError("Calibration needs data with a train split: cfg.add_data('PyDocText') or your own DataModule.")
    need = n_samples * seq_len
    stream: list[int] = []
    first = train[0] if hasattr(train, "__getitem__") and len(train) else None
    if isinstance(first, dict) and "text" in first:
        if tokenizer is None:
            raise DataError("Calibration text needs a tokenizer: call cfg.add_tokenizer(tok) before cfg.add_data(...).")
        eos = getattr(tokenizer, "eos_token_id", None)
        for i in range(len(train)):
            ids = tokenizer([str(train[i]["text"])], add_special_tokens=False)["input_ids"][0]
            if stream and isinstance(eos, int):
                stream.append(eos)
            stream.extend(int(t) for t in ids)
            if len(stream) >= need:
                break
    else:
        for batch in data.train_dataloader(batch_size=1, shuffle=False):
            ids = batch["input_ids"] if isinstance(batch, dict) else batch
            ids = ids[0] if isinstance(ids, (tuple, list)) else ids
            if not isinstance(ids, torch.Tensor) or ids.is_floating_point():
                raise DataError(f"Calibration batches must hold integer token ids; got {type(ids).__name__}.")
            stream.extend(int(t) for t in ids.reshape(-1))
            if len(stream) >= need:
                break
    if len(stream) < need:
        raise DataError(
            f"The calibration data has {len(stream)} tokens, fewer than n_calibration_samples x seq_len = "
            f"{n_samples} x {seq_len} = {need}. Lower them or add more text."
        )
    ids = torch.tensor(stream[:need], dtype=torch.long).view(n_samples, seq_len)
    if vocab_size is not None and int(ids.max()) >= vocab_size:
        raise DataError(
            f"The tokenizer produced id {int(ids.max())} but the model's vocabulary has {vocab_size} entries: the "
            "tokenizer does not belong to this model. Pass the model's own tokenizer with cfg.add_tokenizer(...)."
        )
    return ids


@dataclass
class BlockInputs:
    """Positional and keyword arguments of one call of a block; ``args[0]`` is the hidden state."""

    args: list[Any]
    kwargs: dict[str, Any] = field(default_factory=dict)


def capture_block_inputs(model: nn.Module, block: nn.Module, batches: list[torch.Tensor]) -> list[BlockInputs]:
    """Run ``model`` on each id batch up to ``block`` and record the block's call arguments."""
    captured: list[BlockInputs] = []

    def hook(_module: nn.Module, args: tuple, kwargs: dict) -> None:
        if args:
            captured.append(BlockInputs(list(args), dict(kwargs)))
        else:  # hidden state passed by keyword: move it to args[0]
            kwargs = dict(kwargs)
            captured.append(BlockInputs([kwargs.pop("hidden_states")], kwargs))
        raise _Stop

    handle = block.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        for ids in batches:
            try:
                model(input_ids=ids, use_cache=False)
            except _Stop:
                pass
    finally:
        handle.remove()
    if len(captured) != len(batches):
        raise ModelNotSupportedError("The model did not call its first block on the calibration ids.")
    return captured


def run_block(block: nn.Module, inputs: BlockInputs) -> torch.Tensor:
    """Call ``block`` on recorded inputs and return its hidden-state output.

    Every tensor of the call (nested ones too: rotary ``position_embeddings``, masks, cache positions) is moved
    to the block's device first; a tensor already there is passed as it is.
    """
    device = model_device(block)
    out = block(*move_inputs(inputs.args, device), **move_inputs(inputs.kwargs, device))
    return out[0] if isinstance(out, (tuple, list)) else out


class BlockQuantizer:
    """What the runner drives: collect statistics from layer inputs, then quantize one block's layers."""

    def observe(self, name: str, x: torch.Tensor) -> None:
        """Receive one input batch ``x`` of layer ``name`` (full dotted name in the model)."""

    def observe_call(self, name: str, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """Receive one call of target ``name``; by default its first input goes to :meth:`observe`.

        Quantizers of modules with several inputs (MoE experts: hidden states and routing) override it.
        """
        self.observe(name, args[0] if args else next(iter(kwargs.values())))

    def quantize_block(self, model: nn.Module, block_name: str, block: nn.Module, names: list[str],
                       shared: list[list[str]], producers: dict[str, str],
                       probe: Callable[[], torch.Tensor] | None = None) -> None:
        """Replace the block's layers ``names`` (full dotted names) by packed ones.

        ``shared`` lists the layers fed the same tensor; ``producers`` maps a layer to the module (full name)
        whose output is its input. ``probe()`` runs the block on one calibration input and returns its output
        (to check that a float rewrite of the block kept its function).
        """
        raise NotImplementedError


def _input_sharing(
    block: nn.Module, prefix: str, names: list[str], run: Callable[[], Any]
) -> tuple[list[list[str]], dict[str, str]]:
    """Run one forward with hooks recording which layers get the same input tensor and which module made it.

    Tensors are compared by identity (kept alive for the one forward), so freed memory cannot alias them.
    """
    outputs: list[tuple[str, torch.Tensor]] = []
    consumed: dict[str, torch.Tensor] = {}
    handles = []
    for sub_name, module in block.named_modules():
        full = f"{prefix}.{sub_name}" if sub_name else prefix

        def out_hook(_m: nn.Module, _a: Any, out: Any, full: str = full) -> None:
            if isinstance(out, torch.Tensor):
                outputs.append((full, out))

        handles.append(module.register_forward_hook(out_hook))
        if full in names:
            def in_hook(_m: nn.Module, args: tuple, full: str = full) -> None:
                consumed[full] = args[0]

            handles.append(module.register_forward_pre_hook(in_hook))
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    shared: list[list[str]] = []
    producers: dict[str, str] = {}
    for name in names:
        if name not in consumed:
            continue
        x = consumed[name]
        group = next((g for g in shared if consumed[g[0]] is x), None)
        if group is None:
            shared.append([name])
        else:
            group.append(name)
        maker = next((m for m, out in outputs if out is x), None)  # first module that returned this very tensor
        if maker is not None:
            producers[name] = maker
    return shared, producers


class InputStore:
    """The recorded calls of one block, item by item (:meth:`get` / :meth:`put`); a list of them in memory here.

    The streaming path subclasses it to keep some hidden states on disk; :func:`process_block` only uses these
    three methods, so the in-memory and the streaming runs compute the same thing.
    """

    def __init__(self, items: list[BlockInputs]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def get(self, index: int) -> BlockInputs:
        """Item ``index`` (its hidden state as ``args[0]``)."""
        return self.items[index]

    def put(self, index: int, hidden: torch.Tensor) -> None:
        """Replace item ``index``'s hidden state (by the block's output: the next block's input)."""
        self.items[index].args[0] = hidden


@torch.no_grad()
def process_block(model: nn.Module, prefix: str, block: nn.Module, names: list[str], inputs: InputStore,
                  quantizer: BlockQuantizer, advance: bool = True) -> None:
    """Calibrate and quantize the targets ``names`` of one block, then (``advance``) turn its inputs into outputs.

    The block runs on every stored input with hooks handing each target's input to ``quantizer``; the quantizer
    replaces the layers; the quantized block then runs once more to produce the next block's inputs. What that run
    made the packed layers cache (on CUDA the dequantised weight of each prefill-sized layer) is dropped after it:
    kept, block after block it would hold a dense copy of every quantized layer beside its packed one.
    """
    if names:
        shared, producers = _input_sharing(block, prefix, names, lambda: run_block(block, inputs.get(0)))
        handles = [model.get_submodule(n).register_forward_pre_hook(
            lambda m, args, kwargs, n=n: quantizer.observe_call(n, m, args, kwargs), with_kwargs=True)
            for n in names]
        try:
            for i in range(len(inputs)):
                run_block(block, inputs.get(i))
        finally:
            for h in handles:
                h.remove()
        quantizer.quantize_block(model, prefix, block, names, shared, producers,
                                 probe=lambda: run_block(block, inputs.get(0)))
    if advance:
        for i in range(len(inputs)):
            inputs.put(i, run_block(block, inputs.get(i)))
        release_caches(block)


@torch.no_grad()
def run_blockwise(model: nn.Module, ids: torch.Tensor, targets: list[str], quantizer: BlockQuantizer,
                  batch_size: int = 1) -> list[str]:
    """Quantize ``targets`` inside the model's blocks, block by block; returns the targets outside any block."""
    blocks_name, blocks = find_blocks(model)
    device = model_device(model)
    batches = [ids[i : i + batch_size].to(device) for i in range(0, ids.shape[0], batch_size)]
    inputs = InputStore(capture_block_inputs(model, blocks[0], batches))
    inside: set[str] = set()
    for index, block in enumerate(blocks):
        prefix = f"{blocks_name}.{index}" if blocks_name else str(index)
        names = [n for n in targets if n.startswith(prefix + ".")]
        inside.update(names)
        process_block(model, prefix, block, names, inputs, quantizer, advance=index + 1 < len(blocks))
    return [n for n in targets if n not in inside]
