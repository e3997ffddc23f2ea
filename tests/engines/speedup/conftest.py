"""Speedup tests run many tiny forwards: one intra-op thread avoids OpenMP spin-waiting on busy shared cores."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
