"""compressed-tensors and GPTQ checkpoints, written piece by piece: the one writer of both their saves.

Each piece (a streaming run's embedding, decoder block or head; a leaf module of an in-memory model) is turned
into the format's tensors (:func:`~.hf_checkpoint.checkpoint_blocks`: packed layers in the format's layout, float
modules as they are) and staged as its own safetensors file, with a small JSON record of its packed layers'
grids. A layer the format cannot hold exactly is refused as soon as it is written. ``finish`` decides the model's
schemes (one zero rule, one group rule: :func:`~.scheme.unify_schemes`), concatenates the staged pieces into
shards in bounded memory (zero points left out where the schemes are symmetric), and hands them to
:class:`~.hf_checkpoint.Shards`, which names them, writes the index and ``config.json``. The published folder is
what ``save_pretrained(DIR, format=...)`` writes: transformers and vLLM open it, and so does
``SmashedModel.from_pretrained``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from slimkit.core.io import save_tensors_atomic, write_json_atomic
from slimkit.engines.quantization.lowbit.linear import PackedLinear
from slimkit.formats.hf_checkpoint import DEFAULT_SHARD_BYTES, Shards, checkpoint_blocks, hf_config
from slimkit.formats.scheme import WeightScheme, own_scheme, plain_linears, unify_schemes
from slimkit.formats.slimkit_writer import concat_safetensors, tensor_names
from slimkit.formats.writer import RUN_FILE, ModelWriter, WriteContext, packed_on_meta

__all__ = ["HFCheckpointWriter"]

#: local name of the compressed-tensors zero points, left out for symmetric schemes
_ZERO_POINT = "weight_zero_point"


class HFCheckpointWriter(ModelWriter):
    """A Hugging Face folder in another tool's quantized layout, for the format object ``fmt`` (see the module doc)."""

    max_shard_bytes: int = DEFAULT_SHARD_BYTES
    piece_suffixes = (".json", ".safetensors")  # the grids' record, then the tensors

    def __init__(self, stage: Path, context: WriteContext, fmt: Any) -> None:
        self.fmt = fmt
        self.format = fmt.name  # type: ignore[misc] - one writer class for every Hugging Face layout
        super().__init__(stage, context)
        self.dtype = context.dtype or torch.float32
        self.out = self.stage / f"{self.format}-out"
        self._files: list[str] = []
        self._bytes = 0

    @torch.no_grad()
    def write(self, key: str, prefix: str, module: nn.Module, tied: dict[str, str]) -> None:  # noqa: D102
        packed = {f"{prefix}.{n}" if prefix and n else (prefix or n): m for n, m in module.named_modules()
                  if isinstance(m, PackedLinear)}
        record: dict[str, dict[str, Any]] = {}
        provisional: dict[str, WeightScheme] = {}
        for name, layer in packed.items():
            self.fmt.check_layer(layer, name)
            scheme = own_scheme(layer)
            record[name] = {"bits": scheme.bits, "group_size": scheme.group_size, "sym": scheme.sym,
                            "layer_group_size": layer.group_size, "single_group": layer.scales.shape[1] == 1,
                            "spec": layer.spec()}
            provisional[name] = WeightScheme(layer.bits, layer.group_size, False)  # zero points always staged
        tensors: dict[str, torch.Tensor] = {}
        for block in checkpoint_blocks(module, self.fmt.layer_tensors, provisional, prefix, self.dtype,
                                       frozenset(tied)):
            tensors.update(block)
        index, data = self.piece_files(key)
        write_json_atomic(index, record)
        save_tensors_atomic(tensors, data, fmt="pt")  # written last: the piece counts as written once it exists

    def _schemes(self, keys: list[str]) -> tuple[dict[str, WeightScheme], dict[str, int], dict[str, dict]]:
        records: dict[str, dict] = {}
        for key in keys:
            records.update(json.loads(self.piece_files(key)[0].read_text()))
        own = {n: WeightScheme(r["bits"], r["group_size"], r["sym"]) for n, r in records.items()}
        sizes = {n: int(r["layer_group_size"]) for n, r in records.items()}
        schemes = unify_schemes(own, sizes, {n: bool(r["single_group"]) for n, r in records.items()})
        return schemes, sizes, records

    def finish(self, order: list[str] | None = None) -> dict[str, Any]:
        """Shards from the staged pieces (``order``: their keys), the index and ``config.json`` in the stage."""
        keys = self.piece_keys(order)
        schemes, sizes, records = self._schemes(keys)
        model = self.context.model
        packed_on_meta(model, records)
        qconfig = self.fmt.quantization_config(schemes, sizes, plain_linears(model), self.context.config)
        skip = frozenset(f"{n}.{_ZERO_POINT}" for n, s in schemes.items() if s.sym)
        if self.out.exists():  # an earlier finish interrupted: assemble again
            shutil.rmtree(self.out)
        shards = Shards(self.out).open()
        group: list[Path] = []
        group_bytes = 0

        def flush() -> None:
            nonlocal group, group_bytes
            if not group:
                return
            names = [n for f in group for n in tensor_names(f) if n not in skip]
            target = self.stage / f".{self.format}-shard.safetensors"
            concat_safetensors(group, target, {"format": "pt"}, skip)
            shards.add_shard(target, names, _data_bytes(target))
            group, group_bytes = [], 0

        for key in keys:  # a shard is flushed once its pieces reach max_shard_bytes
            data = self.piece_files(key)[1]
            group.append(data)
            group_bytes += data.stat().st_size
            if group_bytes >= self.max_shard_bytes:
                flush()
        flush()
        self._files = shards.close(hf_config(model, qconfig))
        self._bytes = sum(f.stat().st_size for f in self.out.iterdir() if f.is_file())
        return {"files": list(self._files), "bytes": self._bytes, "quantization_config": qconfig,
                "schemes": {n: s.describe() for n, s in schemes.items()}}

    def payload(self) -> dict[str, Any]:  # noqa: D102
        return {"weights_format": self.format, "weights_file": self._files[0] if self._files else None}

    def outputs(self) -> list[Path]:  # noqa: D102
        return sorted(self.out.iterdir())

    def record(self, folder: Path, smash_config: Any, extra: dict[str, Any]) -> None:
        """The tokenizer and generation config; a streaming run's record in ``slimkit_stream.json``.

        No ``smash_config.json`` (that would make it a slimkit save): the record a resumed or repeated run compares
        goes to ``slimkit_stream.json``.
        """
        self._generation_config(folder)
        tokenizer = self.context.tokenizer
        if tokenizer is not None and callable(getattr(tokenizer, "save_pretrained", None)):
            tokenizer.save_pretrained(str(folder))
        if extra.get("stream") is not None:
            write_json_atomic(folder / RUN_FILE, {"stream": extra["stream"], "format": self.format,
                                                  "applied": extra.get("applied"), "base": extra.get("base"),
                                                  "smash_config": smash_config.to_dict()})

    def _generation_config(self, folder: Path) -> None:
        """The source folder's generation config (as ``from_pretrained`` would have read it), else the model's."""
        generation = getattr(self.context.model, "generation_config", None)
        source = self.context.source
        if source is not None and (Path(source) / "generation_config.json").is_file():
            import transformers

            generation = transformers.GenerationConfig.from_pretrained(str(source))
        if generation is not None and callable(getattr(generation, "to_json_file", None)):
            generation.to_json_file(str(folder / "generation_config.json"))

def _data_bytes(file: Path) -> int:
    """Bytes of tensor data in a safetensors file (its size less the header)."""
    with open(file, "rb") as handle:
        header = int.from_bytes(handle.read(8), "little")
    return file.stat().st_size - 8 - header
