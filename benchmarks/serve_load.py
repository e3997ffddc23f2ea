"""A steady request rate held for 60 s against `slimkit serve` (MiniLM + dynamic_batch), every answer checked.

    .venv/bin/python benchmarks/serve_load.py [--rate 15] [--seconds 60] [--max-in-flight 256]

Open loop: request i is sent at t0 + i / rate whether or not earlier ones have been answered (so a slow server
shows as growing latency, not as a lower offered rate), each a single sentence out of 64 distinct PyDocText
sentences. Every answer is compared with the sentence's embedding computed directly in this process: a wrong
or missing answer counts as mis-routed or lost. Bounded: at most ``rate * seconds`` requests, ``--max-in-flight``
open at once (more would be refused by this client and reported), 120 s of grace for the last answers, loopback
only. Prints requests sent / answered / lost / mis-routed, the rate held, latency percentiles, the server's own
metrics, and the exit status after SIGTERM (uvicorn drains in-flight requests first).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line  # noqa: E402
from serving import Server, percentile, pydoc_sentences, save_minilm  # noqa: E402

from slimkit import zoo  # noqa: E402


def expected_embeddings(sentences: list[str]) -> torch.Tensor:
    """Each sentence embedded alone by the zoo MiniLM in this process (what the server must answer)."""
    loaded = zoo.load("minilm")
    rows = []
    with torch.inference_mode():
        for s in sentences:
            ids = torch.tensor([loaded.tokenizer(s)["input_ids"]])
            rows.append(loaded.model(input_ids=ids, attention_mask=torch.ones_like(ids))[0])
    return torch.stack(rows)


async def load(url: str, sentences: list[str], expected: torch.Tensor, rate: float, seconds: float,
               max_in_flight: int) -> dict:
    n = int(rate * seconds)
    results: list[tuple[str, float]] = []
    in_flight, refused, lag = 0, 0, 0.0
    limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)

    async def one(http: httpx.AsyncClient, i: int) -> None:
        nonlocal in_flight
        k = i % len(sentences)
        start = time.perf_counter()
        try:
            answer = await http.post("/embed", json={"inputs": [sentences[k]]})
            if answer.status_code != 200:
                results.append((f"HTTP {answer.status_code}", time.perf_counter() - start))
                return
            got = torch.tensor(answer.json()["embeddings"][0])
            scores = expected @ got
            right = int(scores.argmax()) == k and float(scores[k]) > 0.9999
            results.append(("ok" if right else "misrouted", time.perf_counter() - start))
        except httpx.HTTPError as exc:
            results.append((type(exc).__name__, time.perf_counter() - start))
        finally:
            in_flight -= 1

    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        tasks, t0 = [], time.perf_counter()
        for i in range(n):
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            lag = max(lag, -delay)
            if in_flight >= max_in_flight:
                refused += 1
                continue
            in_flight += 1
            tasks.append(asyncio.create_task(one(http, i)))
        sent_s = time.perf_counter() - t0
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
        done_s = time.perf_counter() - t0
        server_metrics = (await http.get("/metrics")).json()
    outcomes: dict[str, int] = {}
    for outcome, _ in results:
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    latencies = [s for o, s in results if o == "ok"]
    return {"offered": n, "sent": len(tasks), "client_refused": refused, "outcomes": outcomes,
            "send_seconds": sent_s, "done_seconds": done_s, "max_send_lag_ms": 1000 * lag,
            "p50_ms": 1000 * percentile(latencies, 50), "p99_ms": 1000 * percentile(latencies, 99),
            "max_ms": 1000 * max(latencies), "server": server_metrics}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=15.0, help="requests per second to hold")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-in-flight", type=int, default=256)
    args = parser.parse_args()
    sentences = pydoc_sentences(64)
    expected = expected_embeddings(sentences)
    with tempfile.TemporaryDirectory() as tmp:
        folder = save_minilm(Path(tmp) / "batched", {"dynamic_batch": {"max_batch_size": 16, "max_wait_ms": 5.0}})
        server = Server(folder)
        try:
            result = asyncio.run(load(server.url, sentences, expected, args.rate, args.seconds, args.max_in_flight))
        finally:
            code = server.stop()
    ok = result["outcomes"].get("ok", 0)
    lost = result["sent"] - ok - result["outcomes"].get("misrouted", 0)
    batcher = result["server"].get("dynamic_batcher", {})
    print(f"\nslimkit serve load test: MiniLM + dynamic_batch, open loop at {args.rate:g} req/s for {args.seconds:g} "
          f"s, loopback\n{machine_line(torch.get_num_threads())}\n")
    print(f"offered {result['offered']}, sent {result['sent']} in {result['send_seconds']:.1f} s (max send lag "
          f"{result['max_send_lag_ms']:.0f} ms, refused by the client's in-flight bound {result['client_refused']}), "
          f"outcomes {result['outcomes']}")
    print(f"answered correctly {ok}, lost {lost}, mis-routed {result['outcomes'].get('misrouted', 0)}; rate held "
          f"{ok / result['done_seconds']:.2f} req/s (all answers in {result['done_seconds']:.1f} s); latency p50 "
          f"{result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms, max {result['max_ms']:.0f} ms")
    print(f"server: responses {result['server']['responses_by_status']}, batcher mean batch "
          f"{batcher.get('mean_batch_size', 0):.2f}, refused {batcher.get('refused')}; exit status after SIGTERM "
          f"{code}")
    if lost or result["outcomes"].get("misrouted", 0):
        raise SystemExit("FAILED: lost or mis-routed responses")
    if result["client_refused"]:
        raise SystemExit(f"RATE NOT HELD: {result['client_refused']} requests were not sent (the server fell "
                         f"{args.max_in_flight} requests behind); try a lower --rate")


if __name__ == "__main__":
    main()
