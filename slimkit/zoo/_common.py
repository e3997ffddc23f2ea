"""Shared plumbing for zoo entries: the cache directory, optional packages, seeding."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from slimkit.errors import ConfigError, MissingPackageError

CACHE_ENV = "SLIMKIT_CACHE"


def cache_dir() -> Path:
    """Root of slimkit's on-disk cache: ``$SLIMKIT_CACHE`` when set, else ``~/.cache/slimkit``."""
    root = os.environ.get(CACHE_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "slimkit"


def zoo_cache_path(entry: str) -> Path:
    """Folder where the zoo keeps derived artefacts (converted or trained weights) of one entry."""
    return cache_dir() / "zoo" / entry


def require(module: str, install: str, purpose: str) -> Any:
    """Import ``module`` or raise MissingPackageError naming the ``install`` command."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        found = False
    if not found:
        raise MissingPackageError(
            f"{purpose} needs the Python package '{module}', which is not installed. Install it with: {install}"
        )
    return importlib.import_module(module)


def package_folder(module: str, install: str, purpose: str) -> Path:
    """Folder of an installed package found WITHOUT importing it (some model packages have heavy imports)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError(
            f"{purpose} needs the Python package '{module}', which is not installed. Install it with: {install}"
        )
    return Path(list(spec.submodule_search_locations)[0])


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run a block with torch's CPU RNG seeded to ``seed``, leaving the caller's RNG state untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def check_divisible(entry: str, arch: dict[str, Any], numerator: str, denominator: str) -> None:
    """Raise ConfigError unless ``arch[numerator]`` is a multiple of ``arch[denominator]``."""
    if arch[numerator] % arch[denominator]:
        raise ConfigError(
            f"zoo model {entry!r}: {numerator}={arch[numerator]} is not a multiple of "
            f"{denominator}={arch[denominator]}; pick values where {denominator} divides {numerator}."
        )
