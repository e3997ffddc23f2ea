"""An independent GPTQ reader: converts a GPTQ checkpoint to compressed-tensors with compressed-tensors' own
conversion entry point (``convert_checkpoint``), so transformers can load it. Written from the GPTQ layout
(AutoGPTQ / GPTQModel ``checkpoint_format: "gptq"``), imports nothing from slimkit: it runs in a process where
slimkit cannot be imported.

GPTQ layout: ``qweight`` int32 [in * bits / 32, out], code of input column ``i`` of output ``j`` in word
``[i // pf, j]`` at bits ``(i % pf) * bits``; ``qzeros`` int32 [groups, out * bits / 32] holding ``zero - 1``;
``scales`` [groups, out]; ``g_idx`` [in] the group of each input column; weight ``(q - zero) * scale``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
from compressed_tensors.entrypoints.convert import convert_checkpoint
from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme


def _unpack(words: torch.Tensor, bits: int) -> torch.Tensor:
    """int32 [..., w] -> int64 [..., w * 32 / bits] unsigned values, value k of a word at bits k * bits."""
    shifts = torch.arange(0, 32, bits, dtype=torch.int64)
    return ((words.to(torch.int64).unsqueeze(-1) & 0xFFFFFFFF) >> shifts & ((1 << bits) - 1)).flatten(-2)


class GPTQToCompressedTensors:
    """compressed-tensors ``Converter``: GPTQ qweight/qzeros/scales/g_idx -> weight_packed/weight_scale/zero_point."""

    def __init__(self, gptq_config: dict) -> None:
        self.bits = int(gptq_config["bits"])
        self.group_size = int(gptq_config["group_size"])
        self.sym = bool(gptq_config["sym"])
        self.ignore = list(gptq_config.get("modules_to_not_convert") or ["lm_head"])
        assert gptq_config.get("checkpoint_format", "gptq") == "gptq" and not gptq_config.get("desc_act")

    def _convert(self, qweight, qzeros, scales, g_idx):
        bits = self.bits
        q = _unpack(qweight.t(), bits)  # [out, in] unsigned
        zeros = _unpack(qzeros, bits) + 1  # [groups, out]
        in_f = q.shape[1]
        groups = scales.shape[0]
        assert torch.equal(g_idx.long(), torch.arange(in_f) // (in_f // groups if groups > 1 else in_f))
        mid = 1 << (bits - 1)
        out = {"weight_packed": pack_to_int32((q - mid).to(torch.int8), bits),
               "weight_scale": scales.t().contiguous().float(),
               "weight_shape": torch.tensor(list(q.shape))}
        if not self.sym:
            zp = (zeros.t() - mid).to(torch.int8).contiguous()
            out["weight_zero_point"] = pack_to_int32(zp, bits, packed_dim=0).contiguous()
        else:
            assert bool((zeros == mid).all()), "a symmetric GPTQ checkpoint has zero 2**(bits-1) everywhere"
        return out

    def process(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        for name in [n for n in tensors if n.endswith(".qweight")]:
            base = name[: -len(".qweight")]
            parts = [tensors.pop(f"{base}.{k}") for k in ("qweight", "qzeros", "scales", "g_idx")]
            for key, value in self._convert(*parts).items():
                tensors[f"{base}.{key}"] = value
        return tensors

    def validate(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {}
        for name, t in tensors.items():
            base, _, kind = name.rpartition(".")
            if kind == "qweight":
                out[f"{base}.weight_packed"] = torch.empty(0, dtype=torch.int32)
                out[f"{base}.weight_scale"] = torch.empty(0)
                out[f"{base}.weight_shape"] = torch.empty(0, dtype=torch.int64)
                if not self.sym:
                    out[f"{base}.weight_zero_point"] = torch.empty(0, dtype=torch.int32)
            elif kind not in ("qzeros", "scales", "g_idx"):
                out[name] = t
        return out

    def get_dependencies(self, weight_name: str) -> set[str]:
        base, _, kind = weight_name.rpartition(".")
        return {f"{base}.{k}" for k in ("qzeros", "scales", "g_idx")} if kind == "qweight" else set()

    def update_config(self, config):
        strategy = "channel" if self.group_size == -1 else "group"
        weights = QuantizationArgs(num_bits=self.bits, type="int", symmetric=self.sym, strategy=strategy,
                                   group_size=None if self.group_size == -1 else self.group_size)
        scheme = QuantizationScheme(targets=["Linear"], weights=weights, format="pack-quantized")
        return QuantizationConfig(config_groups={"group_0": scheme}, ignore=self.ignore, format="pack-quantized",
                                  quantization_status="compressed")

    def update_model_config(self, config: dict) -> dict:
        return config


def convert(gptq_folder: str | Path, out_folder: str | Path) -> None:
    """Convert ``gptq_folder`` (a GPTQ checkpoint) into a compressed-tensors folder ``out_folder``."""
    config = json.loads((Path(gptq_folder) / "config.json").read_text())
    qc = config["quantization_config"]
    assert qc["quant_method"] == "gptq", qc
    convert_checkpoint(str(gptq_folder), str(out_folder), GPTQToCompressedTensors(qc), max_workers=1, device="cpu")
