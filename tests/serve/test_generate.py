"""/generate on a real loopback server: token-identical to direct greedy generation, streaming, disconnects, limits."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx
import pytest
import torch

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.serve import build_app
from tests.serve.live import live_server

SYSTEM = "You answer in one word. "
QUESTIONS = ["Sky?", "Grass?", "Snow?", "Coal?", "Blood?", "Sun?"]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    loaded = zoo.load("tiny_llama")
    base = loaded.model.eval()
    cfg = SmashConfig({"prefix_cache": {"min_prefix_tokens": 2}}, device="cpu")
    cfg.add_tokenizer(loaded.tokenizer)
    folder = tmp_path_factory.mktemp("served") / "tiny_llama"
    smash(base, cfg, verbose=False).save_pretrained(folder)
    return base, loaded.tokenizer, SmashedModel.from_pretrained(folder)


@pytest.fixture(scope="module")
def server(lm):
    base, tokenizer, model = lm
    with live_server(build_app(model)) as (url, srv):
        yield url, srv, base, tokenizer


def _direct(base, ids, new_tokens):
    prompt = torch.tensor([ids])
    with torch.no_grad():
        out = base.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens, do_sample=False,
                            pad_token_id=0)
    return out[0, len(ids):].tolist()


def _stream(client, body):
    with client.stream("POST", "/generate", json={**body, "stream": True}) as response:
        assert response.status_code == 200 and response.headers["content-type"] == "application/x-ndjson"
        return [json.loads(line) for line in response.iter_lines() if line]


def test_concurrent_generations_are_token_identical_to_direct_greedy(server):
    url, _, base, tokenizer = server
    prompts = [SYSTEM + q for q in QUESTIONS]
    with httpx.Client(base_url=url, timeout=60) as client, ThreadPoolExecutor(len(prompts)) as pool:
        before = client.get("/metrics").json()["prefix_cache"]
        assert client.post("/generate", json={"inputs": [SYSTEM + "Warm?"], "max_new_tokens": 2}).status_code == 200
        answers = list(pool.map(lambda p: client.post("/generate", json={"inputs": [p], "max_new_tokens": 8}),
                                prompts))
        by_ids = client.post("/generate", json={"inputs": [[5, 6, 7, 8], [9, 10]], "max_new_tokens": 5}).json()
        metrics = client.get("/metrics").json()
    for prompt, answer in zip(prompts, answers, strict=True):
        assert answer.status_code == 200, answer.text
        expected = _direct(base, tokenizer(prompt)["input_ids"], 8)
        assert answer.json()["tokens"] == [expected]
        assert answer.json()["outputs"] == [tokenizer.decode(expected, skip_special_tokens=True)]
    assert by_ids["outputs"] == by_ids["tokens"] == [_direct(base, [5, 6, 7, 8], 5), _direct(base, [9, 10], 5)]
    cache = metrics["prefix_cache"]  # the shared system prompt was computed once and reused
    assert cache["hits"] - before["hits"] >= len(prompts)
    assert cache["reused_tokens"] - before["reused_tokens"] >= len(prompts) * len(SYSTEM)


def test_stream_gives_one_line_per_token_and_the_same_tokens(server):
    url, _, base, tokenizer = server
    prompt = SYSTEM + "Night?"
    expected = _direct(base, tokenizer(prompt)["input_ids"], 12)
    with httpx.Client(base_url=url, timeout=60) as client:
        lines = _stream(client, {"inputs": [prompt, "Ice?"], "max_new_tokens": 12})
    first = [line for line in lines if line["index"] == 0]
    assert [line["token"] for line in first[:-1]] == expected
    assert first[-1] == {"index": 0, "done": True, "output": tokenizer.decode(expected, skip_special_tokens=True),
                         "tokens": expected}
    assert "".join(line.get("text", "") for line in first[:-1]) == first[-1]["output"]
    assert lines[-1]["index"] == 1 and lines[-1]["tokens"] == _direct(base, tokenizer("Ice?")["input_ids"], 12)


def test_server_survives_a_client_that_disconnects_mid_stream(server):
    url, _, base, tokenizer = server
    with httpx.Client(base_url=url, timeout=60) as client:
        before = client.get("/metrics").json()["responses_by_status"].get("499", 0)
        with client.stream("POST", "/generate", json={"inputs": [[7, 8, 9]], "max_new_tokens": 100,
                                                      "stream": True}) as response:
            got = []
            for line in response.iter_lines():
                got.append(json.loads(line))
                if len(got) == 2:
                    break  # leaving the block closes the connection with 98 tokens still to come
        assert [line["token"] for line in got] == _direct(base, [7, 8, 9], 2)
        prompt = SYSTEM + "Rain?"
        deadline = time.monotonic() + 20
        while client.get("/metrics").json()["responses_by_status"].get("499", 0) == before:
            assert time.monotonic() < deadline, "the abandoned stream was never wound up"
            time.sleep(0.05)
        after = client.post("/generate", json={"inputs": [prompt], "max_new_tokens": 6})
        assert after.status_code == 200 and after.json()["tokens"] == [_direct(base, tokenizer(prompt)["input_ids"], 6)]
        assert client.get("/health").json()["status"] == "ok"


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"inputs": ["hi"], "temperature": 0.7}, 422, "optional 'max_new_tokens'"),
    ({"prompt": "hi"}, 422, "got ['prompt']"),
    ({"inputs": ["hi"], "max_new_tokens": 0}, 422, "integer from 1 to 512; got 0"),
    ({"inputs": ["hi"], "max_new_tokens": "5"}, 422, "got '5'"),
    ({"inputs": ["hi"], "stream": "yes"}, 422, "'stream' must be true or false"),
    ({"inputs": ["x" * 120], "max_new_tokens": 20}, 413, "has 120 tokens and asks for 20 new ones; the limit is 128"),
    ({"inputs": "hi"}, 422, "non-empty list"),
])
def test_bad_generate_requests_get_a_clear_4xx(server, body, status, message):
    url, *_ = server
    answer = httpx.post(f"{url}/generate", json=body, timeout=30)
    assert answer.status_code == status and message in answer.json()["error"], answer.text
    assert "Traceback" not in answer.text


def test_unknown_routes_and_methods_name_the_routes(server):
    url, *_ = server
    missing = httpx.post(f"{url}/v1/completions", json={}, timeout=30)
    assert missing.status_code == 404 and "POST /generate, GET /health" in missing.json()["error"]
    wrong = httpx.get(f"{url}/generate", timeout=30)
    assert wrong.status_code == 405 and "/generate takes POST, not GET" in wrong.json()["error"]


def test_shutdown_finishes_the_stream_in_flight(lm):
    base, _, model = lm
    with live_server(build_app(model)) as (url, srv), httpx.Client(base_url=url, timeout=60) as client:
        with client.stream("POST", "/generate", json={"inputs": [[11, 12]], "max_new_tokens": 40,
                                                      "stream": True}) as response:
            lines = response.iter_lines()
            first = json.loads(next(lines))
            srv.should_exit = True  # what SIGINT/SIGTERM do
            rest = [json.loads(line) for line in lines if line]
        expected = _direct(base, [11, 12], 40)
        assert [first["token"]] + [line["token"] for line in rest[:-1]] == expected
        assert rest[-1]["done"] and rest[-1]["tokens"] == expected
        time.sleep(0.5)
        with pytest.raises(httpx.TransportError):
            client.get("/health")


def test_requests_while_loading_get_503_with_retry_after(lm):
    _, _, model = lm
    release = threading.Event()

    def loader():
        release.wait(30)
        return model, None

    with live_server(build_app(loader=loader)) as (url, _), httpx.Client(base_url=url, timeout=30) as client:
        waiting = client.post("/generate", json={"inputs": [[1, 2]]})
        health = client.get("/health")
        release.set()
        deadline = time.monotonic() + 20
        while client.get("/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        ready = client.post("/generate", json={"inputs": [[1, 2]], "max_new_tokens": 3})
    assert waiting.status_code == 503 and waiting.headers["retry-after"] == "2"
    assert "still loading" in waiting.json()["error"]
    assert health.status_code == 503 and health.json()["status"] == "loading"
    assert ready.status_code == 200 and ready.json()["tokens"] == [_direct(lm[0], [1, 2], 3)]


def test_a_model_that_fails_to_load_is_reported():
    errors = []

    def loader():
        raise OSError("model.safetensors is truncated")

    app = build_app(loader=loader, on_load_error=errors.append)
    with live_server(app) as (url, _), httpx.Client(base_url=url, timeout=30) as client:
        deadline = time.monotonic() + 10
        while client.get("/health").json()["status"] == "loading":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        health, embed = client.get("/health"), client.post("/embed", json={"inputs": [[1]]})
    assert health.status_code == 503 and "truncated" in health.json()["error"]
    assert embed.status_code == 503 and "failed to load (OSError: model.safetensors is truncated)" in embed.text
    assert errors == ["OSError: model.safetensors is truncated"]


def test_a_client_that_disconnects_from_a_whole_generate_stops_the_generation():
    model = zoo.load("tiny_llama").model.eval()
    model.generation_config.eos_token_id = None  # no early stop: only a disconnect can cut it short
    model.register_forward_pre_hook(lambda module, args: time.sleep(0.02))  # ~20 ms a token: 100 tokens take ~2 s
    with live_server(build_app(model)) as (url, _):
        body = json.dumps({"inputs": [[7, 8, 9]], "max_new_tokens": 100}).encode()
        with socket.create_connection((urlsplit(url).hostname, urlsplit(url).port)) as s:
            s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            time.sleep(0.3)  # generation under way, about 15 tokens in
        closed = time.monotonic()
        with httpx.Client(base_url=url, timeout=30) as client:
            while (metrics := client.get("/metrics").json())["responses_by_status"].get("499", 0) == 0:
                assert time.monotonic() - closed < 10, "the abandoned generation was never stopped"
                time.sleep(0.02)
            stopped_after = time.monotonic() - closed
            assert metrics["generate"]["stopped_by_disconnect"] == 1
            assert 0 < metrics["generate"]["new_tokens"] < 50  # far short of the 100 asked for
            assert stopped_after < 1.5  # noticed at once, not after the 2 s or more the whole generation takes
            whole = client.post("/generate", json={"inputs": [[7, 8, 9]], "max_new_tokens": 5})
            assert whole.status_code == 200 and len(whole.json()["tokens"][0]) == 5
            assert client.get("/metrics").json()["generate"]["stopped_by_disconnect"] == 1
