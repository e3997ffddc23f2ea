"""Pruna's evaluation face: Task / EvaluationAgent snippets on the offline models, checked against numbers computed
here by hand or by slimkit's own counters."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from slimkit import zoo
from slimkit.evaluation import count_macs, count_parameters, size_on_disk
from slimkit.evaluation.size import state_bytes
from slimkit.faces.pruna import EvaluationAgent, PrunaDataModule, Task
from slimkit.faces.pruna.evaluation.metrics import (
    EvaluationResults,
    InferenceTimeStats,
    LatencyMetric,
    MetricResult,
    TorchMetricWrapper,
)


@pytest.fixture(scope="module")
def digits():
    model = zoo.load("digits_cnn").model.eval()
    datamodule = PrunaDataModule.from_string("Digits", dataloader_args={"batch_size": 64})
    return model, datamodule


def _snippet(code: str, **names) -> dict:
    scope = dict(names)
    exec(compile(code, "<pruna evaluation snippet>", "exec"), scope)  # noqa: S102 - the snippet under test
    return scope


PRUNA_SNIPPET = '''
from slimkit.faces.pruna.evaluation.evaluation_agent import EvaluationAgent
from slimkit.faces.pruna.evaluation.task import Task

task = Task(request=["accuracy", "total_params", "total_macs"], datamodule=datamodule, device="cpu")
eval_agent = EvaluationAgent(task)
results = eval_agent.evaluate(model)
for result in results:
    print(result)
'''


def test_pruna_snippet_accuracy_and_counts_match_slimkit(digits, capsys):
    model, datamodule = digits
    results = _snippet(PRUNA_SNIPPET, model=model, datamodule=datamodule)["results"]
    assert isinstance(results, list) and isinstance(results, EvaluationResults)
    assert [r.name for r in results] == ["accuracy", "total_params", "total_macs"]
    correct = total = 0
    with torch.no_grad():
        for images, labels in datamodule.test_dataloader():
            correct += int((model(images).argmax(-1) == labels).sum())
            total += len(labels)
    accuracy = results["accuracy"]
    assert isinstance(accuracy, MetricResult) and accuracy.higher_is_better is True
    assert accuracy.result == pytest.approx(correct / total, abs=1e-6) and accuracy.value == accuracy.result
    first_images = next(iter(datamodule.test_dataloader()))[0]
    assert results["total_params"].result == count_parameters(model) and results["total_params"].unit == "params"
    assert results["total_macs"].result == count_macs(model, first_images)
    assert results.to_dict()["total_params"] == count_parameters(model)
    out = capsys.readouterr().out
    assert f"accuracy: {accuracy.result}" in out and f"total_params: {count_parameters(model)} params" in out


def test_precision_recall_macro_equal_scikit_learn(digits):
    from sklearn.metrics import precision_score, recall_score

    model, datamodule = digits
    request = [TorchMetricWrapper("precision", task="multiclass", num_classes=10, average="macro"),
               TorchMetricWrapper("recall", task="multiclass", num_classes=10, average="macro")]
    results = EvaluationAgent(request=request, datamodule=datamodule, device="cpu").evaluate(model)
    preds, labels = [], []
    with torch.no_grad():
        for images, target in datamodule.test_dataloader():
            preds.append(model(images).argmax(-1))
            labels.append(target)
    preds, labels = torch.cat(preds).numpy(), torch.cat(labels).numpy()
    assert results["precision"].result == pytest.approx(precision_score(labels, preds, average="macro"), abs=1e-5)
    assert results["recall"].result == pytest.approx(recall_score(labels, preds, average="macro"), abs=1e-5)
    assert results["precision"].params["average"] == "macro"


def test_time_memory_and_size_metrics(digits):
    model, datamodule = digits
    request = [LatencyMetric(n_iterations=3, n_warmup_iterations=1), "disk_memory", "inference_memory",
               "training_memory"]
    results = EvaluationAgent(Task(request, datamodule, device="cpu")).evaluate(model)
    latency = results["latency"]
    assert latency.result > 0 and latency.unit == "ms/batch" and latency.higher_is_better is False
    assert latency.params == {"n_iterations": 3, "n_warmup_iterations": 1, "device": "cpu", "timing_type": "sync"}
    assert "3 timed forwards of a batch of 64" in latency.notes[0]
    assert results["disk_memory"].result == size_on_disk(model) / 2**20
    weights = state_bytes(model)
    assert results["inference_memory"].result * 2**20 > weights
    assert results["training_memory"].result * 2**20 >= 2 * weights  # the weights and a gradient for each
    assert all(p.grad is None for p in model.parameters()) and not model.training  # left as it was found
    table = str(results)
    assert "latency" in table and "ms/batch" in table and "3 timed forwards" in table


def test_parent_metric_expands_to_latency_throughput_total_time_from_one_run(digits):
    model, datamodule = digits
    task = Task([InferenceTimeStats(n_iterations=4, n_warmup_iterations=0)], datamodule, device="cpu")
    assert [m.metric_name for m in task.metrics] == ["latency", "throughput", "total_time"]
    results = EvaluationAgent(task).evaluate(model)
    latency, throughput, total = (results[n].result for n in ("latency", "throughput", "total_time"))
    assert total == pytest.approx(4 * latency)
    assert throughput == pytest.approx(64 / latency)  # samples per ms, as in Pruna


def _perplexity_by_hand(model, dataloader) -> float:
    nll, count = 0.0, 0
    with torch.no_grad():
        for ids, labels in dataloader:
            logits = model(ids).logits.double()
            keep = labels != -100
            nll += float(F.cross_entropy(logits[keep], labels[keep], reduction="sum"))
            count += int(keep.sum())
    return math.exp(nll / count)


def test_perplexity_equals_exp_mean_nll_and_named_request():
    lm = zoo.load("tiny_llama")
    datamodule = PrunaDataModule.from_string("PyDocText", tokenizer=lm.tokenizer, collate_fn_args={"max_seq_len": 24},
                                             dataloader_args={"batch_size": 4})
    datamodule.limit_datasets(8)
    expected = _perplexity_by_hand(lm.model.eval(), datamodule.test_dataloader())
    agent = EvaluationAgent(Task("text_generation_quality", datamodule, device="cpu"))
    results = agent.evaluate(lm.model)
    assert [r.name for r in results] == ["perplexity"] and results[0].higher_is_better is False
    assert results[0].result == pytest.approx(expected, rel=1e-4)
    again = EvaluationAgent(request=["perplexity"], datamodule=datamodule).evaluate(lm.model)
    assert again["perplexity"].result == pytest.approx(expected, rel=1e-4)


class _Images(torch.utils.data.Dataset):
    """Four 3x176x176 images in [0, 255] with a target image each (the image shifted by 3)."""

    def __init__(self) -> None:
        self.images = torch.rand(4, 3, 176, 176, generator=torch.Generator().manual_seed(0)) * 255

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> dict:
        return {"image": self.images[i], "target": (self.images[i] + 3).clamp(0, 255)}


def _stack(items: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.stack([i["image"] for i in items]), torch.stack([i["target"] for i in items])


class _Blur(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)


def test_image_metrics_pairwise_against_the_first_model_and_single_against_targets():
    from torchmetrics.image import (
        MultiScaleStructuralSimilarityIndexMeasure,
        PeakSignalNoiseRatio,
        StructuralSimilarityIndexMeasure,
    )

    data = _Images()
    datamodule = PrunaDataModule(data, data, data, collate_fn=_stack, dataloader_args={"batch_size": 2})
    base, smashed = torch.nn.Identity(), _Blur()
    agent = EvaluationAgent(request=["psnr", "ssim", "ms_ssim"], datamodule=datamodule, device="cpu")
    assert agent.evaluate(base) == []  # the first model gives the reference outputs
    results = agent.evaluate(smashed)
    with torch.no_grad():
        blurred = smashed(data.images)
    expected = {"psnr": PeakSignalNoiseRatio(data_range=255.0), "ssim": StructuralSimilarityIndexMeasure(),
                "ms_ssim": MultiScaleStructuralSimilarityIndexMeasure()}
    for name, metric in expected.items():
        for start in (0, 2):  # the same two batches the agent saw
            metric.update(blurred[start:start + 2], data.images[start:start + 2])
        assert results[name].result == pytest.approx(float(metric.compute()), rel=1e-5), name
    assert results["psnr"].unit == "dB" and 10 < results["psnr"].result < 60

    single = EvaluationAgent(request=[TorchMetricWrapper("psnr", call_type="single")], datamodule=datamodule)
    target = (data.images + 3).clamp(0, 255)
    reference = PeakSignalNoiseRatio(data_range=255.0)
    for start in (0, 2):
        reference.update(data.images[start:start + 2], target[start:start + 2])
    assert single.evaluate(base)["psnr"].result == pytest.approx(float(reference.compute()), rel=1e-5)


def test_energy_and_co2_with_codecarbon_offline(digits):
    pytest.importorskip("codecarbon", reason="codecarbon is in slimkit[eval]")
    from slimkit.faces.pruna.evaluation.metrics import CO2EmissionsMetric, EnergyConsumedMetric

    model, datamodule = digits
    request = [EnergyConsumedMetric(n_iterations=3, n_warmup_iterations=0, country_iso_code="FRA"),
               CO2EmissionsMetric(n_iterations=3, n_warmup_iterations=0, country_iso_code="FRA")]
    results = EvaluationAgent(request=request, datamodule=datamodule, device="cpu").evaluate(model)
    assert results["energy_consumed"].result > 0 and results["energy_consumed"].unit == "kWh"
    assert results["co2_emissions"].result > 0 and results["co2_emissions"].unit == "kgCO2e"
    assert results["energy_consumed"].notes[0] == "codecarbon offline, 3 forwards of the first test batch, grid of FRA"
    intensity = results["co2_emissions"].result / results["energy_consumed"].result  # kg per kWh: one run gave both
    assert 0.001 < intensity < 1.5


@pytest.mark.slow
def test_minilm_latency_params_and_disk():
    encoder = zoo.load("minilm")
    datamodule = PrunaDataModule.from_string("PyDocText", tokenizer=encoder.tokenizer,
                                             collate_fn_args={"max_seq_len": 32}, dataloader_args={"batch_size": 8})
    request = [LatencyMetric(n_iterations=3, n_warmup_iterations=1), "total_params", "disk_memory"]
    results = EvaluationAgent(request=request, datamodule=datamodule, device="cpu").evaluate(encoder.model)
    assert results["latency"].result > 0 and "3 timed forwards of a batch of 8" in results["latency"].notes[0]
    assert results["total_params"].result == count_parameters(encoder.model)
    assert results["disk_memory"].result == pytest.approx(size_on_disk(encoder.model) / 2**20)
    assert 40 < results["disk_memory"].result < 120  # MiniLM-L6: 22.7 M float32 weights


def _tiny_clip(folder) -> str:
    """A randomly initialised CLIP with a letters-only tokenizer, saved as a local copy of hub weights would be."""
    import json

    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for letter in "abcdefghijklmnopqrstuvwxyz":
        vocab[letter] = len(vocab)
        vocab[letter + "</w>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    torch.manual_seed(0)
    small = {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 1, "num_attention_heads": 2}
    config = CLIPConfig(text_config={**small, "vocab_size": len(vocab), "bos_token_id": 0, "eos_token_id": 1,
                                     "pad_token_id": 1},
                        vision_config={**small, "image_size": 32, "patch_size": 8}, projection_dim=16)
    path = folder / "clip"
    CLIPModel(config).save_pretrained(path)
    CLIPProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(path)
    return str(path)


class _Painter(torch.nn.Module):
    """A stand-in text-to-image model: each prompt gives a fixed uint8 image that depends on its length."""

    def forward(self, prompts: list[str]) -> torch.Tensor:
        base = torch.arange(3 * 32 * 32).reshape(3, 32, 32)
        return torch.stack([((base * (len(p) + 1)) % 256).to(torch.uint8) for p in prompts])


def test_clip_score_from_a_local_copy_of_the_weights(tmp_path):
    from transformers import CLIPModel, CLIPProcessor

    path = _tiny_clip(tmp_path)
    prompts = ["a red cat", "two dogs", "the sea", "a tree in snow"]
    data = [{"text": p} for p in prompts]
    datamodule = PrunaDataModule(data, data, data, dataloader_args={"batch_size": 2},
                                 collate_fn=lambda items: ([i["text"] for i in items], None))  # Pruna's (x, gt)
    metric = TorchMetricWrapper("clip_score", model_path=path)
    assert metric.params()["model_path"] == path
    results = EvaluationAgent(request=[metric], datamodule=datamodule, device="cpu").evaluate(_Painter())
    clip, processor = CLIPModel.from_pretrained(path).eval(), CLIPProcessor.from_pretrained(path)
    images = _Painter()(prompts)
    with torch.no_grad():  # CLIP score by hand: 100 * cosine of the image and text embeddings, floored at 0
        pixels = processor(images=list(images), return_tensors="pt")["pixel_values"]
        tokens = processor(text=prompts, return_tensors="pt", padding=True)
        image_embeddings = clip.get_image_features(pixel_values=pixels)
        text_embeddings = clip.get_text_features(**tokens)
    image_embeddings = getattr(image_embeddings, "pooler_output", image_embeddings)
    text_embeddings = getattr(text_embeddings, "pooler_output", text_embeddings)
    cosine = F.cosine_similarity(image_embeddings, text_embeddings, dim=-1)
    assert results["clip_score"].result == pytest.approx(float((100 * cosine).clamp_min(0).mean()), rel=1e-4)


def test_a_registered_custom_metric_runs_by_name(digits):
    from slimkit.errors import RegistryError
    from slimkit.faces.pruna.evaluation.metrics import MetricRegistry, StatefulMetric

    class ConfidentShare(StatefulMetric):
        """Share of samples whose top softmax probability is at least ``threshold``."""

        metric_name = "confident_share"
        higher_is_better = True

        def __init__(self, threshold: float = 0.9, device=None) -> None:
            self.threshold, self.hits, self.seen = threshold, 0, 0

        def update(self, x, gt, outputs) -> None:
            self.hits += int((outputs.softmax(-1).max(-1).values >= self.threshold).sum())
            self.seen += len(outputs)

        def compute(self) -> MetricResult:
            return MetricResult(self.metric_name, {"threshold": self.threshold}, self.hits / self.seen)

        def reset(self) -> None:
            self.hits = self.seen = 0

    model, datamodule = digits
    MetricRegistry.register("confident_share")(ConfidentShare)
    try:
        with pytest.raises(RegistryError, match="already registered"):
            MetricRegistry.register("confident_share")(ConfidentShare)
        results = EvaluationAgent(request=["confident_share", "accuracy"], datamodule=datamodule).evaluate(model)
    finally:
        MetricRegistry._registry.pop("confident_share")
    with torch.no_grad():
        probs = torch.cat([model(x).softmax(-1).max(-1).values for x, _ in datamodule.test_dataloader()])
    assert results["confident_share"].result == pytest.approx(float((probs >= 0.9).double().mean()))
    assert [r.name for r in results] == ["confident_share", "accuracy"]
