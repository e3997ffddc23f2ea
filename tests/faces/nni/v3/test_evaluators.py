"""NNI 3.0's evaluators: the user's loop trains, a pruner patches its loss and optimizer step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.errors import ConfigError, MissingPackageError
from slimkit.faces.nni import trace
from slimkit.faces.nni.v3 import LightningEvaluator, OptimizerRelay, TorchEvaluator, TransformersEvaluator
from slimkit.faces.nni.v3.pruning import TaylorPruner
from tests.faces.nni.digits import DigitCNN
from tests.faces.nni.v3.loop import make_evaluator, make_training_func, training_step


def test_torch_evaluator_trains_the_steps_asked_with_the_patched_loss_and_step(digits):
    torch.manual_seed(0)
    model, losses, order = DigitCNN(), [], []
    evaluator = make_evaluator(model, digits, losses=losses)
    evaluator.bind_model(model)
    evaluator.train(max_steps=3)
    assert len(losses) == 3 and evaluator.steps_taken == 3
    plain = losses[-1]
    evaluator.patch_loss(lambda loss, batch: loss + 100.0)
    evaluator.patch_optimizer_step([lambda: order.append("before")], [lambda: order.append("after")])
    evaluator.train(max_steps=2)
    assert len(losses) == 5 and evaluator.steps_taken == 5
    assert losses[-1] > 100.0 > plain  # the training loop saw the patched loss
    assert order == ["before", "after"] * 2
    evaluator.unbind_model()  # patches go with the model
    evaluator.bind_model(model)
    evaluator.train(max_steps=1)
    assert losses[-1] < 100.0 and order == ["before", "after"] * 2
    assert "step" not in vars(evaluator.optimizers[0])  # the optimizer's own step is back


def test_the_relay_hands_each_real_step_to_what_an_engine_patched_around_it(digits):
    model = DigitCNN()
    evaluator, relay, seen = make_evaluator(model, digits), OptimizerRelay(), []
    real = relay.step

    def hooked(*args, **kwargs):
        seen.append(float(model.conv1.weight.grad.abs().sum()))  # gradients are there before the real step
        return real(*args, **kwargs)

    relay.step = hooked
    evaluator.bind_model(model)
    evaluator.relay_optimizer_step(relay)
    before = model.conv1.weight.detach().clone()
    evaluator.train(max_steps=4)
    assert len(seen) == 4 and all(g > 0 for g in seen)
    assert not torch.equal(before, model.conv1.weight)  # the real step ran through the relay
    assert relay.step() is None  # outside training the relay steps nothing


def test_torch_evaluator_passes_lr_schedulers_and_evaluates(digits):
    model = DigitCNN()
    optimizer = trace(torch.optim.SGD)(model.parameters(), lr=0.1)
    scheduler = trace(torch.optim.lr_scheduler.StepLR)(optimizer, step_size=1, gamma=0.5)
    evaluator = TorchEvaluator(make_training_func(digits[0][:2]), optimizer, training_step, scheduler,
                               evaluating_func=lambda m: {"default": 0.5, "loss": 1.0})
    evaluator.bind_model(model)
    evaluator.train(max_epochs=2)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.025)
    assert evaluator.evaluate() == (0.5, {"default": 0.5, "loss": 1.0})


def test_torch_evaluator_refuses_what_is_not_an_optimizer():
    with pytest.raises(ConfigError, match="optimizers must be torch.optim.Optimizer"):
        TorchEvaluator(make_training_func([]), [nn.Linear(2, 2)], training_step)
    with pytest.raises(ConfigError, match="training_step must be a function"):
        TorchEvaluator(make_training_func([]), torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1), 3)
    evaluator = TorchEvaluator(make_training_func([]), torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1),
                               training_step)
    with pytest.raises(ConfigError, match="no model bound"):
        evaluator.train(max_steps=1)


def test_lightning_evaluator_says_lightning_is_missing(monkeypatch):
    import slimkit.faces.nni.v3.lightning_evaluator as module

    def no_lightning(name, *args, **kwargs):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(module.importlib, "import_module", no_lightning)
    with pytest.raises(MissingPackageError, match="pip install slimkit\\[lightning\\].*TorchEvaluator"):
        LightningEvaluator(object(), object())


def _tiny_bert_trainer(tmp_path):
    """A real transformers.Trainer over a one-layer BERT built from a config, on 16 random rows."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, num_labels=2)
    model = transformers.BertForSequenceClassification(config)
    rows = [{"input_ids": torch.randint(0, 40, (8,)), "attention_mask": torch.ones(8, dtype=torch.long),
             "labels": torch.tensor(i % 2)} for i in range(16)]
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=50,
                                          learning_rate=1e-3, report_to=[], save_strategy="no", use_cpu=True,
                                          logging_strategy="no", disable_tqdm=True)
    return trace(transformers.Trainer)(model=model, args=args, train_dataset=rows)


def test_transformers_evaluator_trains_a_real_trainer_with_the_patched_loss(tmp_path):
    trainer = _tiny_bert_trainer(tmp_path)
    model = trainer.model
    evaluator, extra = TransformersEvaluator(trainer), []

    def add(loss, batch):
        extra.append(int(batch["input_ids"].shape[0]))
        return loss + 0.0 * loss

    evaluator.bind_model(model)
    evaluator.patch_loss(add)
    order = []
    evaluator.patch_optimizer_step([lambda: order.append("b")], [lambda: order.append("a")])
    evaluator.train(max_steps=3)
    assert evaluator.steps_taken == 3 and trainer.state.global_step == 3
    assert extra == [4, 4, 4] and order == ["b", "a"] * 3
    assert trainer.args.max_steps == 50  # the trainer's own duration comes back
    with pytest.raises(ConfigError, match="prune that same model"):
        evaluator.bind_model(nn.Linear(2, 2))
    with pytest.raises(ConfigError, match="needs a transformers.Trainer"):
        TransformersEvaluator(object())


def test_taylor_pruner_collects_its_statistics_from_a_transformers_trainer(tmp_path):
    trainer = _tiny_bert_trainer(tmp_path)
    evaluator = TransformersEvaluator(trainer)
    config = [{"op_types": ["Linear"], "op_names_re": [r".*intermediate\.dense"], "sparse_ratio": 0.5}]
    pruner = TaylorPruner(trainer.model, config, evaluator, training_steps=3)
    _, masks = pruner.compress()
    assert evaluator.steps_taken == 3
    assert [w.contribution_batches for w in pruner.get_modules_wrapper()] == [3]
    mask = masks["bert.encoder.layer.0.intermediate.dense"]["weight"]
    assert tuple(mask.shape) == (32, 16) and int(mask.any(dim=1).sum()) == 16
