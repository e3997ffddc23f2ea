"""``/generate``: greedy generation for causal LMs, whole or streamed token by token, stoppable mid-stream."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import torch
from starlette.concurrency import run_in_threadpool
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from slimkit.serve.errors import RequestError

GENERATE_FIELDS = ("inputs", "max_new_tokens", "stream")
GENERATE_ACCEPTED = ("'inputs' (a non-empty list of prompts: strings when the model was saved with a tokenizer, "
                     "else token-id lists), optional 'max_new_tokens' (an integer, default {default}, at most "
                     "{limit}) and optional 'stream' (true for one JSON line per generated token)")


def can_generate(model: Any) -> bool:
    """True for Hugging Face causal LMs (and SmashedModels around one)."""
    check = getattr(model, "can_generate", None)
    return callable(check) and bool(check()) and callable(getattr(model, "generate", None))


class _Cancelled(StoppingCriteria):
    """Stops generation at the next token once ``event`` is set (the client went away)."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


class TokenQueue(BaseStreamer):
    """A transformers streamer that hands each new token id to an asyncio queue (the prompt is skipped)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.queue = loop, asyncio.Queue()
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        """Called by ``generate`` with the prompt first, then with each new token."""
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            self.loop.call_soon_threadsafe(self.queue.put_nowait, int(token))

    def end(self) -> None:
        """Called by ``generate`` when it stops."""
        self.loop.call_soon_threadsafe(self.queue.put_nowait, None)


class Generator:
    """Greedy ``generate`` for one prompt at a time (so a prefix cache on the model is used), with limits."""

    def __init__(self, model: Any, tokenizer: Any, max_length: int | None, default_new_tokens: int = 32,
                 max_new_tokens: int = 512) -> None:
        self.model, self.tokenizer, self.max_length = model, tokenizer, max_length
        self.default_new_tokens, self.max_new_tokens = default_new_tokens, max_new_tokens
        config = getattr(model, "config", None)
        pad = getattr(config, "pad_token_id", None)
        eos = getattr(config, "eos_token_id", None)
        eos = eos[0] if isinstance(eos, list) and eos else eos
        self.pad_token_id = pad if isinstance(pad, int) else eos if isinstance(eos, int) else 0
        self._lock = threading.Lock()
        self.generations = self.stopped = self.new_tokens = 0

    def stats(self) -> dict[str, int]:
        """Prompts generated, how many were stopped early because their client went away, new tokens in all."""
        with self._lock:
            return {"generations": self.generations, "stopped_by_disconnect": self.stopped,
                    "new_tokens": self.new_tokens}

    def accepted(self) -> str:
        """The fields /generate accepts, in words."""
        return GENERATE_ACCEPTED.format(default=self.default_new_tokens, limit=self.max_new_tokens)

    def options(self, body: Any) -> tuple[int, bool]:
        """``(max_new_tokens, stream)`` from a request body, or a RequestError naming what is accepted."""
        if not isinstance(body, dict) or "inputs" not in body or set(body) - set(GENERATE_FIELDS):
            got = sorted(body) if isinstance(body, dict) else type(body).__name__
            raise RequestError(422, f"Send a JSON object with {self.accepted()}; got {got}.")
        new = body.get("max_new_tokens", self.default_new_tokens)
        if type(new) is not int or not 1 <= new <= self.max_new_tokens:
            raise RequestError(422, f"'max_new_tokens' must be an integer from 1 to {self.max_new_tokens}; "
                                    f"got {new!r}.")
        stream = body.get("stream", False)
        if type(stream) is not bool:
            raise RequestError(422, f"'stream' must be true or false; got {stream!r}.")
        return new, stream

    def check_length(self, ids: list[list[int]], new_tokens: int) -> None:
        """413 when a prompt plus the new tokens would pass the model's maximum length."""
        longest = max(len(x) for x in ids)
        if self.max_length is not None and longest + new_tokens > self.max_length:
            raise RequestError(413, f"An input has {longest} tokens and asks for {new_tokens} new ones; the limit is "
                                    f"{self.max_length} tokens in all (prompt + max_new_tokens).")

    def generate(self, ids: list[int], new_tokens: int, streamer: BaseStreamer | None = None,
                 stop: threading.Event | None = None) -> list[int]:
        """The greedy continuation of ``ids`` (new token ids only), as ``model.generate`` gives it."""
        prompt = torch.tensor([ids], dtype=torch.long)
        criteria = StoppingCriteriaList([_Cancelled(stop)]) if stop is not None else None
        with torch.inference_mode():
            out = self.model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                                      do_sample=False, pad_token_id=self.pad_token_id, streamer=streamer,
                                      stopping_criteria=criteria)
        tokens = out[0, len(ids):].tolist()
        with self._lock:
            self.generations += 1
            self.new_tokens += len(tokens)
            self.stopped += stop is not None and stop.is_set() and len(tokens) < new_tokens
        return tokens

    async def generate_unless_gone(self, prompts: list[list[int]], new_tokens: int,
                                   gone: Callable[[], Awaitable[object]]) -> list[list[int]] | None:
        """The greedy continuation of each prompt, or None once ``gone()`` returns (the client disconnected).

        ``gone`` is awaited beside the generation (e.g. the ASGI receive that answers ``http.disconnect``); when it
        returns, the generation in flight stops at its next token and its worker thread is free again.
        """
        stop = threading.Event()

        async def watch() -> None:
            await gone()
            stop.set()

        watcher = asyncio.ensure_future(watch())
        try:
            results = []
            for ids in prompts:
                tokens = await run_in_threadpool(self.generate, ids, new_tokens, None, stop)
                if stop.is_set():
                    return None
                results.append(tokens)
            return results
        finally:
            watcher.cancel()

    def _generate_then_end(self, ids: list[int], new_tokens: int, streamer: TokenQueue,
                           stop: threading.Event) -> list[int]:
        try:
            return self.generate(ids, new_tokens, streamer, stop)
        finally:  # also when generate fails before its streamer's end(): the reader must not wait forever
            streamer.end()

    def text(self, tokens: list[int]) -> str:
        """Decoded text of generated tokens (special tokens dropped)."""
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    async def stream(self, prompts: list[list[int]], new_tokens: int, as_text: bool) -> AsyncIterator[bytes]:
        """NDJSON lines: ``{"index", "token"[, "text"]}`` per new token, then ``{"index", "done", "output"...}``.

        Prompts run one after another. When the client disconnects the pending generation is stopped at its next
        token (the task running this iterator is cancelled; ``finally`` sets the stop event).
        """
        loop = asyncio.get_running_loop()
        for index, ids in enumerate(prompts):
            streamer, stop = TokenQueue(loop), threading.Event()
            job = loop.run_in_executor(None, self._generate_then_end, ids, new_tokens, streamer, stop)
            tokens: list[int] = []
            shown = ""
            try:
                while (token := await streamer.queue.get()) is not None:
                    tokens.append(token)
                    line: dict[str, Any] = {"index": index, "token": token}
                    if as_text:
                        text = self.text(tokens)
                        if not text.endswith("\ufffd") and text.startswith(shown):  # a whole character is ready
                            line["text"], shown = text[len(shown):], text
                    yield (json.dumps(line) + "\n").encode()
                try:
                    await job
                except Exception as exc:  # noqa: BLE001 - the stream reports the failure, never a traceback
                    yield (json.dumps({"index": index, "error": f"generation failed ({type(exc).__name__})"})
                           + "\n").encode()
                    return
            finally:
                stop.set()
            output: Any = self.text(tokens) if as_text else tokens
            yield (json.dumps({"index": index, "done": True, "output": output, "tokens": tokens}) + "\n").encode()


__all__ = ["GENERATE_FIELDS", "Generator", "TokenQueue", "can_generate"]
