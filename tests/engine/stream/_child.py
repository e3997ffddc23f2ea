"""A streaming run in a child process (``python -m tests.engine.stream._child FOLDER OUT ALGORITHM [PAUSE]``).

Prints one JSON line: the resident set before the run and the peak during it (the peak is reset first through
``/proc/self/clear_refs``), then the same for a second run into ``OUT-again`` (code loaded and caches warm: the
run's own working memory), so a test measures the runs alone in a fresh process, or kills the first mid-way.
``PAUSE`` seconds of sleep after each block's file is staged give a killing test time to strike mid-run on a
model whose blocks take milliseconds.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from slimkit.engine.stream import memory
from slimkit.formats.slimkit_writer import SlimkitWriter
from tests.engine.stream.conftest import stream


def _measured(folder: Path, out: Path, algorithm: str) -> dict[str, int]:
    memory.release()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current resident set
    except OSError:
        pass
    before = memory.rss_bytes()
    stream(folder, out, algorithm)
    return {"rss_before": before, "peak": memory.peak_rss_bytes()}


def main() -> None:
    folder, out, algorithm = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    pause = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    torch.set_num_threads(1)
    if pause:
        write = SlimkitWriter.write

        def slow_write(self, key, *args):
            write(self, key, *args)
            if key.startswith("block-"):
                time.sleep(pause)

        SlimkitWriter.write = slow_write
    first = _measured(folder, out, algorithm)
    again = _measured(folder, out.with_name(out.name + "-again"), algorithm)
    print(json.dumps({"first": first, "again": again}), flush=True)


if __name__ == "__main__":
    main()
