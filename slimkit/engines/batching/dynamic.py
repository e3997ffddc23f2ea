"""Dynamic micro-batching: concurrent callers' forward calls are grouped into one batched forward.

Each call waits at most ``max_wait_ms`` for others with the same signature (the same argument names, dtypes and
shapes apart from the batch and, for token inputs with an attention mask, the sequence length). Token inputs of
different lengths are right-padded (mask 0) and every caller gets its own rows back, cut to its own length. A
batch whose lengths differ widely runs as a few forwards of similar lengths, so padding adds at most
``max_padding`` times the real tokens (padding is compute spent on nothing: on CPU it can cost more than batching
saves). With ``pack`` ("auto" or "on") a sentence encoder runs its batch padding-free instead: the sentences
packed into one sequence per ``max_pack_tokens`` (:mod:`slimkit.engines.batching.packing`).
"""

from __future__ import annotations

import atexit
import functools
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

import torch

from slimkit.engines._patch import patch_beneath_caches
from slimkit.engines.batching.packing import PACK_MODES, Packer, is_own_forward, pack_reason
from slimkit.engines.batching.padding import call_signature, collate, length_groups, uncollate
from slimkit.engines.rows import batch_size_of
from slimkit.errors import ModelNotSupportedError, QueueFullError

#: Batchers with a worker thread, stopped at interpreter exit so no worker dies inside a torch call.
_LIVE: weakref.WeakSet[DynamicBatcher] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for batcher in list(_LIVE):
        batcher.close()


class _Request:
    __slots__ = ("args", "kwargs", "rows", "signature", "done", "result", "error")

    def __init__(self, args: tuple, kwargs: dict, rows: int, signature: tuple) -> None:
        self.args, self.kwargs, self.rows, self.signature = args, kwargs, rows, signature
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class DynamicBatcher:
    """Groups concurrent forward calls into batches of up to ``max_batch_size`` rows (installed as a forward wrapper).

    A worker thread (started on demand, gone after ``idle_s`` without work) runs the batches. An exception in a
    batched forward is narrowed down by running that batch's requests one by one, so only the failing caller sees
    it. Calls in training mode, or whose tensors do not share a batch dimension, run directly (``bypassed``).
    """

    def __init__(self, max_batch_size: int, max_wait_ms: float, max_queue: int, pad_token_id: int = 0,
                 idle_s: float = 2.0, max_padding: float = 0.25, pack: str = "off", max_pack_tokens: int = 512) -> None:
        if max_batch_size < 1 or max_queue < 1 or max_wait_ms < 0 or max_pack_tokens < 1 or pack not in PACK_MODES:
            raise ValueError(f"need max_batch_size >= 1, max_queue >= 1, max_wait_ms >= 0, max_pack_tokens >= 1 and "
                             f"pack in {PACK_MODES}; got {max_batch_size}, {max_queue}, {max_wait_ms}, "
                             f"{max_pack_tokens} and {pack!r}.")
        self.max_batch_size, self.max_wait_ms, self.max_queue = max_batch_size, max_wait_ms, max_queue
        self.pad_token_id, self.idle_s, self.max_padding = pad_token_id, idle_s, max_padding
        self.pack, self.max_pack_tokens = pack, max_pack_tokens
        self._packer: tuple[torch.nn.Module, Packer | None] | None = None  # (model, its packer or None)
        self._queue: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self._run: tuple[torch.nn.Module, Callable[..., Any]] | None = None
        self._closing = False
        self.requests = self.batches = self.forwards = self.rows = self.bypassed = self.refused = self.failed = 0
        self.packed = 0  # forwards that ran packed
        #: number of requests in a batch -> how many batches had that many
        self.batch_sizes: Counter[int] = Counter()

    def __deepcopy__(self, memo: dict) -> DynamicBatcher:
        """A copy has the same settings, its own queue and worker."""
        return DynamicBatcher(self.max_batch_size, self.max_wait_ms, self.max_queue, self.pad_token_id, self.idle_s,
                              self.max_padding, self.pack, self.max_pack_tokens)

    def stats(self) -> dict[str, Any]:
        """Counters as a JSON-able dict (requests, batches, rows, mean batch size, batch-size histogram...)."""
        with self._cond:
            return {"requests": self.requests, "batches": self.batches, "forwards": self.forwards, "rows": self.rows,
                    "packed_forwards": self.packed, "pack": self.pack, "bypassed": self.bypassed,
                    "refused": self.refused, "failed": self.failed, "queued": len(self._queue),
                    "mean_batch_size": self.requests / self.batches if self.batches else 0.0,
                    "batch_sizes": dict(sorted(self.batch_sizes.items())), "max_batch_size": self.max_batch_size,
                    "max_wait_ms": self.max_wait_ms, "max_queue": self.max_queue}

    def close(self, timeout: float = 5.0) -> None:
        """Let the worker finish the queued requests and stop (a later call starts a new one)."""
        with self._cond:
            self._closing = True
            worker = self._worker
            self._cond.notify_all()
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)
        with self._cond:
            self._closing = False

    def __call__(self, module: torch.nn.Module, inner: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """Queue the call, wait for its batch to run and return this caller's part of the output."""
        rows = batch_size_of(args, kwargs)
        if module.training or rows is None:
            with self._cond:
                self.bypassed += 1
            return inner(*args, **kwargs)
        request = _Request(args, kwargs, rows, call_signature(args, kwargs))
        with self._cond:
            if len(self._queue) >= self.max_queue:
                self.refused += 1
                raise QueueFullError(
                    f"dynamic_batch: the queue is full ({self.max_queue} requests waiting); the request was not run. "
                    "Retry later, or raise cfg['dynamic_batch_max_queue']."
                )
            self._queue.append(request)
            self.requests += 1
            self._run = (module, inner)
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="slimkit-dynamic-batch", daemon=True)
                self._worker.start()
                _LIVE.add(self)
            self._cond.notify_all()
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.result

    def _take_batch(self) -> list[_Request] | None:
        """Wait for a first request, then up to ``max_wait_ms`` for others of its signature (called with the lock)."""
        self._cond.wait_for(lambda: bool(self._queue) or self._closing, timeout=self.idle_s)
        if not self._queue:
            self._worker = None
            return None
        first = self._queue.popleft()
        batch, rows = [first], first.rows
        deadline = time.monotonic() + self.max_wait_ms / 1000
        while rows < self.max_batch_size:
            for request in list(self._queue):
                if request.signature == first.signature and rows + request.rows <= self.max_batch_size:
                    self._queue.remove(request)
                    batch.append(request)
                    rows += request.rows
            left = deadline - time.monotonic()
            if rows >= self.max_batch_size or left <= 0 or self._closing:
                break
            self._cond.wait(timeout=left)
        self.batches += 1
        self.rows += rows
        self.batch_sizes[len(batch)] += 1
        return batch

    def _work(self) -> None:
        while True:
            with self._cond:
                batch = self._take_batch()
                if batch is None:
                    return
                module, inner = self._run
            calls = [(r.args, r.kwargs) for r in batch]
            packer = self._packer_for(module, inner) if len(batch) > 1 else None
            segments = [packer.segments(*call) for call in calls] if packer is not None else [None]
            if all(s is not None for s in segments):
                self._run_batch(inner, batch, functools.partial(packer.run, segments))
                continue
            for group in length_groups(calls, [r.rows for r in batch], self.max_padding):
                self._run_batch(inner, [batch[i] for i in group])

    def _packer_for(self, module: torch.nn.Module, inner: Callable[..., Any]) -> Packer | None:
        """The packer for ``module`` when packing is on and the model (with its own forward) supports it."""
        if self.pack == "off" or not is_own_forward(module, inner):
            return None
        if self._packer is None or self._packer[0] is not module:
            self._packer = (module, None if pack_reason(module) else Packer(module, self.max_pack_tokens))
        return self._packer[1]

    def _run_batch(self, inner: Callable[..., Any], batch: list[_Request],
                   packed: Callable[[], list[Any]] | None = None) -> None:
        grad, inference = batch[0].signature[-2:]
        with self._cond:
            self.forwards += 1
        try:
            with torch.inference_mode(inference) if inference else torch.set_grad_enabled(grad):
                if len(batch) == 1:
                    batch[0].result = inner(*batch[0].args, **batch[0].kwargs)
                elif packed is not None:
                    for request, part in zip(batch, packed(), strict=True):
                        request.result = part
                    with self._cond:
                        self.packed += 1
                else:
                    args, kwargs, lengths = collate([(r.args, r.kwargs) for r in batch], self.pad_token_id)
                    output = inner(*args, **kwargs)
                    for request, part in zip(batch, uncollate(output, [r.rows for r in batch], lengths), strict=True):
                        request.result = part
        except Exception as exc:
            if len(batch) == 1:
                batch[0].error = exc
                with self._cond:
                    self.failed += 1
            else:  # find the culprit: run each request alone so only its caller sees its error
                for request in batch:
                    self._run_batch(inner, [request])
                return
        for request in batch:
            request.done.set()


def attach_dynamic_batcher(model: torch.nn.Module, max_batch_size: int, max_wait_ms: float, max_queue: int,
                           pad_token_id: int = 0, max_padding: float = 0.25, pack: str = "off",
                           max_pack_tokens: int = 512) -> torch.nn.Module:
    """Group concurrent calls to ``model`` into batches; the batcher is ``model.dynamic_batcher`` (stats()).

    ``pack="on"`` requires a model that packs (a ``ModelNotSupportedError`` saying why not otherwise); "auto" packs
    when it can and pads otherwise.

    The state dict is unchanged (the batcher wraps the instance's forward), so the weights save as the model's own.
    An embedding cache already on the model stays in front: hits return at once, only misses are batched.
    """
    if pack == "on" and (reason := pack_reason(model)) is not None:
        raise ModelNotSupportedError(f"dynamic_batch: pack='on' but this model cannot be packed: {reason}. Use "
                                     "pack='auto' (packs when it can, pads otherwise) or 'off'.")
    batcher = DynamicBatcher(max_batch_size, max_wait_ms, max_queue, pad_token_id, max_padding=max_padding, pack=pack,
                             max_pack_tokens=max_pack_tokens)
    return patch_beneath_caches(model, "dynamic_batcher", batcher)


__all__ = ["DynamicBatcher", "QueueFullError", "attach_dynamic_batcher"]
