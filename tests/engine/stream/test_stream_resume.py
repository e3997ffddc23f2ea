"""A streaming run killed at any moment continues from its last finished block and writes the same bytes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slimkit.formats.slimkit_writer import SlimkitWriter
from tests.engine.stream.conftest import stream, write_folder

ROOT = Path(__file__).resolve().parents[3]


def _child(folder: Path, out: Path, algorithm: str, pause: float = 0.0) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "tests.engine.stream._child", str(folder), str(out), algorithm,
                             str(pause)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill_after(child: subprocess.Popen, out: Path, blocks: int) -> int:
    """SIGKILL ``child`` once ``blocks`` blocks are recorded finished; returns the blocks its record then shows."""
    deadline = time.monotonic() + 600
    while _blocks_done(out) < blocks and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert child.poll() is None, f"the child ended before block {blocks}: {child.communicate()[1][-2000:]}"
    child.send_signal(signal.SIGKILL)
    child.wait()
    done = _blocks_done(out)
    assert done >= blocks and not (out / "model.safetensors").exists()
    return done


def _blocks_done(out: Path) -> int:
    try:
        return json.loads((out.parent / f"{out.name}.partial" / "run.json").read_text())["blocks_done"]
    except (OSError, ValueError, KeyError):
        return -1


@pytest.mark.slow  # a fresh process (imports) and two GPTQ runs of the 20M-parameter Llama
def test_sigkill_at_a_random_block_then_the_same_call_resumes_to_identical_files(llama_folder, gptq_streamed,
                                                                                tmp_path):
    out = tmp_path / "out"
    kill_at = random.randrange(1, 8)
    done = _kill_after(_child(llama_folder, out, "gptq"), out, kill_at)
    result = stream(llama_folder, out, "gptq")
    assert result.resumed_at == done, f"killed after block {kill_at}"
    assert (out / "model.safetensors").read_bytes() == (gptq_streamed / "model.safetensors").read_bytes()


@pytest.fixture(scope="module")
def small_gptq_streamed(byte_llama_folder, tmp_path_factory) -> Path:
    """The 3-block Llama streamed through GPTQ without interruption: what the crashed runs must end up equal to."""
    out = tmp_path_factory.mktemp("small_gptq") / "out"
    stream(byte_llama_folder, out, "gptq")
    return out


@pytest.mark.slow  # a fresh process killed mid-run (~6 s)
def test_sigkill_of_a_fresh_process_mid_run_then_the_same_call_resumes_to_identical_files(byte_llama_folder,
                                                                                        small_gptq_streamed, tmp_path):
    """The fast variant: the 3-block Llama through GPTQ in a child process, killed with SIGKILL after a random block.

    The child sleeps 0.3 s after staging each block, so the kill lands mid-run (in that block's pause, or in the
    next block's work); the 20M-parameter run above kills real work at any moment.
    """
    out = tmp_path / "out"
    kill_at = random.randrange(1, 3)
    done = _kill_after(_child(byte_llama_folder, out, "gptq", pause=0.3), out, kill_at)
    result = stream(byte_llama_folder, out, "gptq")
    assert result.resumed_at == done < 3, f"killed after block {kill_at}"
    assert (out / "model.safetensors").read_bytes() == (small_gptq_streamed / "model.safetensors").read_bytes()


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_around_a_block_write_resumes_to_identical_files(byte_llama_folder, small_gptq_streamed, tmp_path,
                                                                 monkeypatch, when):
    """The process dies just before a block's file is staged, or after it but before the run record says so."""
    out, crash_at = tmp_path / "out", f"block-{random.randrange(1, 3):05d}"
    original = SlimkitWriter.write

    class Crash(BaseException):
        pass

    def write(self, key, *args):
        if key == crash_at and when == "before":
            raise Crash
        original(self, key, *args)
        if key == crash_at:
            raise Crash

    monkeypatch.setattr(SlimkitWriter, "write", write)
    with pytest.raises(Crash):
        stream(byte_llama_folder, out, "gptq")
    monkeypatch.setattr(SlimkitWriter, "write", original)
    result = stream(byte_llama_folder, out, "gptq")
    assert result.resumed_at == int(crash_at.split("-")[1])
    assert (out / "model.safetensors").read_bytes() == (small_gptq_streamed / "model.safetensors").read_bytes()
    card = (out / "README.md").read_text()  # the blocks packed before the crash are counted too
    assert "21 layer(s): 4-bit, groups of 64, asymmetric" in card and "kept in float: lm_head\n" in card


def test_another_config_on_an_unfinished_run_is_refused(llama_folder, tmp_path, monkeypatch):
    out = tmp_path / "out"

    def crash(self, key, *args):
        raise KeyboardInterrupt

    monkeypatch.setattr(SlimkitWriter, "write", crash)
    with pytest.raises(KeyboardInterrupt):
        stream(llama_folder, out, "rtn")
    monkeypatch.undo()
    with pytest.raises(Exception, match=r"unfinished run of another model or configuration.*hyperparameters") as info:
        stream(llama_folder, out, "hqq")
    assert "out.partial" in str(info.value)


@pytest.mark.slow  # a fresh-process memory run (~9 s)
def test_peak_memory_of_a_fresh_process_stays_far_under_the_model(tmp_path):  # ~7 s: a 239 MB model, a fresh process
    """16 blocks of 12.6 MB (float32), 239 MB in all: streaming holds one block (or one piece) at a time.

    The first run in a fresh process also loads code (transformers' Llama, kernels): it stays under the model's
    size; a second run measures the working memory alone, which stays under a quarter of it.
    """
    folder = write_folder(tmp_path / "model", shards=4, num_hidden_layers=16, hidden_size=512, intermediate_size=1408,
                          num_attention_heads=8, num_key_value_heads=8)
    child = _child(folder, tmp_path / "out", "rtn")
    stdout, stderr = child.communicate(timeout=900)
    assert child.returncode == 0, stderr[-3000:]
    figures = json.loads(stdout.strip().splitlines()[-1])
    model_bytes = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    first = figures["first"]["peak"] - figures["first"]["rss_before"]
    again = figures["again"]["peak"] - figures["again"]["rss_before"]
    shown = f"grew {first / 1e6:.1f} MB, then {again / 1e6:.1f} MB; the model is {model_bytes / 1e6:.1f} MB"
    assert first < model_bytes, shown
    assert again < model_bytes / 4, shown
