"""``slimkit serve``: a saved model behind HTTP with its batcher and cacher (Starlette on uvicorn)."""

from __future__ import annotations

import os

from slimkit.engine import SmashedModel
from slimkit.serve.app import ModelRunner, RequestError, build_app
from slimkit.serve.metrics import ServeMetrics


def serve(path: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000, max_length: int | None = None,
          max_inputs: int = 256) -> None:
    """Load the model saved at ``path`` and serve it until interrupted (uvicorn, one process)."""
    import uvicorn  # noqa: PLC0415 - only serving needs it; slimkit[serve] installs it

    model = SmashedModel.from_pretrained(path)
    app = build_app(model, model.smash_config.tokenizer, max_length=max_length, max_inputs=max_inputs)
    uvicorn.run(app, host=host, port=port, log_level="info")


__all__ = ["ModelRunner", "RequestError", "ServeMetrics", "build_app", "serve"]
