"""SmashedModel: the smashed nn.Module plus everything needed to save it and rebuild it."""

from __future__ import annotations

import os
from typing import Any

import torch

from slimkit.config.smash_config import SmashConfig
from slimkit.core.coverage import coverage_summary
from slimkit.engine.interop import foreign_format, import_checkpoint, save_checkpoint
from slimkit.engine.model_card import build_card
from slimkit.engine.serialization import load_smashed, save_smashed
from slimkit.utils import model_device, move_inputs


class SmashedModel(torch.nn.Module):
    """An ``nn.Module`` whose forward is the smashed model's, carrying its SmashConfig and replay record.

    Attributes the wrapper does not have (``config``, ``generate``...) are looked up on the inner model.
    """

    def __init__(
        self,
        model: Any,
        smash_config: SmashConfig,
        applied: list[dict[str, Any]],
        base_spec: dict[str, Any],
        pre_apply_model: Any = None,
        saved_before: int | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.smash_config = smash_config
        #: One record per applied algorithm: name, group, save_fn, state (JSON), seconds (wall) and
        #: cpu_seconds (the process's user + system time, all threads).
        self.applied = applied
        self.base_spec = base_spec
        object.__setattr__(self, "_pre_apply_model", pre_apply_model)  # not a submodule: no double state
        self.saved_before = saved_before
        #: before/after figures ``slimkit smash`` measured (:func:`slimkit.engine.model_card.measurement_record`);
        #: the model card of every later save shows them
        self.measurements: dict[str, Any] | None = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the smashed model; tensor inputs are moved to the model's device first (outputs stay there)."""
        device = model_device(self.model)
        return self.model(*move_inputs(args, device), **move_inputs(kwargs, device))

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            inner = self._modules.get("model")
            if inner is None:
                raise
            return getattr(inner, name)

    @property
    def algorithms(self) -> list[str]:
        """Names of the applied algorithms in order."""
        return [a["name"] for a in self.applied]

    @property
    def coverage(self) -> dict[str, dict[str, Any]]:
        """What each weight quantizer quantized and left: ``{algorithm: coverage record}`` (empty without one).

        A record (:func:`slimkit.core.coverage.coverage`) has ``quantized_layers``, ``quantized_params``,
        ``linear_like_params``, ``share``, ``share_not_excluded``, ``by_kind`` and ``left`` (every layer kept in
        full precision with its reason); :meth:`coverage_report` prints it in words.
        """
        return {a["name"]: a["state"]["coverage"] for a in self.applied
                if isinstance(a.get("state"), dict) and "coverage" in a["state"]}

    def coverage_report(self) -> str:
        """The coverage of every weight quantizer in words, one line per fact (empty when none ran)."""
        return "\n".join(f"{name}: {line}" for name, record in self.coverage.items()
                         for line in coverage_summary(record))

    def save_pretrained(self, path: str | os.PathLike, allow_pickle: bool = False, format: str = "slimkit") -> None:
        """Save to directory ``path`` atomically, with a README.md model card.

        ``format="slimkit"`` (default): smash_config.json + model.safetensors (+ tokenizer), which
        :meth:`from_pretrained` reloads. ``format="compressed-tensors"`` or ``"gptq"``: a Hugging Face folder
        (config.json with its ``quantization_config``, safetensors shards, tokenizer) that transformers, vLLM and
        GPTQ runtimes open, for a transformers model quantized by rtn, gptq or awq (4/8 bits); anything the format
        cannot hold is refused, naming what it supports, before a file is written.
        """
        if format != "slimkit":
            save_checkpoint(self, path, format, self.measurements)
            return
        parts = (self.model, self.smash_config, self.applied, self.base_spec, self._pre_apply_model, self.saved_before)
        save_smashed(parts, path, allow_pickle=allow_pickle, readme=build_card(self, "slimkit", self.measurements))

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike, model: Any = None, allow_pickle: bool = False, device: str | None = None,
        trust_code: bool = False,
    ) -> SmashedModel:
        """Load a model saved by :meth:`save_pretrained`, or another tool's quantized checkpoint.

        The base architecture is rebuilt from its Hugging Face config or zoo name (or ``model=``: an instance or
        a factory of the original architecture), structural changes are replayed, weights load strictly. A save
        made from a ``package.module:factory`` model calls that factory only with ``trust_code=True``.

        A Hugging Face folder with a compressed-tensors (``pack-quantized``, int4/int8 weight-only) or GPTQ
        ``quantization_config`` (made by llm-compressor, GPTQModel, or slimkit's own export) loads onto slimkit's
        packed layers as it is, without re-quantizing; other quantization configs are refused naming the field.
        """
        if foreign_format(path) is not None:
            return cls(*import_checkpoint(path, device=device))
        return cls(*load_smashed(path, model=model, allow_pickle=allow_pickle, device=device, trust_code=trust_code))

    def extra_repr(self) -> str:
        """Show the applied algorithms in ``print(model)``."""
        return f"algorithms={self.algorithms}"
