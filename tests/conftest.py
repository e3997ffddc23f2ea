"""Suite-wide setup: no network, offline Hugging Face, CUDA tests skipped at collection when there is no GPU."""

from __future__ import annotations

import ipaddress
import os
import socket

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


class NetworkCallError(RuntimeError):
    """Raised when a test tries to reach a non-local address."""


def _is_local(address: object) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return True
    host = address[0] if isinstance(address, tuple) and address else ""
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded_connect(self: socket.socket, address: object) -> None:
    if not _is_local(address):
        raise NetworkCallError(f"Test tried to open a network connection to {address!r}; slimkit must work offline.")
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: object) -> int:
    if not _is_local(address):
        raise NetworkCallError(f"Test tried to open a network connection to {address!r}; slimkit must work offline.")
    return _real_connect_ex(self, address)


socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]

# One intra-op thread: tests check behaviour, not speed, and two threads on a busy 2-core box oversubscribe.
torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip CUDA-marked tests when no GPU is present (decided at collection, reported as skipped)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


_deselected: dict[str, list[str]] = {"llamacpp": [], "slow": []}
_HOW = {"llamacpp": "they need llama-cpp-python, a ~15 min source build): run `make test-llamacpp`",
        "slow": "examples and end-to-end runs of 10 s to 2 min each, ~30 min together): run `make test-all`"}


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Remember the llama.cpp and slow tests a ``-m "not ..."`` run left out, to say so at the end."""
    for marker, ids in _deselected.items():
        ids.extend(item.nodeid for item in items if marker in item.keywords)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per marker whose tests were deselected: how many, and how to run them."""
    expression = terminalreporter.config.option.markexpr or ""
    for marker, ids in _deselected.items():
        if ids and f"not {marker}" in expression:
            terminalreporter.write_line(f"note: {len(ids)} {marker} tests deselected (marker {marker}; {_HOW[marker]}.")
