"""Calibration inputs of the block being processed: hidden states in RAM up to a budget, the rest on disk.

Each item is one recorded call of the block (``args[0]`` the hidden state ``[batch, seq, hidden]``, the rest
keyword arguments such as rotary ``position_embeddings`` that every block receives alike). The first items, as
many as ``ram_bytes`` holds, keep their hidden state in memory; the others live in a file and are read one at a
time. Two files alternate: a block reads its inputs from one and writes its outputs (the next block's inputs) to
the other, so the inputs of the last finished block are always complete on disk. :meth:`commit` also writes the
in-memory items there: a run killed later resumes from that file (:meth:`restore`).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import torch

from slimkit.engines.quantization.lowbit.calibration import BlockInputs, InputStore
from slimkit.utils import move_inputs

__all__ = ["SpillingStore"]


def _write_all(fd: int, data: memoryview, offset: int) -> None:
    while data:
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


class SpillingStore(InputStore):
    """An :class:`InputStore` that keeps at most ``ram_bytes`` of hidden states in memory (see the module doc)."""

    def __init__(self, items: list[BlockInputs], folder: Path, ram_bytes: int,
                 device: str | torch.device = "cpu") -> None:
        super().__init__(items)
        self.folder, self.device = Path(folder), torch.device(device)
        self.folder.mkdir(parents=True, exist_ok=True)
        first = items[0].args[0]
        self.dtype = first.dtype
        self.shapes = [tuple(item.args[0].shape) for item in items]
        self.sizes = [int(torch.Size(s).numel()) * first.element_size() for s in self.shapes]
        self.offsets = [sum(self.sizes[:i]) for i in range(len(items))]
        self.in_ram = sum(1 for total in itertools.accumulate(self.sizes) if total <= ram_bytes)  # the first that fit
        self.current = 0
        self._fds = [os.open(self._file(p), os.O_RDWR | os.O_CREAT, 0o644) for p in (0, 1)]
        self._device_kwargs: dict[int, dict] = {}
        for i in range(self.in_ram, len(items)):  # spill the rest now
            self._write(self.current, i, items[i].args[0])
            items[i].args[0] = None

    def _file(self, parity: int) -> Path:
        return self.folder / f"inputs-{parity}.bin"

    @property
    def ram_bytes(self) -> int:
        """Bytes of hidden states held in memory."""
        return sum(self.sizes[: self.in_ram])

    @property
    def disk_bytes(self) -> int:
        """Bytes of hidden states kept on disk (per file)."""
        return sum(self.sizes[self.in_ram :])

    def _write(self, parity: int, index: int, hidden: torch.Tensor) -> None:
        data = hidden.detach().to("cpu", self.dtype).contiguous().view(-1).view(torch.uint8).numpy()
        _write_all(self._fds[parity], memoryview(data), self.offsets[index])

    def _read(self, parity: int, index: int) -> torch.Tensor:
        buffer = bytearray(self.sizes[index])
        view, offset = memoryview(buffer), self.offsets[index]
        while view:
            got = os.preadv(self._fds[parity], [view], offset)
            if got <= 0:
                raise OSError(f"{self._file(parity)} ends early: the calibration checkpoint is truncated.")
            view, offset = view[got:], offset + got
        return torch.frombuffer(buffer, dtype=self.dtype).view(self.shapes[index])

    def get(self, index: int) -> BlockInputs:  # noqa: D102
        item = self.items[index]
        hidden = item.args[0] if index < self.in_ram else self._read(self.current, index)
        if self.device.type == "cpu":
            return BlockInputs([hidden, *item.args[1:]], item.kwargs)
        if index not in self._device_kwargs:
            self._device_kwargs[index] = move_inputs(item.kwargs, self.device)
        return BlockInputs([hidden.to(self.device), *move_inputs(item.args[1:], self.device)],
                           self._device_kwargs[index])

    def put(self, index: int, hidden: torch.Tensor) -> None:  # noqa: D102
        if index < self.in_ram:
            self.items[index].args[0] = hidden.to("cpu")
        else:
            self._write(1 - self.current, index, hidden)

    def commit(self) -> int:
        """After a block advanced the inputs: write the in-memory ones beside the spilled ones, flush, switch files.

        Returns the parity of the file that now holds the next block's inputs completely.
        """
        target = 1 - self.current
        for i in range(self.in_ram):
            self._write(target, i, self.items[i].args[0])
        os.fsync(self._fds[target])
        self.current = target
        return target

    def restore(self, parity: int) -> None:
        """Take every hidden state from file ``parity`` (written by :meth:`commit` in an earlier run)."""
        self.current = parity
        for i in range(self.in_ram):
            self.items[i].args[0] = self._read(parity, i)

    def close(self) -> None:
        """Close the files (they stay on disk until the run's staging folder is removed)."""
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []
