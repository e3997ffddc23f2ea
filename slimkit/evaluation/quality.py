"""Quality of a (smashed) model: fidelity to its base model, accuracy, perplexity."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from slimkit.data.batches import LABEL_KEYS, split_batch
from slimkit.errors import DataError, check_int
from slimkit.evaluation.runtime import eval_mode
from slimkit.utils import Inputs, main_tensor, model_device, move_inputs, run_model


@dataclass
class Fidelity:
    """How closely a smashed model's main output follows the base model's, sample by sample."""

    cosine_mean: float
    cosine_min: float
    max_abs: float
    mean_abs: float

    def to_dict(self) -> dict[str, float]:
        """Plain dict of the fields."""
        return asdict(self)


def _output_of(model: Any, inputs: Inputs) -> torch.Tensor:
    with torch.inference_mode(), eval_mode(model):
        out = main_tensor(run_model(model, move_inputs(inputs, model_device(model))))
    if out.is_quantized:
        out = out.dequantize()
    return out.detach().to("cpu", torch.float64)


def fidelity(base: Any, smashed: Any, inputs: Inputs) -> Fidelity:
    """Compare the main output tensors of ``base`` and ``smashed`` on the same ``inputs``.

    Each sample (all dims but the first flattened) gives one cosine similarity; the maths runs in float64
    so that low-precision outputs are judged, not the arithmetic. Two all-zero samples count as cosine 1.
    """
    a, b = _output_of(base, inputs), _output_of(smashed, inputs)
    if a.shape != b.shape:
        raise DataError(
            f"fidelity needs outputs of the same shape, got base {tuple(a.shape)} and smashed {tuple(b.shape)}; "
            "compare models that produce the same output (e.g. the same head)."
        )
    if a.dim() < 2:
        a, b = a.reshape(1, -1), b.reshape(1, -1)
    a, b = a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)
    na, nb = a.norm(dim=1), b.norm(dim=1)
    cos = (a * b).sum(dim=1) / (na * nb).clamp_min(1e-300)
    cos = torch.where((na == 0) & (nb == 0), torch.ones_like(cos), cos).clamp(-1.0, 1.0)
    diff = (a - b).abs()
    return Fidelity(
        cosine_mean=float(cos.mean()),
        cosine_min=float(cos.min()),
        max_abs=float(diff.max()) if diff.numel() else 0.0,
        mean_abs=float(diff.mean()) if diff.numel() else 0.0,
    )


def _labelled(batch: Any) -> tuple[Inputs, Any]:
    inputs, labels = None, None
    if not isinstance(batch, (tuple, list)) or len(batch) == 2:  # a dict without a label key raises here
        inputs, labels = split_batch(batch, label_keys=LABEL_KEYS)
    if labels is None:
        raise DataError(
            f"accuracy needs batches that are (inputs, labels) pairs or dicts with 'label'/'labels', got a "
            f"{type(batch).__name__}{f' of length {len(batch)}' if isinstance(batch, (tuple, list)) else ''}; "
            "wrap your dataset so each batch is (x, y)."
        )
    return inputs, labels


def accuracy(model: Any, dataloader: Iterable, *, device: torch.device | str | None = None) -> float:
    """Fraction of labels equal to the argmax (last dim) of the model's main output over ``dataloader``.

    Batches are ``(inputs, labels)`` pairs or dicts with ``label``/``labels`` (other keys are passed as
    keyword arguments). Labels of -100 are ignored, so token-level tasks ([N, L] labels) work too.
    """
    device = torch.device(device) if device is not None else model_device(model)
    correct = total = 0
    with torch.inference_mode(), eval_mode(model):
        for batch in dataloader:
            inputs, labels = _labelled(batch)
            logits = main_tensor(run_model(model, move_inputs(inputs, device)))
            preds = logits.argmax(dim=-1).cpu()
            labels = torch.as_tensor(labels).cpu()
            if preds.shape != labels.shape:
                raise DataError(
                    f"Predictions have shape {tuple(preds.shape)} (argmax of output {tuple(logits.shape)}) but "
                    f"labels have shape {tuple(labels.shape)}; labels must be class indices matching the output."
                )
            valid = labels != -100
            correct += int((preds[valid] == labels[valid]).sum())
            total += int(valid.sum())
    if total == 0:
        raise DataError("accuracy got no labelled samples from the dataloader; pass a non-empty labelled dataset.")
    return correct / total


def _check_ids(ids: Any) -> torch.Tensor:
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point() or ids.shape[1] < 2:
        got = f"shape {tuple(ids.shape)} dtype {ids.dtype}" if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise DataError(
            f"perplexity needs integer token ids of shape [N, L] with L >= 2, got {got}; "
            "tokenize the text and pass tokenizer(...)['input_ids']."
        )
    return ids


def _id_batches(input_ids: Any, batch_size: int) -> Iterable[tuple[torch.Tensor, torch.Tensor | None]]:
    if isinstance(input_ids, torch.Tensor):
        ids = _check_ids(input_ids.unsqueeze(0) if input_ids.dim() == 1 else input_ids)
        for start in range(0, ids.shape[0], batch_size):
            yield ids[start : start + batch_size], None
        return
    for batch in input_ids:
        mask = None
        if isinstance(batch, Mapping):
            if "input_ids" not in batch:
                raise DataError(f"A dict batch needs 'input_ids', got keys {sorted(batch)}.")
            ids, mask = batch["input_ids"], batch.get("attention_mask")
        elif isinstance(batch, (tuple, list)):
            ids = batch[0]
        else:
            ids = batch
        yield (ids.unsqueeze(0) if isinstance(ids, torch.Tensor) and ids.dim() == 1 else ids), mask


def perplexity(model: Any, input_ids: Any, *, batch_size: int = 1) -> float:
    """Perplexity of a causal language model: ``exp`` of the mean next-token negative log-likelihood.

    ``input_ids`` is an integer tensor ``[N, L]`` (split into batches of ``batch_size``) or an iterable of
    such batches (tensors, tuples whose first item is the ids, or dicts with ``input_ids`` and optional
    ``attention_mask`` whose zeros are not scored). Logits at position t predict token t+1 (HF-style shift).
    """
    check_int("batch_size", batch_size, error=DataError)
    device = model_device(model)
    nll = 0.0
    count = 0
    with torch.inference_mode(), eval_mode(model):
        for ids, mask in _id_batches(input_ids, batch_size):
            ids = _check_ids(ids).to(device)
            logits = main_tensor(run_model(model, ids))
            if logits.dim() != 3 or logits.shape[:2] != ids.shape:
                raise DataError(
                    f"perplexity needs logits [N, L, vocab] for ids {tuple(ids.shape)}, got {tuple(logits.shape)}; "
                    "pass a causal language model (e.g. AutoModelForCausalLM)."
                )
            targets = ids[:, 1:]
            losses = F.cross_entropy(
                logits[:, :-1].float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none"
            )
            if mask is not None:
                keep = torch.as_tensor(mask, device=losses.device)[:, 1:].reshape(-1).bool()
                losses = losses[keep]
            nll += float(losses.double().sum())
            count += losses.numel()
    if count == 0:
        raise DataError("perplexity got no tokens to score; pass at least one sequence of 2 or more tokens.")
    return math.exp(nll / count)
