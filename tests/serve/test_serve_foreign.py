"""`slimkit serve` on another tool's checkpoint: a GPTQ folder loads onto packed layers and answers /generate."""

from __future__ import annotations

import httpx
import pytest
import torch
import uvicorn

import slimkit.serve as serve_module
from slimkit import SmashConfig, smash
from slimkit.engines.quantization.lowbit import PackedLinear
from slimkit.serve import build_app
from slimkit.zoo._hf import byte_tokenizer
from tests.engine.test_interop import tiny
from tests.serve.live import live_server


def test_serve_loads_a_gptq_checkpoint_and_generates(tmp_path, monkeypatch):
    cfg = SmashConfig({"rtn": {"bits": 4, "group_size": 32}}, device="cpu")
    cfg.add_tokenizer(byte_tokenizer())
    smashed = smash(tiny("llama"), cfg, verbose=False)
    smashed.save_pretrained(tmp_path / "g", format="gptq")
    captured = {}
    monkeypatch.setattr(serve_module, "build_app", lambda loader=None, **kw: captured.setdefault("loader", loader))
    monkeypatch.setattr(uvicorn.Server, "run", lambda self: None)
    serve_module.serve(tmp_path / "g", port=0)
    monkeypatch.undo()  # the live server below runs uvicorn for real
    model, tokenizer = captured["loader"]()
    assert tokenizer is not None and model.base_spec["source"]["format"] == "gptq"
    assert sum(isinstance(m, PackedLinear) for m in model.modules()) == 14
    with live_server(build_app(model, tokenizer=tokenizer, max_length=64)) as (url, _), \
            httpx.Client(base_url=url, timeout=60) as client:
        answer = client.post("/generate", json={"inputs": ["Hello"], "max_new_tokens": 4})
    ids = torch.tensor([byte_tokenizer()("Hello")["input_ids"]])
    expected = smashed.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                                      pad_token_id=0)[0, ids.shape[1]:].tolist()
    assert answer.status_code == 200 and answer.json()["tokens"] == [expected]


def test_serve_refuses_a_plain_folder(tmp_path):
    tiny("llama").save_pretrained(tmp_path / "plain")
    with pytest.raises(Exception, match="nor a compressed-tensors / GPTQ checkpoint"):
        serve_module.serve(tmp_path / "plain", port=0)
