"""The format table walked: every format says what it holds, refuses what it cannot hold, and round-trips."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import slimkit
from slimkit import SmashConfig, SmashedModel, smash
from slimkit.core import registry
from slimkit.engines.quantization.lowbit import PackedLinear, quantize_rtn
from slimkit.formats import FORMATS, FormatError, LayerKind, get_format, layer_kind
from slimkit.formats.kinds import FLOAT, INT8, PACKED
from slimkit.zoo._hf import byte_tokenizer
from tests.engine.test_interop import logits, tiny

KINDS = {
    "float": LayerKind(FLOAT, in_features=64, out_features=64),
    "4-bit g32 asym": LayerKind(PACKED, 4, 32, False, True, False, 64, 64, 1.0),
    "4-bit g32 sym": LayerKind(PACKED, 4, 32, True, True, False, 64, 64, 8.0),
    "4-bit g32 zero 0": LayerKind(PACKED, 4, 32, False, True, False, 64, 64, 0.0),
    "8-bit g32 asym": LayerKind(PACKED, 8, 32, False, True, False, 64, 64, 100.0),
    "8-bit g32 sym": LayerKind(PACKED, 8, 32, True, True, False, 64, 64, 128.0),
    "3-bit g32": LayerKind(PACKED, 3, 32, False, True, False, 64, 64, 1.0),
    "4-bit g16": LayerKind(PACKED, 4, 16, False, True, False, 64, 64, 1.0),
    "4-bit g32 fractional zeros": LayerKind(PACKED, 4, 32, False, False, False, 64, 64, 0.5),
    "4-bit g32 input scale": LayerKind(PACKED, 4, 32, False, True, True, 64, 64, 1.0),
    "4-bit g32 rows of 48": LayerKind(PACKED, 4, 32, False, True, False, 48, 64, 1.0),
    "int8": LayerKind(INT8),
}
HF = {"float", "4-bit g32 asym", "4-bit g32 sym", "8-bit g32 asym", "8-bit g32 sym", "4-bit g16"}
HOLDS = {
    "slimkit": set(KINDS),
    "gguf": {"float", "4-bit g32 asym", "4-bit g32 sym", "4-bit g32 zero 0", "8-bit g32 sym",
             "4-bit g32 fractional zeros"},
    "compressed-tensors": HF | {"4-bit g32 zero 0"},
    "gptq": HF,
    "onnx": {"float"},
}


def test_the_table_holds_the_five_formats_under_their_names():
    assert list(FORMATS) == ["slimkit", "gguf", "compressed-tensors", "gptq", "onnx"]
    assert all(fmt.name == name and fmt.title for name, fmt in FORMATS.items())
    with pytest.raises(FormatError, match="Unknown checkpoint format 'ggml'; use one of 'slimkit', 'gguf'"):
        get_format("ggml")


@pytest.mark.parametrize("name", sorted(HOLDS))
def test_each_format_holds_exactly_its_kinds_and_names_what_it_holds(name):
    fmt = get_format(name)
    held = {k for k, kind in KINDS.items() if not fmt.refusals(kind)}
    assert held == HOLDS[name]
    assert "holds" in fmt.holds() or "takes" in fmt.holds()
    for kind in set(KINDS) - held:  # each refusal says what is wrong in words
        assert all(len(problem) > 10 for problem in fmt.refusals(KINDS[kind]))


@pytest.mark.parametrize("name", ["gguf", "compressed-tensors", "gptq", "onnx"])
def test_a_layer_the_format_cannot_hold_is_refused_naming_the_layer_and_what_it_holds(name):
    w = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    layer = PackedLinear.from_quantized(*quantize_rtn(w, 3, 32, False), 3, 32)
    assert layer_kind(layer).describe() == "3-bit, groups of 32, asymmetric"
    fmt = get_format(name)
    with pytest.raises(FormatError, match=f"^blocks.0.q: {name} cannot hold this layer exactly: it has .*") as info:
        fmt.check_layer(layer, "blocks.0.q")
    assert fmt.holds() in str(info.value)
    get_format("slimkit").check_layer(layer, "blocks.0.q")  # slimkit's own format holds every layer


@pytest.mark.parametrize("name", [n for n, f in FORMATS.items() if f.exports])
def test_a_small_packed_model_round_trips_through_every_format_that_is_read_back(name, tmp_path):
    cfg = SmashConfig({"rtn": {"bits": 4, "group_size": 32, "sym": True}})
    cfg.add_tokenizer(byte_tokenizer())
    smashed = smash(tiny("llama"), cfg, verbose=False)
    smashed.save_pretrained(tmp_path / name, format=name)
    back = SmashedModel.from_pretrained(tmp_path / name)
    packed = [m for m in back.model.modules() if isinstance(m, PackedLinear)]
    assert len(packed) == 14 and all(m.bits == 4 and m.group_size == 32 for m in packed)
    assert torch.equal(logits(back), logits(smashed))


def _string_constants(folder: Path) -> list[tuple[Path, int, str]]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append((path, node.lineno, node.value))
    return found


def test_the_engine_and_the_formats_name_no_algorithm():
    """No string literal in slimkit/engine or slimkit/formats is an algorithm's name.

    Two words are also other things and stay allowed where they mean those: a format's own name (the GPTQ
    checkpoint layout is called ``gptq``) and a torch dtype name (``"half"``).
    """
    root = Path(slimkit.__file__).parent
    algorithms = set(registry.names())
    assert {"gptq", "awq", "hqq", "rtn", "llama_cpp"} <= algorithms
    allowed = set(FORMATS) | {n for n in algorithms if isinstance(getattr(torch, n, None), torch.dtype)}
    named = [f"{p.relative_to(root)}:{line} {value!r}" for folder in ("engine", "formats")
             for p, line, value in _string_constants(root / folder) if value in algorithms - allowed]
    assert not named, f"algorithm names in the engine or the formats (declare them on the algorithm): {named}"
