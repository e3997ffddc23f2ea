"""`slimkit serve` as a user runs it: a subprocess on loopback, answered while it lives, stopped by SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import torch

from slimkit import SmashConfig, smash, zoo
from slimkit.cli import build_parser, main


def test_serve_command_answers_generate_and_stops_cleanly_on_sigterm(tmp_path):
    loaded = zoo.load("tiny_llama")
    cfg = SmashConfig({"prefix_cache": {}}, device="cpu")
    cfg.add_tokenizer(loaded.tokenizer)
    folder = tmp_path / "lm"
    smash(loaded.model.eval(), cfg, verbose=False).save_pretrained(folder)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-m", "slimkit", "serve", str(folder), "--port", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        deadline, url = time.monotonic() + 60, None
        while url is None:
            assert time.monotonic() < deadline and proc.poll() is None, "".join(log)
            found = re.search(r"running on (http://127\.0\.0\.1:\d+)", "".join(log))
            url = found.group(1) if found else None
            time.sleep(0.05)
        with httpx.Client(base_url=url, timeout=60) as client:
            while (health := client.get("/health")).status_code == 503:  # loading in the background
                assert health.headers["retry-after"] == "2" and time.monotonic() < deadline
                time.sleep(0.05)
            answer = client.post("/generate", json={"inputs": ["Hello"], "max_new_tokens": 4})
        ids = torch.tensor([loaded.tokenizer("Hello")["input_ids"]])
        expected = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                                         pad_token_id=0)[0, ids.shape[1]:].tolist()
        assert answer.status_code == 200 and answer.json()["tokens"] == [expected]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM  # uvicorn shuts down, then re-raises the signal
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=5)
    text = "".join(log)
    assert "Waiting for application shutdown" in text and "Finished server process" in text
    assert "Traceback" not in text
    assert "POST /generate" not in proc.stdout.read() + text  # no access log by default (it costs CPU per request)


def test_serve_command_refuses_a_folder_that_is_not_a_save(tmp_path, capsys):
    assert main(["serve", str(tmp_path), "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert "is not a saved slimkit model (no smash_config.json there)" in err and "Traceback" not in err


def test_access_log_is_off_unless_asked_for():
    assert build_parser().parse_args(["serve", "DIR"]).access_log is False
    assert build_parser().parse_args(["serve", "DIR", "--access-log"]).access_log is True
