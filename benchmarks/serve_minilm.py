"""MiniLM behind `slimkit serve` on loopback: 16 concurrent clients, with dynamic_batch vs without, same run.

    PYTHONPATH=. OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/serve_minilm.py [--requests 160] [--rounds 3]

Two servers (`slimkit serve`, one process each, access log off as by default) load the zoo MiniLM saved twice:
plain, and with `dynamic_batch` (max_batch_size 16, max_wait_ms 5). A closed loop of ``--clients`` clients
(threads with keep-alive connections, in this process, apart from both servers) sends single PyDocText
sentences to POST /embed. Each round sends the same ``--requests`` sentences to both servers, alternating which
goes first (A B, B A, ...), so machine noise and sentence lengths hit both alike. Prints throughput (requests/s
over each server's summed round time), p50/p99 latency, the ratios, the batcher's mean batch size, the client's
CPU per request, and checks both servers give the same embeddings.

First it measures the most batching can give with this model alone, in one process without HTTP: the same
sentences run one per forward vs in batches of ``--clients`` (split into forwards of similar length as the
batcher does), 2 torch threads, interleaved. That is what batching saves in the model; HTTP, JSON and tokenizing
cost the same per request in both arms (the server without a batcher also runs up to 16 forwards at once in its
threads, which the one-forward figure leaves out). The servers' CPU time per request is printed too: on a loaded
machine it is steadier than requests/s.
"""

from __future__ import annotations

import argparse
import http.client
import json
import queue
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, print_table  # noqa: E402
from serving import Server, percentile, pydoc_sentences, save_minilm  # noqa: E402

from slimkit import SmashedModel  # noqa: E402
from slimkit.compression.batching.padding import collate, length_groups  # noqa: E402

MAX_BATCH, MAX_WAIT_MS, MAX_PADDING = 16, 5.0, 0.25


def model_bound(folder: Path, sentences: list[str], batch: int, repeats: int = 3) -> dict[str, float]:
    """ms per sentence in the model alone (2 torch threads): one per forward; in batches of ``batch`` grouped and
    padded as dynamic_batch does; and the ceiling, the same work with no padding at all (neighbours in length
    order cut to the shortest of their batch), alone vs batched. Timed batch by batch, the four in turn (order
    alternating), so load from other processes hits all four alike."""
    model = SmashedModel.from_pretrained(folder)
    tokenizer = model.smash_config.tokenizer
    calls = [((), {"input_ids": torch.tensor([x]), "attention_mask": torch.ones(1, len(x), dtype=torch.long)})
             for x in tokenizer(sentences)["input_ids"]]
    ordered = sorted(calls, key=lambda call: call[1]["input_ids"].shape[1])
    jobs: list[dict[str, Callable[[], object]]] = []
    for start in range(0, len(calls), batch):
        chunk = calls[start : start + batch]
        groups = [collate([chunk[i] for i in g], pad_token_id=0)[1]
                  for g in length_groups(chunk, [1] * len(chunk), MAX_PADDING)]
        similar = ordered[start : start + batch]
        shortest = min(kwargs["input_ids"].shape[1] for _, kwargs in similar)
        ids = torch.cat([kwargs["input_ids"][:, :shortest] for _, kwargs in similar])
        cut = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        jobs.append({"alone": lambda chunk=chunk: [model(**kwargs) for _, kwargs in chunk],
                     "batched": lambda groups=groups: [model(**kwargs) for kwargs in groups],
                     "ceiling alone": lambda cut=cut: [model(**{k: v[i : i + 1] for k, v in cut.items()})
                                                       for i in range(len(cut["input_ids"]))],
                     "ceiling batched": lambda cut=cut: model(**cut)})
    torch.set_num_threads(2)
    seconds = dict.fromkeys(jobs[0], 0.0)
    with torch.inference_mode():
        for r in range(repeats + 1):  # the first pass warms up
            for i, job in enumerate(jobs):
                for name in list(job) if (r + i) % 2 == 0 else list(reversed(job)):
                    t = time.perf_counter()
                    job[name]()
                    if r:
                        seconds[name] += time.perf_counter() - t
    return {name: 1000 * value / (repeats * len(calls)) for name, value in seconds.items()}


def _round(url: str, sentences: list[str], clients: int) -> tuple[float, list[float]]:
    """Send ``len(sentences)`` single-sentence requests from ``clients`` closed-loop clients; wall s, latencies.

    Each client is a thread with one keep-alive connection (the standard library's http.client): about 0.2 ms
    of CPU per request, against ~3 ms for an asyncio httpx client, which on 2 cores took CPU from the server
    and held back the next batch while it handled the last one's answers.
    """
    work: queue.SimpleQueue[str] = queue.SimpleQueue()
    for s in sentences:
        work.put(s)
    latencies: list[float] = []
    failures: list[str] = []
    address = urlsplit(url)

    def client() -> None:
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=120)
        try:
            while not failures:
                try:
                    sentence = work.get_nowait()
                except queue.Empty:
                    return
                t = time.perf_counter()
                connection.request("POST", "/embed", body=json.dumps({"inputs": [sentence]}),
                                   headers={"Content-Type": "application/json"})
                answer = connection.getresponse()
                body = answer.read()
                latencies.append(time.perf_counter() - t)
                if answer.status != 200:
                    failures.append(f"{url}: HTTP {answer.status}: {body[:300]!r}")
        finally:
            connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(failures[0])
    return time.perf_counter() - t0, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=160, help="requests per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per server (alternating)")
    args = parser.parse_args()
    sentences = pydoc_sentences(args.requests * args.rounds + args.clients * 2 + 8)
    with tempfile.TemporaryDirectory() as tmp:
        folders = {"no batcher": save_minilm(Path(tmp) / "plain", {}),
                   "dynamic_batch": save_minilm(Path(tmp) / "batched", {"dynamic_batch": {
                       "max_batch_size": MAX_BATCH, "max_wait_ms": MAX_WAIT_MS, "max_padding": MAX_PADDING}})}
        bound = model_bound(folders["no batcher"], sentences[: args.requests], args.clients)
        print(f"  model alone: {bound['alone']:.2f} ms/sentence one per forward, {bound['batched']:.2f} in batches "
              f"of {args.clients} ({bound['alone'] / bound['batched']:.2f}x); with no padding at all "
              f"{bound['ceiling alone']:.2f} vs {bound['ceiling batched']:.2f} "
              f"({bound['ceiling alone'] / bound['ceiling batched']:.2f}x)", flush=True)
        servers = {name: Server(folder) for name, folder in folders.items()}
        try:
            check = sentences[-8:]
            answers = {name: torch.tensor(httpx.post(f"{s.url}/embed", json={"inputs": check}, timeout=120)
                                          .json()["embeddings"]) for name, s in servers.items()}
            cosine = float(torch.nn.functional.cosine_similarity(*answers.values()).min())
            for server in servers.values():  # warm-up: a round of the clients each
                _round(server.url, sentences[-args.clients * 2 - 8 : -8], args.clients)
            wall = {name: 0.0 for name in servers}
            lat: dict[str, list[float]] = {name: [] for name in servers}
            names = list(servers)
            cpu, server_cpu = 0.0, {name: 0.0 for name in servers}
            for r in range(args.rounds):
                chunk = sentences[r * args.requests : (r + 1) * args.requests]  # the same sentences for both
                for name in names if r % 2 == 0 else reversed(names):
                    before, server_before = resource.getrusage(resource.RUSAGE_SELF), servers[name].cpu_seconds()
                    seconds, latencies = _round(servers[name].url, chunk, args.clients)
                    after = resource.getrusage(resource.RUSAGE_SELF)
                    server_cpu[name] += servers[name].cpu_seconds() - server_before
                    cpu += after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                    wall[name] += seconds
                    lat[name] += latencies
                    print(f"  round {r + 1} {name}: {len(chunk) / seconds:.1f} req/s", flush=True)
            stats = httpx.get(f"{servers['dynamic_batch'].url}/metrics", timeout=30).json()["dynamic_batcher"]
        finally:
            codes = {name: s.stop() for name, s in servers.items()}
    total = args.requests * args.rounds
    rows, figures = [], {}
    for name in names:
        figures[name] = (total / wall[name], 1000 * percentile(lat[name], 50), 1000 * percentile(lat[name], 99))
        rows.append([name, f"{figures[name][0]:.1f}", f"{figures[name][1]:.1f}", f"{figures[name][2]:.1f}",
                     f"{1000 * server_cpu[name] / total:.2f}"])
    print(f"\nMiniLM behind slimkit serve, {args.clients} concurrent clients, single sentences, {total} requests per "
          f"server in {args.rounds} alternating rounds\n{machine_line(torch.get_num_threads())}\n")
    print_table(["server", "throughput (req/s)", "p50 (ms)", "p99 (ms)", "server CPU (ms/req)"], rows)
    base, batched = figures["no batcher"], figures["dynamic_batch"]
    print(f"\nthroughput {batched[0] / base[0]:.2f}x, p50 {base[1] / batched[1]:.2f}x lower, p99 "
          f"{base[2] / batched[2]:.2f}x lower, server CPU per request "
          f"{server_cpu['no batcher'] / server_cpu['dynamic_batch']:.2f}x lower with dynamic_batch; "
          f"mean batch {stats['mean_batch_size']:.2f} requests "
          f"(histogram {stats['batch_sizes']}); embeddings of both servers: min cosine {cosine:.6f}; "
          f"exit codes after SIGTERM {codes}")
    print(f"model alone (no HTTP, 2 threads): {bound['alone']:.2f} ms/sentence one per forward, {bound['batched']:.2f} "
          f"batched as dynamic_batch does: {bound['alone'] / bound['batched']:.2f}x; ceiling with no padding "
          f"(sentences cut to their batch's shortest) {bound['ceiling alone'] / bound['ceiling batched']:.2f}x; "
          f"the client used {1000 * cpu / (2 * total):.2f} ms CPU per request")


if __name__ == "__main__":
    main()
