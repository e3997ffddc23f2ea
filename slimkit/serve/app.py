"""The HTTP app: ``/embed``, ``/predict``, ``/generate``, ``/health``, ``/metrics`` for a smashed model (Starlette)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import torch
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from slimkit.errors import QueueFullError
from slimkit.serve.errors import RequestError
from slimkit.serve.generation import Generator, can_generate
from slimkit.serve.metrics import ServeMetrics
from slimkit.utils import main_tensor, run_model

ACCEPTED = ("'inputs': a non-empty list of strings (when the model was saved with a tokenizer) or of token-id "
            "lists")


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
            ids = self.tokenizer(inputs)["input_ids"]  # one call for all: fast tokenizers batch in Rust
            empty = [i for i, x in enumerate(ids) if not x]
            if empty:
                raise RequestError(422, f"inputs[{empty[0]}] ({inputs[empty[0]]!r}) has no tokens once tokenized; "
                                        "send non-empty text.")
            return ids
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


ROUTES = (("POST", "/embed"), ("POST", "/predict"), ("POST", "/generate"), ("GET", "/health"), ("GET", "/metrics"))
ROUTE_LIST = ", ".join(f"{method} {path}" for method, path in ROUTES)
LOADING_RETRY_S = 2


class ServedModel:
    """The model behind the app: given at once, or loaded in a background thread while requests get 503."""

    def __init__(self, model: Any, tokenizer: Any, max_length: int | None, max_inputs: int,
                 max_new_tokens: int) -> None:
        self.settings = (max_length, max_inputs, max_new_tokens)
        self.model: Any = None
        self.runner: ModelRunner | None = None
        self.generator: Generator | None = None
        self.error: str | None = None
        self.started = time.monotonic()
        if model is not None:
            self.install(model, tokenizer)

    def install(self, model: Any, tokenizer: Any) -> None:
        """Make ``model`` the one served (requests stop getting 503); the tokenizer defaults to the saved one."""
        if tokenizer is None:
            tokenizer = getattr(getattr(model, "smash_config", None), "tokenizer", None)
        max_length, max_inputs, max_new_tokens = self.settings
        runner = ModelRunner(model, tokenizer, max_length, max_inputs)
        if can_generate(model):
            self.generator = Generator(model, tokenizer, runner.max_length, min(32, max_new_tokens), max_new_tokens)
        self.model, self.runner = model, runner

    def load(self, loader: Callable[[], tuple[Any, Any]], on_error: Callable[[str], None] | None) -> None:
        """Run ``loader`` (returning ``(model, tokenizer)``) and install its model; keep its error otherwise."""
        try:
            self.install(*loader())
        except Exception as exc:  # noqa: BLE001 - reported by /health and every route, and to on_error
            self.error = f"{type(exc).__name__}: {exc}"
            if on_error is not None:
                on_error(self.error)

    def ready(self) -> ModelRunner:
        """The runner, or a 503 (with Retry-After while loading)."""
        if self.runner is not None:
            return self.runner
        if self.error is not None:
            raise RequestError(503, f"The model failed to load ({self.error}); fix the saved folder and restart.")
        waited = time.monotonic() - self.started
        raise RequestError(503, f"The model is still loading ({waited:.0f} s so far); retry in "
                                f"{LOADING_RETRY_S} s.", headers={"Retry-After": str(LOADING_RETRY_S)})


def _error(exc: Exception) -> JSONResponse:
    if isinstance(exc, RequestError):
        return JSONResponse({"error": str(exc)}, status_code=exc.status, headers=exc.headers)
    if isinstance(exc, QueueFullError):
        return JSONResponse({"error": str(exc)}, status_code=503, headers={"Retry-After": "1"})
    return JSONResponse({"error": f"The model failed on this request ({type(exc).__name__})."}, status_code=500)


async def _json_body(request: Request, accepted: str) -> Any:
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(400, f"The body is not valid JSON ({exc}); send {{{accepted}}}.") from exc
    except RecursionError as exc:
        raise RequestError(400, f"The body's JSON nests too deeply to read; send {{{accepted}}}.") from exc


def build_app(model: Any = None, tokenizer: Any = None, max_length: int | None = None, max_inputs: int = 256, *,
              loader: Callable[[], tuple[Any, Any]] | None = None, max_new_tokens: int = 512,
              on_load_error: Callable[[str], None] | None = None) -> Starlette:
    """A Starlette app serving ``model`` (a SmashedModel or any module taking ``input_ids``/``attention_mask``).

    With ``loader`` instead of a model, the app starts at once and loads in a background thread; until then
    every model route answers 503 with ``Retry-After``. ``/generate`` serves causal LMs (greedy, one prompt at a
    time so a prefix cache is used; ``"stream": true`` answers NDJSON, one line per token). On shutdown the
    in-flight requests finish (uvicorn drains them), then the model's batcher stops.
    """
    if (model is None) == (loader is None):
        raise ValueError("build_app needs exactly one of model= and loader=.")
    served, metrics = ServedModel(model, tokenizer, max_length, max_inputs, max_new_tokens), ServeMetrics()

    Handler = Callable[[Any, Request], Awaitable[tuple[Response, int]]]

    def model_route(route: str, handle: Handler) -> Callable[[Request], Awaitable[Response]]:
        """The endpoint of a model route: readiness and the JSON body checked, ``handle`` run, the answer counted."""
        async def answer(request: Request) -> Response:
            start, count = time.perf_counter(), 0
            try:
                served.ready()
                response, count = await handle(await _json_body(request, ACCEPTED), request)
            except Exception as exc:  # noqa: BLE001 - a server answers, it never shows a traceback
                response = _error(exc)
            if not isinstance(response, StreamingResponse):
                metrics.record(route, response.status_code, time.perf_counter() - start, count)
            return response

        return answer

    async def tensor_route(body: Any, shape: Callable[[torch.Tensor], dict[str, Any]]) -> tuple[Response, int]:
        runner = served.ready()

        def work() -> tuple[bytes, int]:  # one trip to a worker thread: parse, tokenize, run, serialise
            ids = runner.parse(body)
            runner.check_length(ids)
            out = shape(runner.run(ids))
            return json.dumps(out, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode(), len(ids)

        content, count = await run_in_threadpool(work)
        return Response(content, media_type="application/json"), count

    def predictions(out: torch.Tensor) -> dict[str, Any]:
        result: dict[str, Any] = {"outputs": out.tolist()}
        if out.dim() == 2:
            result["predictions"] = out.argmax(-1).tolist()
        return result

    async def disconnected(request: Request) -> None:
        """Returns once the client has gone (the body is read by then, so receive() waits for http.disconnect)."""
        while (await request.receive())["type"] != "http.disconnect":
            pass

    async def generate_body(body: Any, request: Request) -> tuple[Response, int]:
        runner, generator = served.ready(), served.generator
        if generator is None:
            raise RequestError(404, f"This model ({type(served.model).__name__}) does not generate text: /generate "
                                    f"serves causal LMs. Use POST /embed or POST /predict; routes: {ROUTE_LIST}.")
        new_tokens, stream = generator.options(body)
        ids = await run_in_threadpool(runner.parse, {"inputs": body["inputs"]})
        generator.check_length(ids, new_tokens)
        as_text = generator.tokenizer is not None and all(isinstance(x, str) for x in body["inputs"])
        if stream:
            return StreamingResponse(recorded(generator.stream(ids, new_tokens, as_text), len(ids)),
                                     media_type="application/x-ndjson"), len(ids)
        tokens = await generator.generate_unless_gone(ids, new_tokens, lambda: disconnected(request))
        if tokens is None:  # nobody to answer: stopped at the next token (nginx's code for a client gone)
            return JSONResponse({"error": "The client disconnected; generation stopped."}, status_code=499), len(ids)
        outputs = [generator.text(t) for t in tokens] if as_text else tokens
        return JSONResponse({"outputs": outputs, "tokens": tokens}), len(ids)

    async def recorded(lines: AsyncIterator[bytes], count: int) -> AsyncIterator[bytes]:
        start, status = time.perf_counter(), 200
        try:
            async for line in lines:
                yield line
        except BaseException:
            status = 499  # the client went away mid-stream (nginx's code for it)
            raise
        finally:
            metrics.record("/generate", status, time.perf_counter() - start, count)

    async def health(request: Request) -> JSONResponse:
        if served.runner is None:
            status = "failed" if served.error else "loading"
            return JSONResponse({"status": status, "error": served.error}, status_code=503,
                                headers={} if served.error else {"Retry-After": str(LOADING_RETRY_S)})
        return JSONResponse({"status": "ok", "algorithms": list(getattr(served.model, "algorithms", [])),
                             "generates": served.generator is not None})

    async def metrics_route(request: Request) -> JSONResponse:
        snapshot = metrics.snapshot()
        if served.generator is not None:
            snapshot["generate"] = served.generator.stats()
        for name in ("dynamic_batcher", "embedding_cache", "prefix_cache"):
            part = getattr(served.model, name, None)
            if part is not None and hasattr(part, "stats"):
                snapshot[name] = part.stats()
        return JSONResponse(snapshot)

    async def not_found(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 405:
            allowed = [m for m, p in ROUTES if p == request.url.path]
            message = f"{request.url.path} takes {' or '.join(allowed)}, not {request.method}; routes: {ROUTE_LIST}."
        else:
            message = f"No route {request.method} {request.url.path}; this server answers {ROUTE_LIST}."
        return JSONResponse({"error": message}, status_code=exc.status_code, headers=exc.headers)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if loader is not None:
            threading.Thread(target=served.load, args=(loader, on_load_error), name="slimkit-load", daemon=True).start()
        yield
        batcher = getattr(served.model, "dynamic_batcher", None)
        if batcher is not None and hasattr(batcher, "close"):
            await run_in_threadpool(batcher.close)

    handlers = {
        "/embed": model_route("/embed", lambda body, _: tensor_route(body, lambda out: {"embeddings": out.tolist()})),
        "/predict": model_route("/predict", lambda body, _: tensor_route(body, predictions)),
        "/generate": model_route("/generate", generate_body), "/health": health, "/metrics": metrics_route}
    routes = [Route(path, handlers[path], methods=[method]) for method, path in ROUTES]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: not_found})
