"""Shared plumbing of the serving benchmarks: saved models, `slimkit serve` subprocesses, sentences, percentiles."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from slimkit import SmashConfig, smash, zoo
from slimkit.data.builtin import load_pydoc_text_splits

ROOT = Path(__file__).resolve().parent.parent


def pydoc_sentences(n: int, min_chars: int = 30, max_chars: int = 200) -> list[str]:
    """``n`` distinct single sentences of PyDocText (test split first; real English prose, offline)."""
    train, val, test = load_pydoc_text_splits()
    seen: dict[str, None] = {}
    for item in [*test, *val, *train]:
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(item["text"].split())):
            if min_chars <= len(sentence) <= max_chars and sentence[0].isupper():
                seen.setdefault(sentence)
                if len(seen) == n:
                    return list(seen)
    raise ValueError(f"PyDocText has only {len(seen)} such sentences; asked for {n}.")


def save_minilm(folder: Path, recipe: dict) -> Path:
    """Smash the zoo MiniLM with ``recipe`` (may be empty) and save it with its tokenizer to ``folder``."""
    loaded = zoo.load("minilm")
    cfg = SmashConfig(recipe, device="cpu")
    cfg.add_tokenizer(loaded.tokenizer)
    smash(loaded.model.eval(), cfg, verbose=False).save_pretrained(folder)
    return folder


class Server:
    """`python -m slimkit serve FOLDER --port 0` in a subprocess; ``url`` once it listens and has loaded."""

    def __init__(self, folder: Path, extra: list[str] | None = None, timeout_s: float = 180) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE"}
        self.proc = subprocess.Popen([sys.executable, "-m", "slimkit", "serve", str(folder), "--port", "0",
                                      *(extra or [])], env=env, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        threading.Thread(target=lambda: self.log.extend(iter(self.proc.stderr.readline, "")), daemon=True).start()
        deadline, self.url = time.monotonic() + timeout_s, None
        while self.url is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"slimkit serve {folder} did not start:\n{''.join(self.log)}")
            found = re.search(r"running on (http://127\.0\.0\.1:\d+)", "".join(self.log))
            self.url = found.group(1) if found else None
            time.sleep(0.05)
        while httpx.get(f"{self.url}/health", timeout=30).status_code == 503:
            if time.monotonic() > deadline:
                raise RuntimeError(f"slimkit serve {folder} did not finish loading:\n{''.join(self.log)}")
            time.sleep(0.1)

    def cpu_seconds(self) -> float:
        """CPU time (user + system, all threads) the server process has used so far (Linux /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> int:
        """SIGTERM (in-flight requests finish), wait, return the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(p / 100 * len(ordered))) - 1))]
