"""fit(): it trains, counts steps and epochs, clips, stops early, calls back, and is reproducible when seeded."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from slimkit.evaluation import accuracy
from slimkit.training import FitResult, default_loss, fit
from tests.training.conftest import make_mlp


def test_fit_trains_a_digits_mlp_to_a_measured_accuracy(digits, digit_loader):
    _, _, x_test, y_test = digits
    model = make_mlp()
    before = accuracy(model, [(x_test, y_test)])
    result = fit(model, digit_loader, epochs=5, lr=1e-2, seed=0, num_threads=1, progress=False)
    after = accuracy(model, [(x_test, y_test)])
    assert isinstance(result, FitResult)
    assert result.steps == 5 * len(digit_loader) == 110 and result.epochs == 5
    assert before < 0.2 and after >= 0.9  # measured: 0.11 untrained, 0.94 after 5 epochs
    assert sum(result.losses[-10:]) / 10 < sum(result.losses[:10]) / 10 / 3
    assert result.final_loss == result.losses[-1] and result.best_metric is None and not result.stopped_early


@pytest.mark.parametrize(("epochs", "steps", "want_steps", "want_epochs"), [
    (None, None, 5, 1),   # neither: one epoch
    (3, None, 15, 3),
    (None, 7, 7, 2),      # steps only: the batches are cycled
    (2, 100, 10, 2),      # whichever ends first
    (4, 6, 6, 2),
])
def test_steps_and_epochs_are_counted(few_batches, epochs, steps, want_steps, want_epochs):
    epochs_seen: list[int] = []
    result = fit(make_mlp(), few_batches, epochs=epochs, steps=steps, on_epoch=epochs_seen.append, progress=False)
    assert (result.steps, result.epochs, len(result.losses)) == (want_steps, want_epochs, want_steps)
    assert epochs_seen == list(range(want_epochs))


def test_on_step_is_called_after_every_optimizer_step(few_batches):
    model = make_mlp()
    calls: list[tuple[int, float, float]] = []
    first = model[1].weight.detach().clone()

    def on_step(step: int, loss: float) -> None:  # the weights already moved when it runs
        calls.append((step, loss, float((model[1].weight.detach() - first).abs().max())))

    result = fit(model, few_batches, epochs=2, on_step=on_step, progress=False)
    assert [c[0] for c in calls] == list(range(1, 11))
    assert [c[1] for c in calls] == result.losses
    assert all(moved > 0 for _, _, moved in calls)


def _grad_norm(model: nn.Module) -> float:
    return float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])))


def test_grad_clip_bounds_the_gradient_norm(few_batches):
    def big_loss(model, batch):  # gradients far above the clip
        return 1000.0 * default_loss(model, batch)

    norms: dict[str, list[float]] = {"clipped": [], "free": []}
    for key, clip in (("clipped", 0.5), ("free", None)):
        model = make_mlp()
        fit(model, few_batches, loss=big_loss, grad_clip=clip, optimizer="sgd", lr=1e-4, progress=False,
            on_step=lambda step, loss, m=model, k=key: norms[k].append(_grad_norm(m)))
    assert min(norms["free"]) > 10.0
    assert max(norms["clipped"]) <= 0.5 * (1 + 1e-4) and min(norms["clipped"]) > 0.49


def _scripted(values: list[float]):
    calls: list[bool] = []

    def eval_fn(model: nn.Module) -> float:
        calls.append(model.training or torch.is_grad_enabled())  # must run in eval mode without gradients
        return values[len(calls) - 1]

    return eval_fn, calls


def test_early_stopping_stops_after_patience_evaluations_without_gain(few_batches):
    eval_fn, calls = _scripted([0.1, 0.5, 0.4, 0.45, 0.9, 0.95])
    model = make_mlp()
    result = fit(model, few_batches, epochs=10, eval_fn=eval_fn, eval_every=2, patience=2, progress=False)
    assert result.stopped_early and result.steps == 8  # evaluations after steps 2, 4, 6, 8; best at 4
    assert result.metrics == [(2, 0.1), (4, 0.5), (6, 0.4), (8, 0.45)]
    assert (result.best_metric, result.best_step) == (0.5, 4)
    assert calls == [False] * 4 and model.training  # fit restores the mode the model had (train)


def test_early_stopping_mode_min_and_min_delta(few_batches):
    eval_fn, _ = _scripted([1.0, 0.8, 0.79, 0.795, 0.5])
    result = fit(make_mlp(), few_batches, epochs=10, eval_fn=eval_fn, mode="min", min_delta=0.05, patience=2,
                 progress=False)  # one evaluation per epoch; 0.79 is not 0.05 better than 0.8
    assert result.stopped_early and result.steps == 4 * 5 and result.epochs == 4
    assert (result.best_metric, result.best_step) == (0.8, 10)


def test_restore_best_loads_the_weights_of_the_best_evaluation(few_batches):
    snapshots: list[torch.Tensor] = []
    values = [0.2, 0.9, 0.3, 0.4, 0.5]

    def eval_fn(model: nn.Module) -> float:
        snapshots.append(model[1].weight.detach().clone())
        return values[len(snapshots) - 1]

    model = make_mlp().eval()
    result = fit(model, few_batches, epochs=5, eval_fn=eval_fn, restore_best=True, progress=False)
    assert not result.stopped_early and result.best_step == 10 and len(snapshots) == 5
    assert torch.equal(model[1].weight, snapshots[1]) and not torch.equal(model[1].weight, snapshots[-1])
    assert not model.training  # it came in eval mode


def test_seeded_runs_are_reproducible_and_leave_the_callers_rng_alone(digits):
    x, y, _, _ = digits
    loader = DataLoader(TensorDataset(x[:256], y[:256]), batch_size=32, shuffle=True)  # shuffled by torch's RNG

    def run(seed: int) -> tuple[list[float], torch.Tensor, torch.Tensor]:
        model = make_mlp(dropout=0.3)  # (make_mlp seeds torch itself)
        torch.manual_seed(123)
        result = fit(model, loader, epochs=2, seed=seed, progress=False)
        return result.losses, model[4].weight.detach().clone(), torch.rand(3)

    a_losses, a_weight, drawn_after_fit = run(7)
    torch.manual_seed(123)
    assert torch.equal(drawn_after_fit, torch.rand(3))  # fit ran on a forked random state
    b_losses, b_weight, _ = run(7)
    c_losses, _, _ = run(8)
    assert a_losses == b_losses and torch.equal(a_weight, b_weight)
    assert c_losses != a_losses


def test_dict_batches_train_with_the_models_own_loss():
    class WithLoss(nn.Module):  # Hugging Face style: keyword inputs, labels in, .loss out
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            logits = self.fc(x)
            return {"logits": logits, "loss": nn.functional.cross_entropy(logits, labels)}

    torch.manual_seed(0)
    x = torch.randn(64, 4)
    batches = [{"x": x[i:i + 16], "labels": x[i:i + 16].argmax(1).clamp(max=2)} for i in range(0, 64, 16)]
    result = fit(WithLoss(), batches, epochs=30, lr=5e-2, progress=False)
    assert result.steps == 120 and result.final_loss < result.losses[0] / 3


def test_progress_bar_is_silent_when_disabled(few_batches, capsys):
    fit(make_mlp(), few_batches, progress=False)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_num_threads_is_restored(few_batches):
    threads = torch.get_num_threads()
    seen: list[int] = []
    fit(make_mlp(), few_batches, num_threads=1, on_step=lambda s, loss: seen.append(torch.get_num_threads()),
        progress=False)
    assert set(seen) == {1} and torch.get_num_threads() == threads
