"""MiniLM behind `slimkit serve` on loopback: 16 concurrent clients, with dynamic_batch vs without, same run.

    PYTHONPATH=. OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/serve_minilm.py [--requests 160] [--rounds 3]

Two servers (`slimkit serve`, one process each, access log off as by default) load the zoo MiniLM saved twice:
plain, and with `dynamic_batch` (max_batch_size 16, max_wait_ms 5). A closed loop of ``--clients`` httpx clients
(asyncio, in this process, apart from both servers) sends single PyDocText sentences to POST /embed. Each round
sends the same ``--requests`` sentences to both servers, alternating which goes first (A B, B A, ...), so machine
noise and sentence lengths hit both alike. Prints throughput (requests/s over each server's summed round time),
p50/p99 latency, the ratios, the batcher's mean batch size, the client's CPU per request, and checks both servers
give the same embeddings.

First it measures the most batching can give with this model alone, in one process without HTTP: the same
sentences run one per forward vs in batches of ``--clients`` (split into forwards of similar length as the
batcher does), 2 torch threads, interleaved. That is what batching saves in the model; HTTP, JSON and tokenizing
cost the same per request in both arms (the server without a batcher also runs up to 16 forwards at once in its
threads, which the one-forward figure leaves out). The servers' CPU time per request is printed too: on a loaded
machine it is steadier than requests/s.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_samples, machine_line, print_table  # noqa: E402
from serving import Server, percentile, pydoc_sentences, save_minilm  # noqa: E402

from slimkit import SmashedModel  # noqa: E402
from slimkit.compression.batching.padding import collate, length_groups  # noqa: E402

MAX_BATCH, MAX_WAIT_MS, MAX_PADDING = 16, 5.0, 0.25


def model_bound(folder: Path, sentences: list[str], batch: int, repeats: int = 3) -> tuple[float, float]:
    """ms per sentence run one per forward, and in batches of ``batch`` grouped and padded as dynamic_batch does."""
    model = SmashedModel.from_pretrained(folder)
    tokenizer = model.smash_config.tokenizer
    calls = [((), {"input_ids": torch.tensor([x]), "attention_mask": torch.ones(1, len(x), dtype=torch.long)})
             for x in tokenizer(sentences)["input_ids"]]

    def alone() -> None:
        for _, kwargs in calls:
            model(**kwargs)

    def batched() -> None:
        for start in range(0, len(calls), batch):
            chunk = calls[start : start + batch]
            for group in length_groups(chunk, [1] * len(chunk), MAX_PADDING):
                _, kwargs, _ = collate([chunk[i] for i in group], pad_token_id=0)
                model(**kwargs)

    samples = interleaved_samples({"alone": alone, "batched": batched}, repeats=repeats, warmup=1, threads=2)
    return (sorted(samples["alone"])[repeats // 2] / len(calls), sorted(samples["batched"])[repeats // 2] / len(calls))


async def _round(url: str, sentences: list[str], clients: int, start_index: int) -> tuple[float, list[float]]:
    """Send ``len(sentences)`` single-sentence requests from ``clients`` closed-loop clients; wall s, latencies."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for s in sentences:
        queue.put_nowait(s)
    latencies: list[float] = []

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            sentence = queue.get_nowait()
            t = time.perf_counter()
            answer = await http.post("/embed", json={"inputs": [sentence]})
            latencies.append(time.perf_counter() - t)
            if answer.status_code != 200:
                raise RuntimeError(f"{url}: HTTP {answer.status_code}: {answer.text}")

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
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
        print(f"  model alone: {bound[0]:.2f} ms/sentence one per forward, {bound[1]:.2f} in batches of "
              f"{args.clients}: at most {bound[0] / bound[1]:.2f}x from batching", flush=True)
        servers = {name: Server(folder) for name, folder in folders.items()}
        try:
            check = sentences[-8:]
            answers = {name: torch.tensor(httpx.post(f"{s.url}/embed", json={"inputs": check}, timeout=120)
                                          .json()["embeddings"]) for name, s in servers.items()}
            cosine = float(torch.nn.functional.cosine_similarity(*answers.values()).min())
            for server in servers.values():  # warm-up: a round of the clients each
                asyncio.run(_round(server.url, sentences[-args.clients * 2 - 8 : -8], args.clients, 0))
            wall = {name: 0.0 for name in servers}
            lat: dict[str, list[float]] = {name: [] for name in servers}
            names = list(servers)
            cpu, server_cpu = 0.0, {name: 0.0 for name in servers}
            for r in range(args.rounds):
                chunk = sentences[r * args.requests : (r + 1) * args.requests]  # the same sentences for both
                for name in names if r % 2 == 0 else reversed(names):
                    before, server_before = resource.getrusage(resource.RUSAGE_SELF), servers[name].cpu_seconds()
                    seconds, latencies = asyncio.run(_round(servers[name].url, chunk, args.clients, 0))
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
    print(f"model alone (no HTTP): {bound[0]:.2f} ms/sentence one per forward, {bound[1]:.2f} batched: the most "
          f"batching can give here is {bound[0] / bound[1]:.2f}x; the client used {1000 * cpu / (2 * total):.2f} ms "
          "CPU per request")


if __name__ == "__main__":
    main()
