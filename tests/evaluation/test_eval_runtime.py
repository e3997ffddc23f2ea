import copy
import time

import pytest
import torch
from torch import nn

from slimkit import zoo
from slimkit.engines.caching import attach_embedding_cache
from slimkit.errors import ConfigError
from slimkit.evaluation import Latency, measure_latency, measure_latency_pair, peak_memory, set_threads
from slimkit.evaluation.runtime import fresh_inputs
from slimkit.evaluation.size import state_bytes


class ThreadSpy(nn.Module):
    def __init__(self, log: list, tag: str = "", sleep_s: float = 0.0) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.log, self.tag, self.sleep_s = log, tag, sleep_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.log.append((self.tag, torch.get_num_threads(), torch.is_inference_mode_enabled(), self.training))
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return self.fc(x)


def test_set_threads_sets_and_restores_even_on_error():
    before = torch.get_num_threads()
    with set_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), set_threads(1):
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before
    with pytest.raises(ConfigError, match="threads must be an integer >= 1, got 0"):
        with set_threads(0):
            pass


def test_latency_is_sane_and_respects_threads_and_mode():
    log: list = []
    model = ThreadSpy(log)
    model.train()
    before = torch.get_num_threads()
    lat = measure_latency(model, torch.randn(6, 8), warmup=2, repeats=5, threads=1)
    assert isinstance(lat, Latency)
    assert len(log) == 7
    assert {entry[1:] for entry in log} == {(1, True, False)}  # 1 thread, inference mode, eval
    assert model.training and torch.get_num_threads() == before  # everything restored
    assert (lat.repeats, lat.warmup, lat.threads, lat.batch_size) == (5, 2, 1, 6)
    assert 0 < lat.min_ms <= lat.median_ms <= lat.p90_ms
    assert lat.mean_ms > 0 and lat.std_ms >= 0
    assert lat.throughput() == pytest.approx(6 * 1000 / lat.median_ms)
    assert lat.to_dict()["throughput"] == pytest.approx(lat.throughput())


def test_latency_measures_real_time_and_min_time():
    log: list = []
    lat = measure_latency(ThreadSpy(log, sleep_s=0.01), torch.randn(1, 8), warmup=0, repeats=1, min_time_s=0.045)
    # one 10 ms call is not enough for 45 ms of timed work: it times calls until their sum reaches 45 ms
    assert lat.repeats >= 2 and lat.repeats * lat.mean_ms >= 45.0
    assert 10.0 <= lat.median_ms < 200.0


def test_latency_percentiles_from_samples():
    lat = Latency.from_samples([5.0, 1.0, 3.0, 2.0, 4.0], warmup=0, threads=1, batch_size=2)
    assert (lat.median_ms, lat.mean_ms, lat.min_ms) == (3.0, 3.0, 1.0)
    assert lat.p90_ms == pytest.approx(4.6)
    assert lat.std_ms == pytest.approx(1.5811388, rel=1e-6)


def test_bad_latency_settings_are_refused():
    model = nn.Linear(2, 2)
    with pytest.raises(ConfigError, match="repeats must be an integer >= 1, got 0"):
        measure_latency(model, torch.randn(1, 2), repeats=0)
    with pytest.raises(ConfigError, match="min_time_s must be a number >= 0, got -1"):
        measure_latency(model, torch.randn(1, 2), min_time_s=-1)


def test_pair_interleaves_blocks_of_both_models():
    log: list = []
    a, b = ThreadSpy(log, "a"), ThreadSpy(log, "b")
    lat_a, lat_b = measure_latency_pair(a, b, torch.randn(3, 8), warmup=1, repeats=6, threads=1, block=2)
    assert lat_a.repeats == lat_b.repeats == 6
    order = "".join(entry[0] for entry in log)
    assert order == "ab" + "aabb" + "bbaa" + "aabb"  # warm-up, then A B / B A / A B blocks


def test_cpu_peak_memory_counts_weights_inputs_and_activations():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))
    x = torch.randn(64, 256)
    resident = state_bytes(model) + x.numel() * 4
    activations = 2 * 64 * 1024 * 4  # linear output and relu output are alive together
    peak = peak_memory(model, x)
    assert resident + activations <= peak <= resident + activations + 64 * 1024


def test_peak_memory_grows_with_batch():
    model = nn.Sequential(nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 4))
    small = peak_memory(model, torch.randn(8, 32))
    large = peak_memory(model, torch.randn(128, 32))
    assert large - small >= 120 * 512 * 4


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_latency_and_peak_memory():
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10)).cuda()
    x = torch.randn(64, 256, device="cuda")
    lat = measure_latency(model, x, warmup=2, repeats=5)
    assert lat.median_ms > 0
    peak = peak_memory(model, x)
    resident = state_bytes(model) + x.numel() * 4
    assert resident + 64 * 1024 * 4 <= peak <= resident + 8 * 64 * 1024 * 4


def test_fresh_inputs_time_a_cacher_on_misses_not_on_its_own_hits():
    loaded = zoo.load("tiny_bert")
    inputs = loaded.example_inputs
    a, b = fresh_inputs(inputs, 1), fresh_inputs(inputs, 2)
    assert torch.equal(a["attention_mask"], inputs["attention_mask"])
    assert a["input_ids"].shape == inputs["input_ids"].shape
    assert not torch.equal(a["input_ids"], b["input_ids"])
    assert torch.equal(a["input_ids"].sort(-1).values, inputs["input_ids"].sort(-1).values)  # same tokens, new order
    cached = attach_embedding_cache(copy.deepcopy(loaded.model).eval(), max_entries=10_000)
    measure_latency_pair(loaded.model, cached, inputs, warmup=1, repeats=4, threads=1, fresh=True)
    assert cached.embedding_cache.hits == 0 and cached.embedding_cache.misses > 0
    measure_latency_pair(loaded.model, cached, inputs, warmup=1, repeats=4, threads=1)
    assert cached.embedding_cache.hits > 0
