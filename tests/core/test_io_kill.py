"""Nothing is lost on a kill: a writer SIGKILLed at random moments while it overwrites a save leaves the old
save or the new one, complete, and it loads. Covers save_pretrained (with the atomic exchange and with the
two-rename fallback), the zoo cache, and single files written with write_json_atomic.

Each writer is a forked child looping over overwriting writes (A, B, A, ...); the parent kills it after a random
delay, then checks the target byte for byte against the two references. ``SLIMKIT_KILLS`` sets the kills per
test (default 50; the slow test runs 10x).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from slimkit import SmashConfig, SmashedModel, smash
from slimkit.core import io

KILLS = int(os.environ.get("SLIMKIT_KILLS", "50"))


class Wide(torch.nn.Module):
    """~1 MiB of weights, so a save spends real time writing and a random kill lands inside it."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc1, self.fc2 = torch.nn.Linear(256, 512), torch.nn.Linear(512, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def _snapshot(folder: Path) -> dict[str, object]:
    """Every file of a save: JSON parsed (without the weights checksum), safetensors as tensors, others as bytes.

    safetensors writes its metadata from a hash map, so two saves of one model differ in header byte order.
    """
    out: dict[str, object] = {}
    for p in sorted(folder.rglob("*")):
        if not p.is_file():
            continue
        name = p.relative_to(folder).as_posix()
        if p.suffix == ".json":
            payload = json.loads(p.read_text())
            payload.pop("weights_sha256", None)
            out[name] = payload
        elif p.suffix == ".safetensors":
            out[name] = {k: v.numpy().tobytes() for k, v in load_file(p).items()}
        else:
            out[name] = p.read_bytes()
    return out


def _kill_during(write: Callable[[str], None], check: Callable[[], str], kills: int, seed: int,
                 period: float) -> dict[str, int]:
    """Fork a child overwriting the target in a loop; SIGKILL it after a random delay in [0, 2 * period].

    The child writes the content the target does not hold first (``write("new")`` over "old" and vice versa),
    then alternates. ``check()`` returns what the target holds after the kill; the counts are returned.
    """
    rng = random.Random(seed)
    seen: dict[str, int] = {}
    current = "old"
    for _ in range(kills):
        order = ("new", "old") if current == "old" else ("old", "new")
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: announce, then overwrite forever
            try:
                os.close(ready_r)
                os.write(ready_w, b"1")
                i = 0
                while True:
                    write(order[i % 2])
                    i += 1
            finally:
                os._exit(0)
        os.close(ready_w)
        os.read(ready_r, 1)
        os.close(ready_r)
        time.sleep(rng.uniform(0, 2 * period))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, "the writer ended before the kill"
        current = check()
        seen[current] = seen.get(current, 0) + 1
    print(f"{kills} kills survived: {seen}")  # shown with -s; the figure docs/reliability.md records
    return seen


@pytest.fixture(scope="module")
def two_saves(tmp_path_factory):
    """Two smashed models with different weights and configs, and their saves as byte references."""
    root = tmp_path_factory.mktemp("refs")
    models = {}
    for name, seed, sparsity in (("old", 0, 0.25), ("new", 1, 0.5)):
        smashed = smash(Wide(seed), SmashConfig({"level": {"sparsity": sparsity}}, device="cpu"), verbose=False)
        smashed.save_pretrained(root / name)
        models[name] = smashed
    return models, {name: _snapshot(root / name) for name in models}


def _save_check(target: Path, refs: dict[str, dict[str, object]], x: torch.Tensor,
                outputs: dict[str, torch.Tensor]) -> Callable[[], str]:
    def check() -> str:
        if not target.exists():  # killed between the fallback's two renames: the load must restore the old one
            print("  (killed mid-swap: the folder was restored from its moved-aside copy)")
        loaded = SmashedModel.from_pretrained(target, model=Wide(7))  # recovers a moved-aside folder first
        files = _snapshot(target)
        match = [name for name, ref in refs.items() if files == ref]
        assert len(match) == 1, f"the directory is neither the old nor the new save: {sorted(files)}"
        with torch.no_grad():
            assert torch.equal(loaded(x), outputs[match[0]])
        return match[0]

    return check


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2-exchange", "two-rename-fallback"])
def test_killed_save_pretrained_leaves_old_or_new(two_saves, tmp_path, monkeypatch, exchange):
    models, refs = two_saves
    if not exchange:  # non-Linux path: move the old folder aside, move the new one in, recover on the next load
        monkeypatch.setattr(io, "_exchange", lambda a, b: False)
    target = tmp_path / "m"
    models["old"].save_pretrained(target)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        outputs = {name: m(x) for name, m in models.items()}
    start = time.perf_counter()
    models["new"].save_pretrained(target)
    models["old"].save_pretrained(target)
    period = (time.perf_counter() - start) / 2
    seen = _kill_during(lambda name: models[name].save_pretrained(target),
                        _save_check(target, refs, x, outputs), KILLS, seed=int(exchange), period=period)
    assert sum(seen.values()) == KILLS and set(seen) <= {"old", "new"}
    models["new"].save_pretrained(target)  # the next write removes what killed writers left beside the folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_kill_inside_the_fallback_window_is_recovered(two_saves, tmp_path, monkeypatch):
    """The fallback's window (old folder moved aside, new not yet in) is microseconds wide, so random kills rarely
    land in it: here the writer kills itself exactly there, and the next load must bring back the old save."""
    models, refs = two_saves
    monkeypatch.setattr(io, "_exchange", lambda a, b: False)
    target = tmp_path / "m"
    models["old"].save_pretrained(target)
    real_replace = os.replace

    def replace_then_die(src, dst):
        real_replace(src, dst)
        if Path(dst).name == "old":
            os.kill(os.getpid(), signal.SIGKILL)

    pid = os.fork()
    if pid == 0:
        try:
            io.os.replace = replace_then_die
            models["new"].save_pretrained(target)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and not target.exists()
    x = torch.randn(3, 256)
    with torch.no_grad():
        outputs = {name: m(x) for name, m in models.items()}
    assert _save_check(target, refs, x, outputs)() == "old"
    models["new"].save_pretrained(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


@pytest.mark.slow
def test_killed_save_pretrained_500_times(two_saves, tmp_path):
    models, refs = two_saves
    target = tmp_path / "m"
    x = torch.randn(3, 256)
    with torch.no_grad():
        outputs = {name: m(x) for name, m in models.items()}
    start = time.perf_counter()
    models["new"].save_pretrained(target)
    models["old"].save_pretrained(target)
    period = (time.perf_counter() - start) / 2
    seen = _kill_during(lambda name: models[name].save_pretrained(target),
                        _save_check(target, refs, x, outputs), 10 * KILLS, seed=7, period=period)
    assert set(seen) <= {"old", "new"} and sum(seen.values()) == 10 * KILLS


def test_killed_zoo_cache_write_leaves_a_readable_cache(tmp_path, monkeypatch):
    from slimkit.zoo import digits_cnn

    monkeypatch.setenv("SLIMKIT_CACHE", str(tmp_path))
    models = {}
    for name, seed in (("old", 0), ("new", 1)):
        torch.manual_seed(seed)
        models[name] = (digits_cnn.DigitsCNN(), {"version": name})
    digits_cnn._write_cache(*models["old"])
    expected = {name: m.state_dict() for name, (m, _) in models.items()}

    def check() -> str:
        io.recover_directory(digits_cnn.zoo_cache_path(digits_cnn._CACHE_NAME))
        cached = digits_cnn._read_cache()
        assert cached is not None, "the zoo cache was left unreadable"
        model, meta = cached
        state = model.state_dict()
        assert all(torch.equal(state[k], v) for k, v in expected[meta["version"]].items())
        return meta["version"]

    seen = _kill_during(lambda name: digits_cnn._write_cache(*models[name]), check, max(10, KILLS // 3),
                        seed=3, period=0.01)
    assert set(seen) <= {"old", "new"}


def test_killed_json_write_leaves_old_or_new(tmp_path):
    target = tmp_path / "results.json"
    payloads = {name: {"name": name, "rows": list(range(20000 if name == "new" else 10000))} for name in ("old", "new")}
    io.write_json_atomic(target, payloads["old"])

    def check() -> str:
        payload = json.loads(target.read_text())
        assert payload in payloads.values()
        return payload["name"]

    seen = _kill_during(lambda name: io.write_json_atomic(target, payloads[name]), check,
                        max(10, KILLS // 3), seed=5, period=0.01)
    assert set(seen) <= {"old", "new"}
