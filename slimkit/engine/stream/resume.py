"""The record of a streaming run in its staging folder: what it is for, and how far it got (``run.json``).

A run writes into ``<output>.partial/``. ``run.json`` holds the run's fingerprint (the model files, the
SmashConfig, the dtypes, the output format, the calibration ids' digest) and its progress: the pieces written,
the number of finished blocks, the file holding the next block's calibration inputs, the specs recorded so far.
It is replaced atomically after each block's files are on disk, so a run killed at any moment restarts from the
last finished block. A staging folder whose fingerprint differs (another model, config or format) is refused:
outputs of two runs are never mixed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slimkit.core.io import write_json_atomic
from slimkit.errors import ConfigError

__all__ = ["RunRecord", "describe_difference"]

RUN_FILE = "run.json"
VERSION = 1


def describe_difference(old: dict[str, Any], new: dict[str, Any], path: str = "") -> list[str]:
    """Human-readable differences between two fingerprints (nested dicts), e.g. ``config.hyperparameters...``."""
    out: list[str] = []
    for key in sorted(set(old) | set(new), key=str):
        where = f"{path}.{key}" if path else str(key)
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(describe_difference(a, b, where))
        elif a != b:
            out.append(f"{where}: {json.dumps(a)[:60]} -> {json.dumps(b)[:60]}")
    return out


@dataclass
class RunRecord:
    """Progress of one streaming run (saved as ``run.json`` in the staging folder)."""

    fingerprint: dict[str, Any]
    pieces: list[str] = field(default_factory=list)
    blocks_done: int = 0
    inputs_parity: int | None = None
    specs: dict[str, Any] = field(default_factory=dict)
    version: int = VERSION

    @classmethod
    def open(cls, stage: Path, fingerprint: dict[str, Any]) -> tuple[RunRecord, bool]:
        """The record in ``stage`` (resumed: True) or a new one; refuses a staging folder of another run."""
        file = stage / RUN_FILE
        if not file.is_file():
            if stage.exists() and any(stage.iterdir()):
                raise ConfigError(f"{stage} exists and is not the staging folder of a slimkit streaming run (no "
                                  f"{RUN_FILE}); move it away or choose another output.")
            return cls(fingerprint), False
        try:
            saved = json.loads(file.read_text())
            record = cls(**saved)
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigError(f"{file} is unreadable ({exc}); delete {stage} to start the run over.") from exc
        if record.version != VERSION or record.fingerprint != fingerprint:
            changes = describe_difference(record.fingerprint, fingerprint)
            raise ConfigError(
                f"{stage} holds an unfinished run of another model or configuration, which this one would mix "
                f"with. It differs in: {'; '.join(changes[:6]) or 'its record version'}. Run the same command "
                f"as before to finish it, choose another --output, or delete {stage} to start over.")
        return record, True

    def save(self, stage: Path) -> None:
        """Replace ``run.json`` atomically."""
        write_json_atomic(stage / RUN_FILE, asdict(self))
