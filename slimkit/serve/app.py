"""The HTTP app: ``/embed``, ``/predict``, ``/health``, ``/metrics`` for a smashed model (Starlette)."""

from __future__ import annotations

import json
import time
from typing import Any

import torch
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from slimkit.compression.batching import QueueFullError
from slimkit.serve.metrics import ServeMetrics
from slimkit.utils import main_tensor, run_model

ACCEPTED = ("'inputs': a non-empty list of strings (when the model was saved with a tokenizer) or of token-id "
            "lists")


class RequestError(Exception):
    """A request the server refuses: HTTP ``status`` and a message saying what to send instead."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _limits(model: Any, max_length: int | None) -> tuple[int | None, int | None]:
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int) and isinstance(model, torch.nn.Module):  # no config: the first embedding's rows
        vocab = next((m.num_embeddings for m in model.modules() if isinstance(m, torch.nn.Embedding)), None)
    return max_length or getattr(config, "max_position_embeddings", None), vocab


class ModelRunner:
    """Validates request bodies, tokenizes, runs the model (one call per request) and shapes the answers."""

    def __init__(self, model: Any, tokenizer: Any = None, max_length: int | None = None, max_inputs: int = 256) -> None:
        self.model, self.tokenizer, self.max_inputs = model, tokenizer, max_inputs
        self.max_length, self.vocab_size = _limits(model, max_length)

    def parse(self, body: Any) -> list[Any]:
        """The request's inputs, or a RequestError (422 naming the accepted fields, 413 over a limit)."""
        if not isinstance(body, dict) or set(body) != {"inputs"}:
            got = sorted(body) if isinstance(body, dict) else type(body).__name__
            raise RequestError(422, f"Send a JSON object with exactly one field, {ACCEPTED}; got {got}.")
        inputs = body["inputs"]
        if not isinstance(inputs, list) or not inputs:
            raise RequestError(422, f"'inputs' must be a non-empty list; {ACCEPTED}.")
        if len(inputs) > self.max_inputs:
            raise RequestError(413, f"{len(inputs)} inputs in one request; the limit is {self.max_inputs}.")
        if all(isinstance(x, str) for x in inputs):
            if self.tokenizer is None:
                raise RequestError(422, "This model was saved without a tokenizer: send token ids, "
                                        "e.g. {'inputs': [[101, 2023, 102]]}.")
            return [self.tokenizer(x)["input_ids"] for x in inputs]
        ok = all(isinstance(x, list) and x and all(type(t) is int for t in x) for x in inputs)
        if not ok:
            raise RequestError(422, f"Every item of 'inputs' must be of the same kind; {ACCEPTED} (non-empty).")
        limit = self.vocab_size if self.vocab_size is not None else 2**63  # int64 holds every id below it
        bad = [t for x in inputs for t in x if not 0 <= t < limit]
        if bad:
            raise RequestError(422, f"Token id {bad[0]} is outside the vocabulary [0, {limit}).")
        return inputs

    def check_length(self, ids: list[list[int]]) -> None:
        """413 when an input is longer than the model accepts."""
        longest = max(len(x) for x in ids)
        if self.max_length is not None and longest > self.max_length:
            raise RequestError(413, f"An input has {longest} tokens; the limit is {self.max_length}.")

    def run(self, ids: list[list[int]]) -> torch.Tensor:
        """Right-pad the request's token ids, run the model once, return its main output tensor."""
        longest = max(len(x) for x in ids)
        tensor = torch.zeros(len(ids), longest, dtype=torch.long)
        mask = torch.zeros_like(tensor)
        for i, x in enumerate(ids):
            tensor[i, : len(x)] = torch.tensor(x)
            mask[i, : len(x)] = 1
        with torch.inference_mode():
            out = main_tensor(run_model(self.model, {"input_ids": tensor, "attention_mask": mask}))
            if out.dim() == 3:  # per-token states: mean over the real tokens
                weights = mask.unsqueeze(-1).to(out.dtype)
                out = (out * weights).sum(1) / weights.sum(1).clamp(min=1)
        return out.float()


def build_app(model: Any, tokenizer: Any = None, max_length: int | None = None, max_inputs: int = 256) -> Starlette:
    """A Starlette app serving ``model`` (a SmashedModel or any module taking ``input_ids``/``attention_mask``)."""
    runner, metrics = ModelRunner(model, tokenizer, max_length, max_inputs), ServeMetrics()

    async def answer(request: Request, route: str, shape: Any) -> JSONResponse:
        start, count = time.perf_counter(), 0
        try:
            try:
                body = json.loads(await request.body())
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise RequestError(400, f"The body is not valid JSON ({exc}); send {{{ACCEPTED}}}.") from exc
            except RecursionError as exc:
                raise RequestError(400, f"The body's JSON nests too deeply to read; send {{{ACCEPTED}}}.") from exc
            ids = await run_in_threadpool(runner.parse, body)
            runner.check_length(ids)
            count = len(ids)
            output = await run_in_threadpool(runner.run, ids)
            response = JSONResponse(shape(output))
        except RequestError as exc:
            response = JSONResponse({"error": str(exc)}, status_code=exc.status)
        except QueueFullError as exc:
            response = JSONResponse({"error": str(exc)}, status_code=503, headers={"Retry-After": "1"})
        except Exception as exc:  # noqa: BLE001 - a server answers, it never shows a traceback
            response = JSONResponse({"error": f"The model failed on this request ({type(exc).__name__})."},
                                    status_code=500)
        metrics.record(route, response.status_code, time.perf_counter() - start, count)
        return response

    async def embed(request: Request) -> JSONResponse:
        return await answer(request, "/embed", lambda out: {"embeddings": out.tolist()})

    async def predict(request: Request) -> JSONResponse:
        def shape(out: torch.Tensor) -> dict[str, Any]:
            result: dict[str, Any] = {"outputs": out.tolist()}
            if out.dim() == 2:
                result["predictions"] = out.argmax(-1).tolist()
            return result

        return await answer(request, "/predict", shape)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "algorithms": list(getattr(model, "algorithms", []))})

    async def metrics_route(request: Request) -> JSONResponse:
        snapshot = metrics.snapshot()
        for name in ("dynamic_batcher", "embedding_cache", "prefix_cache"):
            part = getattr(model, name, None)
            if part is not None and hasattr(part, "stats"):
                snapshot[name] = part.stats()
        return JSONResponse(snapshot)

    routes = [Route("/embed", embed, methods=["POST"]), Route("/predict", predict, methods=["POST"]),
              Route("/health", health, methods=["GET"]), Route("/metrics", metrics_route, methods=["GET"])]
    return Starlette(routes=routes)
