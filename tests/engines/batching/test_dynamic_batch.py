"""Dynamic batching: concurrent callers share forwards, get their own rows back, and only their own errors."""

from __future__ import annotations

import copy
import threading
import time

import pytest
import torch

from slimkit import zoo
from slimkit.engines.batching import DynamicBatcher, QueueFullError, attach_dynamic_batcher
from slimkit.engines.batching.padding import length_groups


def _threads(fn, n):
    barrier, out, errors = threading.Barrier(n), [None] * n, [None] * n

    def go(i):
        barrier.wait()
        try:
            out[i] = fn(i)
        except Exception as exc:  # noqa: BLE001 - the test inspects what each caller got
            errors[i] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out, errors


class Picky(torch.nn.Module):
    """A linear layer that refuses negative inputs and can be held at a gate."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.gate = threading.Event()
        self.gate.set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.gate.wait(timeout=30)
        if (x < 0).any():
            raise ValueError("negative input")
        return self.lin(x)


def test_sixteen_callers_of_different_lengths_get_their_own_hidden_states():
    encoder = zoo.load("tiny_bert").model.bert.eval()
    model = attach_dynamic_batcher(copy.deepcopy(encoder), max_batch_size=64, max_wait_ms=300, max_queue=64)
    g = torch.Generator().manual_seed(1)
    calls = []
    for i in range(16):
        ids = torch.randint(1, 250, (1 + i % 2, 3 + i), generator=g)
        calls.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})

    def run(i):
        with torch.no_grad():
            return model(**calls[i]).last_hidden_state

    out, errors = _threads(run, 16)
    assert errors == [None] * 16
    with torch.no_grad():
        for call, got in zip(calls, out, strict=True):
            alone = encoder(**call).last_hidden_state
            assert got.shape == alone.shape
            torch.testing.assert_close(got, alone, atol=1e-5, rtol=1e-4)
    stats = model.dynamic_batcher.stats()
    assert stats["requests"] == 16 and stats["rows"] == 24 and stats["batches"] < 16
    assert max(stats["batch_sizes"]) > 1


def test_batches_respect_max_batch_size():
    model = attach_dynamic_batcher(Picky().eval(), max_batch_size=4, max_wait_ms=100, max_queue=100)
    xs = [torch.rand(1, 4) for _ in range(20)]
    out, errors = _threads(lambda i: model(xs[i]), 20)
    assert errors == [None] * 20
    for x, y in zip(xs, out, strict=True):
        torch.testing.assert_close(y, model.lin(x))
    stats = model.dynamic_batcher.stats()
    assert stats["rows"] == 20 and max(stats["batch_sizes"]) <= 4 and stats["batches"] >= 5


def test_an_error_reaches_only_its_caller():
    model = attach_dynamic_batcher(Picky().eval(), max_batch_size=16, max_wait_ms=300, max_queue=100)
    xs = [torch.rand(1, 4) for _ in range(8)]
    xs[5] = -xs[5]
    out, errors = _threads(lambda i: model(xs[i]), 8)
    assert isinstance(errors[5], ValueError) and "negative input" in str(errors[5])
    assert [e is None for i, e in enumerate(errors) if i != 5] == [True] * 7
    for i, (x, y) in enumerate(zip(xs, out, strict=True)):
        if i != 5:
            torch.testing.assert_close(y, model.lin(x))
    assert model.dynamic_batcher.stats()["failed"] == 1


def test_a_full_queue_refuses_with_a_clear_error():
    picky = Picky().eval()
    model = attach_dynamic_batcher(picky, max_batch_size=1, max_wait_ms=0, max_queue=2)
    batcher = model.dynamic_batcher
    picky.gate.clear()  # the first request blocks inside forward, the next two wait in the queue
    out = [None] * 3
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, model(torch.ones(1, 4) * i))) for i in range(3)]
    threads[0].start()
    while batcher.stats()["batches"] < 1:
        time.sleep(0.005)
    for t in threads[1:]:
        t.start()
    while batcher.stats()["queued"] < 2:
        time.sleep(0.005)
    with pytest.raises(QueueFullError, match=r"queue is full \(2 requests waiting\).*dynamic_batch_max_queue"):
        model(torch.ones(1, 4))
    picky.gate.set()
    for t in threads:
        t.join(timeout=30)
    assert all(o is not None for o in out) and batcher.stats()["refused"] == 1


def test_grad_mode_training_mode_and_copies():
    model = attach_dynamic_batcher(torch.nn.Linear(4, 3).eval(), max_batch_size=8, max_wait_ms=0, max_queue=8)
    x = torch.rand(2, 4)
    assert model(x).requires_grad
    with torch.no_grad():
        assert not model(x).requires_grad
    model.train()
    model(x)
    assert model.dynamic_batcher.stats()["bypassed"] == 1
    twin = copy.deepcopy(model)
    assert twin.dynamic_batcher is not model.dynamic_batcher and twin.forward.module is twin
    assert twin.dynamic_batcher.stats()["requests"] == 0
    with pytest.raises(ValueError, match="max_batch_size >= 1"):
        DynamicBatcher(0, 1.0, 1)


def test_a_cache_stays_in_front_of_the_batcher():
    from slimkit.engines.caching import attach_embedding_cache

    encoder = zoo.load("tiny_bert").model.eval()
    model = attach_dynamic_batcher(attach_embedding_cache(copy.deepcopy(encoder), 8), 8, 0.0, 8)
    x = {"input_ids": torch.tensor([[5, 6, 7]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    with torch.no_grad():
        first, second = model(**x).logits, model(**x).logits
    assert torch.equal(first, second)
    assert model.dynamic_batcher.stats()["requests"] == 1 and model.embedding_cache.stats()["hits"] == 1
    twin = copy.deepcopy(model)
    assert twin.forward.handler is twin.embedding_cache and twin.forward.inner.handler is twin.dynamic_batcher
    assert twin.forward.inner.module is twin


def test_lengths_far_apart_run_as_forwards_of_similar_length():
    def call(length, rows=1):
        ids = torch.ones(rows, length, dtype=torch.long)
        return (), {"input_ids": ids, "attention_mask": ids}

    calls = [call(40), call(10), call(12), call(11, rows=2), call(38)]
    rows = [1, 1, 1, 2, 1]
    # shortest first; a call joins a group while padding stays within max_padding of its real tokens
    assert length_groups(calls, rows, max_padding=0.25) == [[1, 3, 2], [4, 0]]
    assert length_groups(calls, rows, max_padding=100.0) == [[1, 3, 2, 4, 0]]
    assert length_groups(calls, rows, max_padding=0.0) == [[1], [3], [2], [4], [0]]
    assert length_groups([call(7), call(7)], [1, 1], max_padding=0.0) == [[0, 1]]

    encoder = zoo.load("tiny_bert").model.bert.eval()
    model = attach_dynamic_batcher(copy.deepcopy(encoder), max_batch_size=64, max_wait_ms=300, max_queue=64)
    lengths = [4, 30, 5, 31, 4, 29]
    g = torch.Generator().manual_seed(2)
    inputs = [torch.randint(1, 250, (1, n), generator=g) for n in lengths]

    def run(i):
        with torch.no_grad():
            return model(input_ids=inputs[i], attention_mask=torch.ones_like(inputs[i])).last_hidden_state

    out, errors = _threads(run, len(lengths))
    assert errors == [None] * len(lengths)
    with torch.no_grad():
        for ids, got in zip(inputs, out, strict=True):
            torch.testing.assert_close(got, encoder(input_ids=ids).last_hidden_state, atol=1e-5, rtol=1e-4)
    stats = model.dynamic_batcher.stats()
    assert stats["batches"] == 1 and stats["forwards"] == 2  # one batch of 6, run as the short 3 and the long 3
