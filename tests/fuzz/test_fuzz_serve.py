"""Requests to ``slimkit serve`` (the Starlette app through its test client): any route, method, body and header.

A case passes when the server answers below 500; a 4xx on a model route is JSON whose ``error`` names the
field or limit at fault. Two apps: a smashed tiny BERT behind an embedding cache and a dynamic batcher (the
vocabulary and length limits come from its config) and a bare module that declares no limits at all.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient
from torch import nn

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.serve import build_app
from tests.fuzz._fuzz import examples, tried
from tests.fuzz.test_fuzz_smash_config import json_values

ROUTES = ["/embed", "/predict", "/generate", "/health", "/metrics", "/", "/embed/", "/nope"]
MODEL_ROUTES = ("/embed", "/predict")
WORDS = ("inputs", "JSON", "token", "limit", "tokenizer", "vocabulary", "list", "route", "field", "max_new_tokens",
         "stream")


class BareEncoder(nn.Module):
    """Token ids -> per-token states, with no config: the server knows no vocabulary or length limit."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(40, 8)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.embed(input_ids)


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    base = zoo.load("tiny_bert").model.eval()
    cfg = SmashConfig({"embedding_cache": {"max_entries": 64}, "dynamic_batch": {"max_wait_ms": 1.0}}, device="cpu")
    folder = tmp_path_factory.mktemp("served") / "tiny_bert"
    smash(base, cfg, verbose=False).save_pretrained(folder)
    smashed = SmashedModel.from_pretrained(folder)
    with TestClient(build_app(smashed, max_length=32, max_inputs=8)) as bert, \
            TestClient(build_app(BareEncoder().eval(), max_inputs=8)) as bare, \
            TestClient(build_app(_tiny_lm(tmp_path_factory), max_inputs=4, max_new_tokens=4)) as llama:
        yield {"bert": bert, "bare": bare, "llama": llama}


def _tiny_lm(tmp_path_factory) -> SmashedModel:
    loaded = zoo.load("tiny_llama")
    cfg = SmashConfig({"prefix_cache": {"min_prefix_tokens": 2}}, device="cpu")
    cfg.add_tokenizer(loaded.tokenizer)
    folder = tmp_path_factory.mktemp("served") / "tiny_llama"
    smash(loaded.model.eval(), cfg, verbose=False).save_pretrained(folder)
    return SmashedModel.from_pretrained(folder)


token_lists = st.lists(st.one_of(st.integers(-3, 300), st.integers(-2**70, 2**70), st.booleans(), st.floats(),
                                 st.text(max_size=3), st.none()), max_size=40)
bodies = st.one_of(
    st.fixed_dictionaries({"inputs": st.lists(st.lists(st.integers(0, 39), min_size=1, max_size=8), min_size=1,
                                              max_size=4)}),
    st.fixed_dictionaries({"inputs": st.lists(token_lists, max_size=10)}),
    st.fixed_dictionaries({"inputs": st.lists(st.lists(st.one_of(st.integers(-5, 60), st.integers(-2**70, 2**70)),
                                                       min_size=1, max_size=6), min_size=1, max_size=3)}),
    st.fixed_dictionaries({"inputs": st.one_of(st.lists(st.text(max_size=20), max_size=3), json_values)},
                          optional={"extra": json_values}),
    json_values,
).map(lambda b: json.dumps(b).encode())
raw_bodies = st.one_of(bodies, bodies, st.binary(max_size=60), bodies.map(lambda b: b[: len(b) // 2]),
                       st.just(b"[" * 5000), st.just(b'{"inputs": [[' + b"1," * 5000 + b"1]]}"))


generate_bodies = st.fixed_dictionaries(
    {"inputs": st.one_of(st.lists(st.text(max_size=12), min_size=1, max_size=2), json_values)},
    optional={"max_new_tokens": st.one_of(st.integers(-2, 6), st.integers(-2**70, 2**70), json_values),
              "stream": st.one_of(st.booleans(), json_values), "extra": json_values},
).map(lambda b: json.dumps(b).encode())


@examples(550)
@given(st.sampled_from(["bert", "bare", "llama"]), st.sampled_from(["POST", "GET", "PUT", "DELETE"]),
       st.sampled_from(ROUTES), raw_bodies,
       st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded", ""]))
def test_any_request_gets_an_answer_below_500(clients, app, method, route, body, content_type):
    tried("server")
    response = clients[app].request(method, route, content=body, headers={"content-type": content_type})
    assert response.status_code < 500, (response.status_code, response.text[:300])
    if route in MODEL_ROUTES and method == "POST":
        payload = response.json()
        if response.status_code == 200:
            rows = payload["embeddings"] if route == "/embed" else payload["outputs"]
            assert len(rows) == len(json.loads(body)["inputs"])
        else:
            assert 400 <= response.status_code < 500 and any(w in payload["error"] for w in WORDS), payload


@examples(550)
@given(st.one_of(generate_bodies, raw_bodies))
def test_any_generate_request_gets_an_answer_below_500(clients, body):
    tried("server /generate")
    response = clients["llama"].post("/generate", content=body, headers={"content-type": "application/json"})
    assert response.status_code < 500, (response.status_code, response.text[:300])
    if response.status_code == 200:
        if response.headers["content-type"].startswith("application/x-ndjson"):
            lines = [json.loads(line) for line in response.text.splitlines() if line]
            assert lines and lines[-1]["done"] is True, lines[-1:]
        else:
            payload = response.json()
            assert len(payload["outputs"]) == len(json.loads(body)["inputs"])
            assert all(len(tokens) <= 4 for tokens in payload["tokens"])
    else:
        assert 400 <= response.status_code < 500
        assert any(w in response.json()["error"] for w in WORDS), response.text[:300]
