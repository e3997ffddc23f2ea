from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the session, so digits training / SmolLM2 conversion happen at most once."""
    return tmp_path_factory.mktemp("slimkit_cache_shared")


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every zoo test gets its own empty cache unless it asks for ``shared_cache``; ~/.cache is never touched."""
    path = tmp_path / "slimkit_cache"
    monkeypatch.setenv("SLIMKIT_CACHE", str(path))
    return path


@pytest.fixture
def shared_cache(session_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SLIMKIT_CACHE", str(session_cache))
    return session_cache
