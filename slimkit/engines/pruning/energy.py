"""Channel-energy filter pruning: rank each output channel by what it delivers to the layers that read it.

Filter statistics taken at a layer's own output miss what happens to the channel before it is used: in a gated
MLP (Llama, Qwen, Mistral: ``down_proj(act(gate_proj(x)) * up_proj(x))``) channel ``j`` is neither the gate's
output nor the up projection's but their product ``h_j``, the input of ``down_proj``. This pruner measures each
channel *where it is consumed*: one trace of the model (the same channel graph the speedup uses) finds every
Conv/Linear layer that reads it, through norms, activations, gates and depthwise convs; on the data, the
channel's importance is

    sum over its readers of  E[x_k^2] * ||W[:, k]||^2

where ``x_k`` is the reader's input channel that carries it and ``W[:, k]`` the reader's weights on that input
(for a conv, every output filter and kernel position). That is the expected squared size of what the readers'
outputs lose when the channel goes (exact when channels are uncorrelated): the squared, per-channel form of
Wanda's ``|W| * ||X||`` (Sun et al. 2023), close to Wanda-sp and FLAP's fluctuation metric (An et al. 2024).
Coupled layers (gate and up rows of one MLP channel) get the same score. A channel that no traced Conv/Linear
reads (it reaches the model output or an attention block) is scored by the second moment of the layer's own
output instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from slimkit.data.batches import split_batch
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.coupling import ChannelCoupling
from slimkit.engines.pruning.data_driven import Trainer, _DataDrivenPruner
from slimkit.engines.pruning.maskers import StructuredWeightMasker
from slimkit.engines.pruning.wrapper import PrunerModuleWrapper
from slimkit.engines.speedup.layers import is_linear, out_dim, out_major
from slimkit.errors import DataError

__all__ = ["ChannelEnergyPruner", "ChannelEnergyPrunerMasker"]


def _channels_last(x: torch.Tensor, module: nn.Module) -> torch.Tensor:
    """``[positions, channels]`` view of a Conv/Linear input (channels on the last dim for Linear, dim 1 for conv)."""
    x = x.detach().float()
    if not is_linear(module):
        x = x.movedim(1, -1)
    return x.reshape(-1, x.shape[-1])


def _column_energy(module: nn.Module) -> torch.Tensor:
    """``||W[:, k]||^2`` per input channel ``k`` of a Conv/Linear layer (every filter and kernel position)."""
    weight = out_major(module, module.weight.detach().float())
    return weight.transpose(0, 1).reshape(weight.shape[1], -1).pow(2).sum(dim=1)


class _SecondMoment:
    """Running ``sum(x^2)`` per channel and the number of positions, over at most ``limit`` calls."""

    def __init__(self, limit: int) -> None:
        self.total: torch.Tensor | None = None
        self.count = 0
        self.calls = 0
        self.limit = limit

    def add(self, x: torch.Tensor, module: nn.Module) -> None:
        if self.calls >= self.limit:
            return
        rows = _channels_last(x, module)
        squares = rows.pow(2).sum(dim=0)
        self.total = squares if self.total is None else self.total + squares
        self.count += rows.shape[0]
        self.calls += 1

    def mean(self) -> torch.Tensor | None:
        return None if self.total is None or self.count == 0 else self.total / self.count


class ChannelEnergyPrunerMasker(StructuredWeightMasker):
    """Importance = energy the channel delivers to its readers (see :mod:`slimkit.engines.pruning.energy`)."""

    def get_channel_importance(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None) -> torch.Tensor:
        """``sum E[x_k^2] * ||W[:, k]||^2`` over the readers, else the second moment of the layer's output."""
        return self.pruner.channel_energy(wrapper)


class ChannelEnergyPruner(_DataDrivenPruner):
    """Prune the output channels that deliver the least energy to the layers reading them, measured on data.

    The model is traced once on ``dummy_input`` (default: the inputs of the first batch of ``dataloader``) to
    find each selected layer's readers; ``statistics_batch_num`` batches then give the second moments of the
    readers' inputs. ``dependency_aware=True`` reuses that trace to give coupled layers one channel decision.
    """

    masker_class = ChannelEnergyPrunerMasker

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        trainer: Trainer | None = None,
        criterion: Callable[..., torch.Tensor] | None = None,
        dataloader: Iterable[Any] | None = None,
        statistics_batch_num: int = 1,
        dummy_input: Any = None,
        dependency_aware: bool = False,
        dims: Any = None,
        round_to: int = 1,
    ) -> None:
        if dummy_input is None and dataloader is not None:
            first = next(iter(dataloader), None)
            dummy_input = None if first is None else split_batch(first)[0]
        if dummy_input is None:
            raise PruningConfigError(
                "ChannelEnergyPruner traces the model to find which layers read each channel: pass dataloader=... "
                "(its first batch is traced) or dummy_input=... (an input the model accepts)."
            )
        self._channels = ChannelCoupling(model, dummy_input)
        super().__init__(model, config_list, optimizer, trainer, criterion, dataloader, statistics_batch_num,
                         dummy_input, dependency_aware, dims, round_to=round_to)

    def _init_dependency(self, model: nn.Module, dependency_aware: bool, dummy_input: Any, dims: Any = None,
                         round_to: int = 1) -> None:
        super()._init_dependency(model, False, None, None, round_to)  # the trace made in __init__ serves both
        if not isinstance(dependency_aware, bool):
            raise PruningConfigError(f"ChannelEnergyPruner dependency_aware must be True or False, got "
                                     f"{dependency_aware!r}.")
        if dims is not None and not dependency_aware:
            raise PruningConfigError("ChannelEnergyPruner dims needs dependency_aware=True: the dimensions are found "
                                     "by tracing the model.")
        if dependency_aware:
            self.use_coupling(self._channels, dims, round_to)

    def _setup(self) -> None:
        limit = self.statistics_batch_num
        #: per wrapped layer: its readers as (reader name, module, channels, positions)
        self.readers = {w.name: self._channels.consumers(w.name) for w in self.modules_wrapper}
        self.reader_moments = {name: _SecondMoment(limit) for readers in self.readers.values()
                               for name, *_ in readers}
        self.set_wrappers_attribute("output_moment", None)
        for wrapper in self.modules_wrapper:
            wrapper.output_moment = _SecondMoment(limit)
        #: per attention block: the layer reading its heads' context (its output projection)
        self.head_readers = {}
        for att in self._channels.graph.attention.values():
            if att.o is not None:
                self.head_readers[att.name] = (att.o, self._channels._modules[att.o])
            else:
                readers = self._channels.consumers(f"{att.name}#heads")
                if len(readers) == 1 and np.array_equal(readers[0][3], np.arange(len(readers[0][3]))):
                    self.head_readers[att.name] = readers[0][:2]
        for name, _ in self.head_readers.values():
            self.reader_moments.setdefault(name, _SecondMoment(limit))

    def head_importance(self, att: Any) -> torch.Tensor | None:
        """Per kv-head group: the energy its heads deliver to the output projection.

        ``sum E[c^2] * ||W_o[:, c]||^2`` over its context channels ``c`` (None without statistics).
        """
        reader = self.head_readers.get(att.name)
        per_input = None if reader is None else self._reader_energy(*reader)
        if per_input is None or per_input.numel() != att.num_heads * att.head_dim:
            return None
        return per_input.reshape(att.num_kv_heads, -1).sum(1)

    def _reader_energy(self, name: str, module: nn.Module) -> torch.Tensor | None:
        """``E[x_k^2] * ||W[:, k]||^2`` per input channel of reader ``name``, computed once per reader.

        A residual stream has one reader list shared by every block's output projection.
        """
        cache = self.__dict__.setdefault("_energy_cache", {})  # (reset by _collect_statistics)
        if name not in cache:
            moment = self.reader_moments[name].mean()
            cache[name] = None if moment is None else moment.cpu().double() * _column_energy(module).cpu().double()
        return cache[name]

    def channel_energy(self, wrapper: PrunerModuleWrapper) -> torch.Tensor:
        """Importance of each output channel of ``wrapper``'s layer (after :meth:`compress` collected data)."""
        channels = wrapper.weight_mask.shape[out_dim(wrapper.module)]
        score = torch.zeros(channels, dtype=torch.float64)
        read = np.zeros(channels, dtype=bool)
        for name, module, idx, positions in self.readers.get(wrapper.name, []):
            per_input = self._reader_energy(name, module)
            if per_input is None:
                continue
            energy = per_input[torch.from_numpy(positions)]
            score.index_add_(0, torch.from_numpy(idx), energy)
            read[idx] = True
        if read.all():
            return score.to(wrapper.weight_mask.device)
        own = wrapper.output_moment.mean()
        if own is None:
            raise DataError(f"No statistics for layer {wrapper.name!r} or its readers; did its forward run on the "
                            "data?")
        fallback = torch.from_numpy(~read)
        score[fallback] = own.cpu().double()[fallback]
        return score.to(wrapper.weight_mask.device)

    def _collect_statistics(self) -> None:
        self._energy_cache: dict[str, torch.Tensor | None] = {}  # new statistics: recompute the readers' energy
        handles = []
        modules = {name: module for readers in self.readers.values() for name, module, *_ in readers}
        modules.update(dict(self.head_readers.values()))
        for name, module in modules.items():
            moment = self.reader_moments[name]
            handles.append(module.register_forward_pre_hook(
                lambda mod, args, m=moment: m.add(args[0], mod) if args and torch.is_tensor(args[0]) else None))

        def own(wrapper: PrunerModuleWrapper, inputs: tuple, output: Any) -> None:
            if torch.is_tensor(output):
                wrapper.output_moment.add(output, wrapper.module)

        collector = self.add_activation_collector(own)
        try:
            self._feed_statistics()
        finally:
            self.remove_activation_collector(collector)
            for handle in handles:
                handle.remove()
