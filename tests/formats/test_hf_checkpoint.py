"""The Hugging Face formats' pieces: per-layer codecs round-trip exactly, the export shards, layers are checked."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from slimkit.engines.quantization.lowbit import PackedLinear, quantize_model_rtn, quantize_rtn
from slimkit.formats import FormatError, get_format, gptq, read_quantization_config
from slimkit.formats import compressed_tensors as ct
from slimkit.formats.reader import load_into
from slimkit.formats.scheme import WeightScheme, model_schemes
from tests.engine.test_interop import tiny


def _layer(bits: int, sym: bool, group_size: int, out_f: int = 16, in_f: int = 64, seed: int = 0) -> PackedLinear:
    w = torch.randn(out_f, in_f, generator=torch.Generator().manual_seed(seed))
    q, s, z = quantize_rtn(w, bits, group_size, sym)
    return PackedLinear.from_quantized(q, s, z, bits, group_size, bias=torch.randn(out_f))


@pytest.mark.parametrize("bits,sym,group_size", [(4, False, 32), (4, True, 16), (8, False, 64), (8, True, 32)])
def test_layer_codecs_round_trip_bit_for_bit(bits, sym, group_size):
    layer = _layer(bits, sym, group_size)
    scheme = WeightScheme(bits, None if group_size == 64 else group_size, sym)
    back = ct.layer_from_tensors(ct.layer_tensors(layer, scheme), scheme, "l")
    for other in (back, gptq.layer_from_tensors(gptq.layer_tensors(layer, scheme), bits, "l")):
        assert torch.equal(other.qweight, layer.qweight) and torch.equal(other.scales, layer.scales)
        assert torch.equal(other.zeros, layer.zeros) and torch.equal(other.bias, layer.bias)


def test_gptq_words_follow_the_autogptq_layout():
    layer = _layer(4, False, 32)
    t = gptq.layer_tensors(layer, WeightScheme(4, 32, False))
    codes, zeros = layer.codes().long(), layer.zeros.long()
    word = int(t["qweight"][1, 3]) & 0xFFFFFFFF  # input columns 8..15 of output row 3, column 8 + k at bits 4k
    assert [(word >> (4 * k)) & 0xF for k in range(8)] == codes[3, 8:16].tolist()
    zword = int(t["qzeros"][1, 0]) & 0xFFFFFFFF  # group 1, output rows 0..7, zero - 1
    assert [(zword >> (4 * k)) & 0xF for k in range(8)] == (zeros[:8, 1] - 1).tolist()
    assert t["scales"].dtype == torch.float16 and tuple(t["scales"].shape) == (2, 16)


def test_scheme_checks_name_the_layers():
    model = nn.Sequential(nn.Linear(64, 16))
    model[0] = _layer(4, False, 32)
    model[0].zeros[0, 0] = 0.0  # an asymmetric zero of 0: compressed-tensors holds it, gptq's v1 layout cannot
    ct_format, gptq_format = get_format("compressed-tensors"), get_format("gptq")
    assert model_schemes(model, ct_format) == {"0": WeightScheme(4, 32, False)}
    with pytest.raises(FormatError, match=r"asymmetric zero point of 0.* \(0\)"):
        model_schemes(model, gptq_format)
    model[0].zeros[0, 0] = 0.5
    with pytest.raises(FormatError, match=r"fractional zero points .*\(0\)"):
        model_schemes(model, ct_format)
    with pytest.raises(FormatError, match="no slimkit-packed low-bit layer"):
        model_schemes(nn.Sequential(nn.Linear(4, 4)), gptq_format)


def test_writer_shards_and_the_reader_reassembles(tmp_path):
    model = tiny("llama")
    quantize_model_rtn(model, 4, 32, False)
    summary = get_format("compressed-tensors").export(model, tmp_path / "m", max_shard_bytes=100_000)
    n = len(summary["files"])
    assert n > 2 and summary["files"][0] == f"model-00001-of-{n:05d}.safetensors"
    index = json.loads((tmp_path / "m" / "model.safetensors.index.json").read_text())
    stored = {k for f in summary["files"] for k in load_file(str(tmp_path / "m" / f))}
    assert set(index["weight_map"]) == stored and "lm_head.weight" not in stored
    fmt, qc = read_quantization_config(tmp_path / "m")
    skeleton = tiny("llama")
    info = load_into(skeleton, tmp_path / "m", get_format(fmt), qc)
    assert len(info["layers"]) == 14 and skeleton.lm_head.weight is skeleton.model.embed_tokens.weight
    ids = torch.randint(0, 256, (1, 8))
    with torch.no_grad():
        assert torch.equal(skeleton(ids).logits, model(ids).logits)
