"""Checkpoints made by another tool (the compressed-tensors library's own compressor) open in slimkit on its packed
layers, give the logits transformers gives for the same folder, and compile to GGUF where the grid has a twin.
Damaged or unsupported quantization configs are refused naming the field."""

from __future__ import annotations

import json
import shutil

import gguf
import numpy as np
import pytest
import torch
import transformers
from compressed_tensors.compressors import ModelCompressor  # a dev dependency (the interop extra)
from compressed_tensors.quantization import (
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    apply_quantization_config,
)
from compressed_tensors.quantization.utils import calculate_qparams

from slimkit import SmashedModel
from slimkit.engines.gguf import export_gguf
from slimkit.engines.quantization.lowbit import PackedLinear
from slimkit.errors import ConfigError, SaveLoadError
from slimkit.formats import FormatError
from slimkit.zoo._hf import byte_tokenizer
from tests.engine.test_interop import BOUND, IDS, logits, tiny


def foreign_checkpoint(folder, arch="llama", bits=4, sym=False, group_size=32, scale_dtype=torch.float16):
    """A pack-quantized folder made the way llm-compressor makes one: compressed-tensors' own config, qparams and
    compressor, transformers' save_pretrained; nothing from slimkit touches it."""
    model = tiny(arch)
    strategy = "channel" if group_size is None else "group"
    args = QuantizationArgs(num_bits=bits, type="int", symmetric=sym, strategy=strategy, group_size=group_size,
                            scale_dtype=scale_dtype)
    config = QuantizationConfig(config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=args)},
                                ignore=["lm_head"])
    apply_quantization_config(model, config)
    with torch.no_grad():
        for module in model.modules():
            if getattr(module, "quantization_scheme", None) is None:
                continue
            w = module.weight.float()
            rows = w if group_size is None else w.view(w.shape[0], -1, group_size)
            lo, hi = rows.amin(-1), rows.amax(-1)
            scale, zp = calculate_qparams(lo.reshape(w.shape[0], -1), hi.reshape(w.shape[0], -1), args)
            module.weight_scale.copy_(scale.to(module.weight_scale.dtype))
            if hasattr(module, "weight_zero_point"):
                module.weight_zero_point.copy_(zp.to(module.weight_zero_point.dtype))
    compressor = ModelCompressor.from_pretrained_model(model, "pack-quantized")
    compressor.compress_model(model)
    model.save_pretrained(folder)
    compressor.update_config(str(folder))
    byte_tokenizer().save_pretrained(str(folder))
    return folder


def transformers_logits(folder, sym: bool) -> torch.Tensor:
    kwargs = {} if sym else {"quantization_config": transformers.CompressedTensorsConfig(dequantize=True)}
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), **kwargs).eval()
    return logits(model)


@pytest.mark.parametrize("arch,bits,sym,group_size", [("llama", 4, False, 32), ("qwen2", 4, True, 32),
                                                      ("llama", 8, True, None)])
def test_foreign_checkpoint_runs_on_packed_layers_like_transformers(tmp_path, arch, bits, sym, group_size):
    folder = foreign_checkpoint(tmp_path / "ct", arch, bits, sym, group_size)
    qc = json.loads((folder / "config.json").read_text())["quantization_config"]
    assert qc["format"] == "pack-quantized" and qc["quant_method"] == "compressed-tensors"
    ref = transformers_logits(folder, sym)
    imported = SmashedModel.from_pretrained(folder)
    packed = {n: m for n, m in imported.model.named_modules() if isinstance(m, PackedLinear)}
    assert len(packed) == 14 and {m.bits for m in packed.values()} == {bits}
    assert not any(p.dim() == 2 for m in packed.values() for p in m.parameters())  # no float weight kept
    assert imported.smash_config.tokenizer is not None
    assert float((logits(imported) - ref).abs().max()) < BOUND
    # the codes are the checkpoint's: compare one layer with compressed-tensors' own unpacking
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
    from safetensors.torch import load_file

    stored = load_file(str(folder / "model.safetensors"))
    name = "model.layers.1.mlp.down_proj"
    q = unpack_from_int32(stored[f"{name}.weight_packed"], bits, torch.Size([128, 256]))
    assert torch.equal(packed[name].codes().to(torch.int16) - (1 << (bits - 1)), q.to(torch.int16))
    # slimkit's own save of the imported model reloads identically (the packed layers are part of the base)
    imported.save_pretrained(tmp_path / "native")
    again = SmashedModel.from_pretrained(tmp_path / "native")
    assert torch.equal(logits(again), logits(imported))
    assert "Imported from a compressed-tensors checkpoint" in (tmp_path / "native" / "README.md").read_text()


def _gguf_tensor(path, name: str) -> np.ndarray:
    reader = gguf.GGUFReader(str(path))
    tensor = next(t for t in reader.tensors if t.name == name)
    return gguf.quants.dequantize(tensor.data, tensor.tensor_type), tensor.tensor_type.name


@pytest.mark.parametrize("sym,expected", [(True, "Q4_0"), (False, "Q4_1")])
def test_foreign_checkpoint_to_gguf_keeps_the_grid(tmp_path, sym, expected):
    folder = foreign_checkpoint(tmp_path / "ct", "llama", 4, sym, 32)
    imported = SmashedModel.from_pretrained(folder)
    summary = export_gguf(imported.model, tmp_path / "m.gguf", imported.smash_config.tokenizer)
    assert summary["file_type"] == f"MOSTLY_{expected}"
    data, kind = _gguf_tensor(tmp_path / "m.gguf", "blk.1.ffn_down.weight")
    assert kind == expected
    ours = imported.model.model.layers[1].mlp.down_proj.dequantize().numpy()
    layer = imported.model.model.layers[1].mlp.down_proj
    step = float(layer.scales.float().max())
    err = np.abs(data.reshape(ours.shape) - ours).max()
    assert err == 0 if sym else err <= 15 * 2**-11 * step  # Q4_1 rounds -z*s to fp16: < 0.73 % of a step


def test_foreign_grid_without_a_gguf_twin_is_refused(tmp_path):
    folder = foreign_checkpoint(tmp_path / "ct", "llama", 4, False, 16)
    imported = SmashedModel.from_pretrained(folder)
    with pytest.raises(ConfigError, match="group_size=16 .*no GGUF block format"):
        export_gguf(imported.model, tmp_path / "m.gguf", imported.smash_config.tokenizer)
    assert not (tmp_path / "m.gguf").exists()


def test_float32_scales_are_rounded_with_a_warning(tmp_path):
    folder = foreign_checkpoint(tmp_path / "ct", "llama", 4, True, 32, scale_dtype=None)
    with pytest.warns(RuntimeWarning, match="rounded to float16"):
        imported = SmashedModel.from_pretrained(folder)
    ref = transformers_logits(folder, True)
    assert float((logits(imported) - ref).abs().max()) < 1e-2  # fp16 scales: ~2**-11 relative per weight


def _edit(folder, change) -> None:
    file = folder / "config.json"
    config = json.loads(file.read_text())
    change(config["quantization_config"])
    file.write_text(json.dumps(config))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return foreign_checkpoint(tmp_path_factory.mktemp("foreign") / "ct", "llama", 4, False, 32)


@pytest.mark.parametrize("change,message", [
    (lambda q: q.update(quant_method="awq"),
     r"quantization_config.quant_method = 'awq': slimkit imports 'compressed-tensors', 'gptq'"),
    (lambda q: q["config_groups"]["group_0"]["weights"].update(num_bits=2),
     r"config_groups.group_0.weights.num_bits = 2: slimkit imports 4 or 8 bits"),
    (lambda q: q["config_groups"]["group_0"].update(input_activations={"num_bits": 8, "type": "int",
                                                                      "strategy": "token", "dynamic": True}),
     r"config_groups.group_0.input_activations = .*weight-only schemes"),
    (lambda q: q.update(format="float-quantized"),
     r"quantization_config.format = 'float-quantized': slimkit imports 'pack-quantized' or 'naive-quantized'"),
    (lambda q: q["config_groups"]["group_0"]["weights"].update(type="float"),
     r"weights.type = 'float': slimkit imports 'int' weights"),
    (lambda q: q["config_groups"]["group_0"]["weights"].update(strategy="block", group_size=None,
                                                                    block_structure=[128, 128]),
     r"weights.strategy = 'block': slimkit imports 'group' or 'channel'"),
    (lambda q: q.update(config_groups=[]), r"quantization_config.config_groups = \[\]"),
    (lambda q: q["config_groups"]["group_0"]["weights"].update(num_bits="four"),
     r"quantization_config.config_groups.group_0.* is not a valid compressed-tensors config"),
    (lambda q: q.update(ignore=["lm_head", "re:.*q_proj"]), r"targets and the stored tensors disagree"),
])
def test_bad_quantization_config_names_the_field(pristine, tmp_path, change, message):
    folder = tmp_path / "bad"
    shutil.copytree(pristine, folder)
    _edit(folder, change)
    with pytest.raises(FormatError, match=message):
        SmashedModel.from_pretrained(folder)


def test_bad_gptq_configs_and_layouts(tmp_path):
    from tests.engine.test_interop import smash_case

    smash_case("llama", "rtn", False, 32).save_pretrained(tmp_path / "g", format="gptq")
    for change, message in [
        (lambda q: q.update(bits=3), r"quantization_config.bits = 3: slimkit imports 4 or 8-bit GPTQ"),
        (lambda q: q.update(checkpoint_format="marlin"), r"checkpoint_format = 'marlin'"),
        (lambda q: q.update(dynamic={r"+:.*down": {"bits": 8}}), r"quantization_config.dynamic"),
    ]:
        folder = tmp_path / "bad"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(tmp_path / "g", folder)
        _edit(folder, change)
        with pytest.raises(FormatError, match=message):
            SmashedModel.from_pretrained(folder)
    # act-order without static groups: a g_idx that is a real permutation
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(tmp_path / "g" / "model.safetensors"))
    key = "model.layers.0.mlp.up_proj.g_idx"
    tensors[key] = tensors[key][torch.randperm(128, generator=torch.Generator().manual_seed(0))].contiguous()
    save_file(tensors, str(tmp_path / "g" / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(FormatError, match="g_idx is not consecutive groups of 32"):
        SmashedModel.from_pretrained(tmp_path / "g")


def test_plain_folders_are_not_taken_for_checkpoints(tmp_path):
    tiny("llama").save_pretrained(tmp_path / "plain")
    with pytest.raises(SaveLoadError, match="smash_config.json is missing"):
        SmashedModel.from_pretrained(tmp_path / "plain")
    assert IDS.shape == (2, 16)


@pytest.mark.llamacpp
def test_foreign_checkpoint_compiles_to_gguf_and_runs_in_llama_cpp(tmp_path):
    """compressed-tensors (another tool) -> slimkit's packed layers -> llama_cpp compiler: llama.cpp's logits match
    what transformers computes from the same checkpoint, as for slimkit's own exports (tests/engines/gguf): within
    0.15 (llama.cpp rounds activations to 8 bits) and far closer than the checkpoint is to the float model."""
    from slimkit import SmashConfig, smash

    folder = foreign_checkpoint(tmp_path / "ct", "llama", 4, False, 32)
    ref = transformers_logits(folder, False)
    imported = SmashedModel.from_pretrained(folder)
    cfg = SmashConfig({"llama_cpp": {"n_threads": 1, "n_ctx": 64}})
    cfg.add_tokenizer(imported.smash_config.tokenizer)
    compiled = smash(imported.model, cfg, verbose=False)
    assert compiled.applied[-1]["state"]["file_type"] == "MOSTLY_Q4_1"
    from slimkit.cli import main  # the same from the command line: `slimkit smash --model DIR --algorithm llama_cpp`

    assert main(["smash", "--model", str(folder), "--algorithm", "llama_cpp", "--set", "llama_cpp_n_threads=1",
                 "--output", str(tmp_path / "gguf"), "--repeats", "1", "--warmup", "0"]) == 0
    assert (tmp_path / "gguf" / "model.gguf").is_file() and (tmp_path / "gguf" / "README.md").is_file()
    got = logits(compiled)
    assert float((got - ref).abs().max()) < 0.15
    assert float((got - ref).abs().max()) < 0.25 * float((ref - logits(tiny("llama"))).abs().max())
