"""A real server on loopback: concurrent clients are batched, answers match the model, bad requests get 4xx."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import torch

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.cli import build_parser
from slimkit.engines.batching import attach_dynamic_batcher
from slimkit.serve import build_app
from tests.serve.live import live_server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = zoo.load("tiny_bert").model.eval()
    cfg = SmashConfig({"embedding_cache": {"max_entries": 128}, "dynamic_batch": {"max_wait_ms": 100.0}}, device="cpu")
    folder = tmp_path_factory.mktemp("served") / "tiny_bert"
    smash(base, cfg, verbose=False).save_pretrained(folder)
    model = SmashedModel.from_pretrained(folder)
    with live_server(build_app(model, max_length=32)) as (url, _):
        yield url, base, model


def _ids(i):
    g = torch.Generator().manual_seed(i)
    return torch.randint(1, 250, (3 + i % 6,), generator=g).tolist()


def test_concurrent_predictions_are_batched_and_match_the_model(server):
    url, base, model = server
    requests = [[_ids(i)] for i in range(12)]
    with httpx.Client(base_url=url, timeout=30) as client, ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda inputs: client.post("/predict", json={"inputs": inputs}), requests))
        assert [a.status_code for a in answers] == [200] * 12
        with torch.no_grad():
            for inputs, answer in zip(requests, answers, strict=True):
                expected = base(input_ids=torch.tensor(inputs)).logits
                got = torch.tensor(answer.json()["outputs"])
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
                assert answer.json()["predictions"] == expected.argmax(-1).tolist()
        again = client.post("/predict", json={"inputs": requests[0]})
        assert again.json()["outputs"] == answers[0].json()["outputs"]
        embedded = client.post("/embed", json={"inputs": requests[1] + requests[2]})
        assert embedded.status_code == 200 and len(embedded.json()["embeddings"]) == 2
        metrics = client.get("/metrics").json()
        health = client.get("/health").json()
    assert health == {"status": "ok", "algorithms": ["embedding_cache", "dynamic_batch"], "generates": False}
    assert metrics["requests_by_route"]["/predict"] >= 13 and metrics["latency_ms"]["p50"] > 0
    assert metrics["dynamic_batcher"]["batches"] < metrics["dynamic_batcher"]["requests"]
    assert max(int(k) for k in metrics["dynamic_batcher"]["batch_sizes"]) > 1
    assert metrics["embedding_cache"]["hits"] >= 1 and 0 < metrics["embedding_cache"]["hit_rate"] < 1


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"input": [[1, 2]]}, 422, "exactly one field, 'inputs'"),
    ({"inputs": []}, 422, "non-empty list"),
    ({"inputs": [[1, 2], "text"]}, 422, "same kind"),
    ({"inputs": ["some text"]}, 422, "without a tokenizer"),
    ({"inputs": [[1, 99999]]}, 422, "outside the vocabulary"),
    ({"inputs": [list(range(1, 40))]}, 413, "has 39 tokens; the limit is 32"),
])
def test_bad_requests_get_a_clear_4xx(server, body, status, message):
    url, _, _ = server
    answer = httpx.post(f"{url}/predict", json=body, timeout=30)
    assert answer.status_code == status and message in answer.json()["error"]
    assert "Traceback" not in answer.text


def test_invalid_json_and_the_serve_command(server):
    url, _, _ = server
    encoder = httpx.post(f"{url}/generate", json={"inputs": [[1, 2]]}, timeout=30)
    assert encoder.status_code == 404 and "does not generate text" in encoder.json()["error"]
    answer = httpx.post(f"{url}/embed", content=b"{not json", timeout=30)
    assert answer.status_code == 400 and "not valid JSON" in answer.json()["error"]
    args = build_parser().parse_args(["serve", "saved/", "--port", "0"])
    assert (args.folder, args.host, args.port) == ("saved/", "127.0.0.1", 0)


class _SlowEncoder(torch.nn.Module):
    """Sums token ids per row after 0.4 s per forward: a model busy long enough for a burst to fill the queue."""

    def forward(self, input_ids, attention_mask):
        time.sleep(0.4)
        return (input_ids * attention_mask).sum(1, keepdim=True).float()


def test_a_burst_above_the_queue_limit_is_refused_with_503_not_lost():
    model = attach_dynamic_batcher(_SlowEncoder().eval(), max_batch_size=1, max_wait_ms=0.0, max_queue=2)
    with live_server(build_app(model)) as (url, _), httpx.Client(base_url=url, timeout=60) as client:
        with ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(lambda i: client.post("/predict", json={"inputs": [[i + 1, 100]]}), range(10)))
        metrics = client.get("/metrics").json()
    ok = [(i, a) for i, a in enumerate(answers) if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 503]
    assert len(ok) + len(refused) == 10 and len(refused) >= 1 and len(ok) >= 1  # one running, two queued
    for i, answer in ok:
        assert answer.json()["outputs"] == [[float(i + 101)]]  # each answer is its own caller's
    for answer in refused:
        assert answer.headers["retry-after"] == "1" and "queue is full (2 requests waiting)" in answer.json()["error"]
    assert metrics["dynamic_batcher"]["refused"] == len(refused)
    assert metrics["responses_by_status"] == {"200": len(ok), "503": len(refused)}
