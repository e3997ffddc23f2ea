import copy
import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from slimkit.errors import DataError
from slimkit.evaluation import Fidelity, accuracy, fidelity, perplexity


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))


def test_fidelity_of_identical_model_is_perfect():
    model = mlp()
    fid = fidelity(model, copy.deepcopy(model), torch.randn(5, 16))
    assert isinstance(fid, Fidelity)
    assert fid.cosine_mean == pytest.approx(1.0, abs=1e-12)
    assert fid.cosine_min == pytest.approx(1.0, abs=1e-12)
    assert fid.max_abs == 0.0 and fid.mean_abs == 0.0


def test_fidelity_drops_for_perturbed_model():
    model = mlp()
    noisy = copy.deepcopy(model)
    with torch.no_grad():
        noisy[2].weight.add_(0.3 * torch.randn_like(noisy[2].weight))
    fid = fidelity(model, noisy, torch.randn(5, 16))
    assert fid.cosine_min <= fid.cosine_mean < 0.999
    assert fid.max_abs >= fid.mean_abs > 0


def test_fidelity_is_per_sample_and_reads_main_tensor():
    class Out(nn.Module):
        def __init__(self, scale: torch.Tensor) -> None:
            super().__init__()
            self.scale = scale

        def forward(self, x: torch.Tensor) -> dict:
            return {"logits": x * self.scale, "aux": torch.zeros(1)}

    x = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    # second sample becomes [1, -1]: orthogonal to [1, 1]; first sample unchanged
    fid = fidelity(Out(torch.tensor([1.0, 1.0])), Out(torch.tensor([1.0, -1.0])), x)
    assert fid.cosine_mean == pytest.approx(0.5)
    assert fid.cosine_min == pytest.approx(0.0, abs=1e-12)
    assert fid.max_abs == 2.0 and fid.mean_abs == pytest.approx(0.5)


def test_fidelity_shape_mismatch_is_explained():
    with pytest.raises(DataError, match=r"got base \(2, 8\) and smashed \(2, 3\)"):
        fidelity(mlp(), nn.Sequential(nn.Linear(16, 3)), torch.randn(2, 16))


def one_hot_data(n: int = 10, classes: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    truth = torch.arange(n) % classes
    labels = truth.clone()
    labels[:3] = (labels[:3] + 1) % classes  # 3 of 10 labels disagree with the argmax
    return nn.functional.one_hot(truth, classes).float(), labels


def test_accuracy_on_toy_dataset_tuple_batches():
    x, y = one_hot_data()
    loader = DataLoader(TensorDataset(x, y), batch_size=4)
    assert accuracy(nn.Identity(), loader) == pytest.approx(0.7)


def test_accuracy_dict_batches_with_labels_key_and_ignore_index():
    class Kw(nn.Module):
        def forward(self, features: torch.Tensor) -> torch.Tensor:
            return features

    x, y = one_hot_data()
    y[0] = -100  # ignored: one of the wrong labels
    batches = [{"features": x[:5], "labels": y[:5]}, {"features": x[5:], "labels": y[5:]}]
    assert accuracy(Kw(), batches) == pytest.approx(7 / 9)


def test_accuracy_bad_batches_are_explained():
    with pytest.raises(DataError, match="needs a 'label' or 'labels' key, got keys \\['x'\\]"):
        accuracy(nn.Identity(), [{"x": torch.zeros(1, 2)}])
    with pytest.raises(DataError, match="got a tuple of length 3"):
        accuracy(nn.Identity(), [(torch.zeros(1, 2), torch.zeros(1), torch.zeros(1))])
    with pytest.raises(DataError, match=r"Predictions have shape \(2,\).*labels have shape \(3,\)"):
        accuracy(nn.Identity(), [(torch.zeros(2, 4), torch.zeros(3, dtype=torch.long))])
    with pytest.raises(DataError, match="no labelled samples"):
        accuracy(nn.Identity(), [])


class Uniform(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.zeros(*ids.shape, self.vocab)


class Oracle(nn.Module):
    """Sees the whole sequence and puts a huge logit on the *next* token: perplexity 1 iff the shift is right."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        nxt = torch.cat([ids[:, 1:], ids[:, :1]], dim=1)
        return 50.0 * nn.functional.one_hot(nxt, self.vocab).float()


def test_perplexity_of_uniform_logits_is_vocab_size():
    ids = torch.randint(0, 37, (5, 12))
    assert perplexity(Uniform(37), ids, batch_size=2) == pytest.approx(37.0, rel=1e-6)
    assert perplexity(Uniform(1000), ids[0]) == pytest.approx(1000.0, rel=1e-6)


def test_perplexity_uses_next_token_shift_and_attention_mask():
    ids = torch.randint(0, 20, (3, 9))
    assert perplexity(Oracle(20), ids) == pytest.approx(1.0, abs=1e-6)
    # a model predicting the *current* token is wrong everywhere (ids never repeat here)
    ids = torch.arange(27).reshape(3, 9)
    assert perplexity(lambda t: 50.0 * nn.functional.one_hot(t, 27).float(), ids) > 1e10
    # masked positions are not scored: uniform model with only 2 real tokens of 9 per row
    mask = torch.zeros(3, 9, dtype=torch.long)
    mask[:, :3] = 1
    loader = [{"input_ids": ids, "attention_mask": mask}]
    assert perplexity(Uniform(27), loader) == pytest.approx(27.0, rel=1e-6)


def test_perplexity_matches_hugging_face_loss_on_tiny_gpt2():
    import transformers
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        loss = model(ids, labels=ids).loss
    assert perplexity(model, ids, batch_size=2) == pytest.approx(math.exp(float(loss)), rel=1e-5)
    loader = DataLoader(TensorDataset(ids), batch_size=1)  # batches are 1-tuples
    assert perplexity(model, loader) == pytest.approx(math.exp(float(loss)), rel=1e-5)


def test_perplexity_bad_inputs_are_explained():
    with pytest.raises(DataError, match=r"integer token ids of shape \[N, L\] with L >= 2, got shape \(2, 1\)"):
        perplexity(Uniform(5), torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(DataError, match="dtype torch.float32"):
        perplexity(Uniform(5), torch.zeros(2, 4))
    with pytest.raises(DataError, match=r"needs logits \[N, L, vocab\]"):
        perplexity(nn.Identity(), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(DataError, match="batch_size must be an integer >= 1, got 0"):
        perplexity(Uniform(5), torch.zeros(2, 4, dtype=torch.long), batch_size=0)
