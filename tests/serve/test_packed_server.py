"""A real server on loopback with a packing batcher: concurrent /embed requests share packed forwards, exact answers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import torch

from slimkit import SmashConfig, smash
from slimkit.serve import build_app
from tests.algorithms.models import tiny_sentence_encoder
from tests.serve.live import live_server


def test_concurrent_embeddings_are_packed_and_match_the_model():
    base = tiny_sentence_encoder().eval()
    cfg = SmashConfig({"dynamic_batch": {"max_wait_ms": 200.0, "pack": "on"}}, device="cpu")
    model = smash(tiny_sentence_encoder().eval(), cfg, verbose=False)
    g = torch.Generator().manual_seed(7)
    requests = [[torch.randint(1, 256, (2 + 5 * i,), generator=g).tolist()] for i in range(10)]  # 2..47 tokens
    with live_server(build_app(model, max_length=64)) as (url, _), httpx.Client(base_url=url, timeout=30) as client:
        with ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(lambda inputs: client.post("/embed", json={"inputs": inputs}), requests))
        metrics = client.get("/metrics").json()["dynamic_batcher"]
    assert [a.status_code for a in answers] == [200] * 10
    with torch.no_grad():
        for inputs, answer in zip(requests, answers, strict=True):
            torch.testing.assert_close(torch.tensor(answer.json()["embeddings"]), base(torch.tensor(inputs)),
                                       atol=2e-6, rtol=0)
    assert metrics["packed_forwards"] >= 1 and metrics["batches"] < metrics["requests"] == 10
