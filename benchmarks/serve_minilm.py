"""MiniLM behind `slimkit serve` on loopback: 16 concurrent clients, dynamic_batch packed and padded vs none, same run.

    PYTHONPATH=. OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/serve_minilm.py [--requests 160] [--rounds 3]

Three servers (`slimkit serve`, one process each, access log off as by default) load the zoo MiniLM saved
three times: plain, with `dynamic_batch` padding (max_batch_size 16, max_wait_ms 10 (the default), pack "off"), and with
`dynamic_batch` packing (the same, pack "on": each batch's sentences run as one padding-free sequence). A closed
loop of ``--clients`` clients (threads with keep-alive connections, in this process, apart from the servers)
sends single PyDocText sentences to POST /embed. Each round sends the same ``--requests`` sentences to every
server, alternating the order (A B C, C B A, ...), so machine noise and sentence lengths hit all alike. Prints
throughput (requests/s over each server's summed round time), p50/p99 latency, the ratios against no batcher,
the batchers' mean batch size, the client's CPU per request, and checks all servers give the same embeddings.

First it measures the most batching can give with this model alone, in one process without HTTP: the same sentences
run one per forward vs in batches of ``--clients`` (split into forwards of similar length as the batcher does when
it pads; packed into one sequence when it packs), 2 torch threads, interleaved. That is what batching saves in the
model; HTTP, JSON and tokenizing cost the same per request in all arms (the server without a batcher also runs up to
16 forwards at once in its threads, which the one-forward figure leaves out). The servers' CPU time per request is
printed too: on a loaded machine it is steadier than requests/s.
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
from common import job_seconds, machine_line, print_table  # noqa: E402
from serving import Server, percentile, pydoc_sentences, save_minilm  # noqa: E402

from slimkit import SmashedModel  # noqa: E402
from slimkit.engines.batching.packing import Packer  # noqa: E402
from slimkit.engines.batching.padding import collate, length_groups  # noqa: E402

MAX_BATCH, MAX_WAIT_MS, MAX_PADDING = 16, 10.0, 0.25


def model_bound(folder: Path, sentences: list[str], batch: int, repeats: int = 3) -> dict[str, float]:
    """ms per sentence in the model alone (2 torch threads): one per forward; in batches of ``batch`` grouped
    and padded as dynamic_batch does with pack "off"; packed as it does with pack "on"; and the ceiling, the
    same work with no padding at all (neighbours in length order cut to the shortest of their batch), alone vs
    batched. Timed batch by batch, the five in turn (order alternating), so load from other processes hits all
    alike."""
    model = SmashedModel.from_pretrained(folder)
    packer = Packer(model.model)
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
                     "packed": lambda chunk=chunk: packer.run([packer.segments(*call) for call in chunk]),
                     "ceiling alone": lambda cut=cut: [model(**{k: v[i : i + 1] for k, v in cut.items()})
                                                       for i in range(len(cut["input_ids"]))],
                     "ceiling batched": lambda cut=cut: model(**cut)})
    torch.set_num_threads(2)
    seconds = job_seconds(jobs, repeats)
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
    parser.add_argument("--max-wait-ms", type=float, default=MAX_WAIT_MS, help="both batchers' max_wait_ms")
    args = parser.parse_args()
    sentences = pydoc_sentences(args.requests * args.rounds + args.clients * 2 + 8)
    with tempfile.TemporaryDirectory() as tmp:
        batcher = {"max_batch_size": MAX_BATCH, "max_wait_ms": args.max_wait_ms, "max_padding": MAX_PADDING}
        folders = {"no batcher": save_minilm(Path(tmp) / "plain", {}),
                   "dynamic_batch padded": save_minilm(Path(tmp) / "padded", {"dynamic_batch": {
                       **batcher, "pack": "off"}}),
                   "dynamic_batch packed": save_minilm(Path(tmp) / "packed", {"dynamic_batch": {
                       **batcher, "pack": "on"}})}
        bound = model_bound(folders["no batcher"], sentences[: args.requests], args.clients)
        print(f"  model alone: {bound['alone']:.2f} ms/sentence one per forward, {bound['batched']:.2f} in batches "
              f"of {args.clients} padded ({bound['alone'] / bound['batched']:.2f}x), {bound['packed']:.2f} packed "
              f"({bound['alone'] / bound['packed']:.2f}x); with no padding at all "
              f"{bound['ceiling alone']:.2f} vs {bound['ceiling batched']:.2f} "
              f"({bound['ceiling alone'] / bound['ceiling batched']:.2f}x)", flush=True)
        servers = {name: Server(folder) for name, folder in folders.items()}
        try:
            check = sentences[-8:]
            answers = {name: torch.tensor(httpx.post(f"{s.url}/embed", json={"inputs": check}, timeout=120)
                                          .json()["embeddings"]) for name, s in servers.items()}
            plain = answers["no batcher"]
            cosine = min(float(torch.nn.functional.cosine_similarity(plain, other).min())
                         for other in answers.values())
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
            stats = {name: httpx.get(f"{servers[name].url}/metrics", timeout=30).json()["dynamic_batcher"]
                     for name in names[1:]}
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
    base = figures["no batcher"]
    print()
    for name in names[1:]:
        batched = figures[name]
        print(f"{name}: throughput {batched[0] / base[0]:.2f}x, p50 {base[1] / batched[1]:.2f}x lower, p99 "
              f"{base[2] / batched[2]:.2f}x lower, server CPU per request "
              f"{server_cpu['no batcher'] / server_cpu[name]:.2f}x lower than no batcher; "
              f"mean batch {stats[name]['mean_batch_size']:.2f} requests (histogram {stats[name]['batch_sizes']}), "
              f"{stats[name]['forwards']} forwards, {stats[name]['packed_forwards']} packed")
    print(f"embeddings of all servers vs no batcher: min cosine {cosine:.6f}; exit codes after SIGTERM {codes}")
    print(f"model alone (no HTTP, 2 threads): {bound['alone']:.2f} ms/sentence one per forward, "
          f"{bound['batched']:.2f} padded as dynamic_batch does with pack off: "
          f"{bound['alone'] / bound['batched']:.2f}x, "
          f"{bound['packed']:.2f} packed: {bound['alone'] / bound['packed']:.2f}x; ceiling with no padding "
          f"(sentences cut to their batch's shortest) {bound['ceiling alone'] / bound['ceiling batched']:.2f}x; "
          f"the client used {1000 * cpu / (2 * total):.2f} ms CPU per request")


if __name__ == "__main__":
    main()
