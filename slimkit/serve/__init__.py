"""``slimkit serve``: a saved model behind HTTP with its batcher and cacher (Starlette on uvicorn)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from slimkit.engine import SmashedModel
from slimkit.engine.interop import foreign_format
from slimkit.errors import SaveLoadError
from slimkit.serve.app import ModelRunner, ServedModel, build_app
from slimkit.serve.errors import RequestError
from slimkit.serve.generation import Generator
from slimkit.serve.metrics import ServeMetrics


def serve(path: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000, max_length: int | None = None,
          max_inputs: int = 256, max_new_tokens: int = 512, access_log: bool = False) -> None:
    """Serve the model saved at ``path`` until interrupted (uvicorn, one process).

    The server listens at once and loads the model in the background (requests meanwhile get 503 with
    Retry-After); a model that fails to load stops the server. SIGINT/SIGTERM finish in-flight requests first.
    uvicorn's per-request access log is off unless ``access_log`` (it costs CPU on every request; ``/metrics``
    counts requests by route and status instead).
    """
    import uvicorn  # noqa: PLC0415 - only serving needs it; slimkit[serve] installs it

    folder = Path(path)
    if not (folder / "smash_config.json").is_file() and foreign_format(folder) is None:
        raise SaveLoadError(f"{folder} is not a saved slimkit model (no smash_config.json there) nor a compressed-"
                            "tensors / GPTQ checkpoint; pass the folder that `slimkit smash --output DIR` or "
                            "SmashedModel.save_pretrained(DIR) wrote.")

    def load() -> tuple[SmashedModel, object]:
        model = SmashedModel.from_pretrained(folder)
        return model, model.smash_config.tokenizer

    def stop(error: str) -> None:
        print(f"slimkit: error: the model in {folder} failed to load: {error}", file=sys.stderr, flush=True)
        server.should_exit = True

    app = build_app(loader=load, max_length=max_length, max_inputs=max_inputs, max_new_tokens=max_new_tokens,
                    on_load_error=stop)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info", access_log=access_log))
    server.run()


__all__ = ["Generator", "ModelRunner", "RequestError", "ServeMetrics", "ServedModel", "build_app", "serve"]
