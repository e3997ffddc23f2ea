"""The model as a skeleton on the meta device, whose pieces are materialized from the checkpoint and freed again.

The architecture comes from ``config.json`` (the transformers class it names), built with its parameters on the
meta device (no memory) and its unsaved buffers real (rotary ``inv_freq``). :class:`Skeleton` then loads the
tensors of one module (a decoder block, the embedding) from the :class:`~.checkpoint.Checkpoint`, and puts it back
on the meta device once written. Tied weights (``lm_head`` sharing the embedding) read their canonical tensor;
tensors stored under other names or per expert (MoE checkpoints) are read as transformers would load them
(:mod:`.layout`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from slimkit.engine.base_model import default_dtype, meta_parameters
from slimkit.engine.stream.checkpoint import Checkpoint
from slimkit.engine.stream.layout import Merged, stored_layout
from slimkit.engines.quantization.lowbit.calibration import find_blocks
from slimkit.errors import ConfigError, ModelNotSupportedError
from slimkit.zoo.sources import folder_architecture

__all__ = ["Skeleton", "build_model"]


def build_model(folder: Path, dtype: torch.dtype) -> nn.Module:
    """The causal LM ``folder/config.json`` describes, parameters on meta, created in ``dtype``; in eval mode."""
    config, cls, architecture = folder_architecture(
        folder, "add 'architectures' (e.g. [\"LlamaForCausalLM\"]) to config.json")
    if not architecture.endswith("ForCausalLM"):
        raise ModelNotSupportedError(f"Streaming quantizes causal language models (a ...ForCausalLM class); "
                                     f"{folder} is a {architecture}. Smash it in memory (--no-stream).")
    with meta_parameters(), default_dtype(dtype):
        model = cls(config)
    return model.eval()


def top_level_modules(model: nn.Module) -> str:
    """The model's modules two levels deep, for an error message (``model (embed_tokens, layers, norm), lm_head``)."""
    parts = []
    for name, child in model.named_children():
        inner = ", ".join(f"{n}: {type(c).__name__}" for n, c in child.named_children())
        parts.append(f"{name}: {type(child).__name__}" + (f" ({inner})" if inner else ""))
    return "; ".join(parts) or "(none)"


@dataclass
class Blocks:
    """The decoder blocks: their list's dotted name and count."""

    name: str
    modules: nn.ModuleList

    def prefix(self, index: int) -> str:
        """Dotted name of block ``index``."""
        return f"{self.name}.{index}" if self.name else str(index)


class Skeleton:
    """A meta-device model over a checkpoint: load a module's tensors, free them, find the blocks and the pieces."""

    def __init__(self, model: nn.Module, checkpoint: Checkpoint) -> None:
        self.model, self.checkpoint = model, checkpoint
        state = model.state_dict(keep_vars=True)
        self.names = list(state)  # saved tensors of the architecture, in state-dict order
        groups: dict[int, list[str]] = {}
        for name, param in model.named_parameters(remove_duplicate=False):
            groups.setdefault(id(param), []).append(name)
        #: name -> the tensor it shares (tied weights): the first name of its group that the checkpoint holds
        self.source: dict[str, str] = {}
        for members in groups.values():
            stored = [m for m in members if m in checkpoint.tensors]
            for m in members:
                self.source[m] = m if m in checkpoint.tensors else (stored[0] if stored else m)
        #: name -> the canonical name it is tied to (same Parameter), for names that are not canonical
        self.tied = {m: members[0] for members in groups.values() for m in members[1:]
                     if members[0] in state and m in state}
        #: model name -> the stored experts it is stacked from (MoE checkpoints store one matrix per expert)
        self.merged: dict[str, Merged]
        renamed, self.merged = stored_layout(model, [self.source.get(n, n) for n in self.names],
                                             set(checkpoint.tensors))
        for n in self.names:
            self.source[n] = renamed.get(self.source.get(n, n), self.source.get(n, n))
        missing = [n for n in self.names if self.source[n] not in checkpoint.tensors and self.source[n] not in
                   self.merged]
        if missing:
            raise ConfigError(
                f"{checkpoint.folder} lacks {len(missing)} tensor(s) the {type(model).__name__} architecture needs: "
                f"{', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}. It holds e.g. "
                f"{', '.join(list(checkpoint.tensors)[:4])}: the folder is incomplete or its config.json belongs to "
                "another model.")

    def blocks(self) -> Blocks:
        """The decoder blocks, or a ModelNotSupportedError listing the model's top-level modules."""
        try:
            name, modules = find_blocks(self.model)
        except ModelNotSupportedError as exc:
            raise ModelNotSupportedError(
                f"{exc} Its top-level modules are: {top_level_modules(self.model)}. Streaming needs the decoder "
                "blocks as one nn.ModuleList; smash this model in memory (--no-stream).") from exc
        return Blocks(name, modules)

    def names_under(self, prefix: str) -> list[str]:
        """Saved tensor names inside module ``prefix``."""
        return [n for n in self.names if n.startswith(prefix + ".")]

    def stored_names(self, prefix: str) -> list[str]:
        """The stored tensors module ``prefix`` reads (each once; experts as stored)."""
        out: dict[str, None] = {}
        for n in self.names_under(prefix):
            want = self.source.get(n, n)
            out.update(dict.fromkeys(self.merged[want].names() if want in self.merged else [want]))
        return list(out)

    def pieces(self, blocks: Blocks) -> list[str]:
        """Modules outside the blocks that own saved tensors (``model.embed_tokens``, ``model.norm``, ``lm_head``)."""
        return list(dict.fromkeys(n.rpartition(".")[0] for n in self.names if not n.startswith(blocks.name + ".")))

    def materialize(self, prefix: str, dtype: torch.dtype, device: str | torch.device = "cpu",
                    via: torch.dtype | None = None) -> int:
        """Load module ``prefix``'s tensors from the checkpoint; returns the bytes loaded.

        Floats are cast to ``via`` (the model's dtype) and then to ``dtype`` (the compute dtype), one tensor at a time.
        """
        module = self.model.get_submodule(prefix) if prefix else self.model
        names = self.names_under(prefix) if prefix else list(self.names)
        loaded: dict[str, torch.Tensor] = {}
        size = 0
        for n in names:
            want = self.source.get(n, n)
            if want not in loaded:
                if want in self.merged:
                    tensor = self.merged[want].assemble(lambda k: self.checkpoint.read([k], via or dtype)[k],
                                                        lambda k: self.checkpoint.tensors[k].shape)
                else:
                    tensor = self.checkpoint.read([want], via or dtype)[want]
                if tensor.is_floating_point() and tensor.dtype != dtype:
                    tensor = tensor.to(dtype)
                loaded[want] = tensor.to(device) if str(device) != "cpu" else tensor
                size += tensor.numel() * tensor.element_size()
            _assign(module, n[len(prefix) + 1:] if prefix else n, loaded[want])
        return size

    def free(self, prefix: str) -> None:
        """Put module ``prefix`` back on the meta device (its memory is released once nothing else holds it)."""
        module = self.model.get_submodule(prefix) if prefix else self.model
        module.to("meta")


def _assign(root: nn.Module, name: str, tensor: torch.Tensor) -> None:
    owner, _, leaf = name.rpartition(".")
    module = root.get_submodule(owner) if owner else root
    if leaf in module._parameters:
        module._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)
    elif leaf in module._buffers:
        module._buffers[leaf] = tensor
    else:  # pragma: no cover - names come from the module's own state dict
        raise ConfigError(f"{name} is neither a parameter nor a buffer of {type(module).__name__}.")
