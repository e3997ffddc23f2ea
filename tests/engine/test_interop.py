"""compressed-tensors and GPTQ checkpoints out of slimkit, verified by the other side (transformers in a process
where slimkit cannot be imported), and refused before any work where the format cannot hold the model.

The bound on logits is 1e-4 absolute (logits are O(1) here; observed ~5e-7, float32 summation order): the formats
hold slimkit's codes, scales and zero points exactly, so any mismatch in layout shows up as O(0.1) errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from slimkit import SmashConfig, SmashedModel, smash
from slimkit.engines.quantization.lowbit import PackedLinear
from slimkit.formats import FormatError
from slimkit.zoo._hf import byte_tokenizer

HERE = Path(__file__).parent
BOUND = 1e-4
COMMON = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.1)
IDS = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3))
#: arch x algorithm x sym x group size (the 16 cases of the issue)
CASES = [(a, alg, sym, gs) for a in ("llama", "qwen2") for alg in ("rtn", "gptq") for sym in (True, False)
         for gs in (32, 128)]


def tiny(arch: str) -> torch.nn.Module:
    torch.manual_seed(0 if arch == "llama" else 1)
    if arch == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**COMMON, tie_word_embeddings=True)).eval()
    model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**COMMON, tie_word_embeddings=False)).eval()
    with torch.no_grad():  # Qwen2 initialises its q/k/v biases to zero: make them matter
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.1)
    return model


def smash_case(arch: str, algorithm: str, sym: bool, group_size: int, **extra) -> SmashedModel:
    hps = {"bits": extra.pop("bits", 4), "group_size": group_size, "sym": sym, **extra}
    if algorithm in ("gptq", "awq"):
        hps.update(n_calibration_samples=4, seq_len=32)
    cfg = SmashConfig({algorithm: hps}, device="cpu")
    cfg.add_tokenizer(byte_tokenizer())
    if algorithm in ("gptq", "awq"):
        cfg.add_data("PyDocText")
    return smash(tiny(arch), cfg, verbose=False)


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits.float()


def read_elsewhere(tmp: Path, jobs: list[dict]) -> dict:
    """Load ``jobs`` with transformers in a fresh interpreter that cannot import slimkit; return its report."""
    save_file({"input_ids": IDS}, str(tmp / "ids.safetensors"))
    spec = tmp / "jobs.json"
    spec.write_text(json.dumps({"ids": str(tmp / "ids.safetensors"), "jobs": jobs}))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", TRANSFORMERS_VERBOSITY="error")
    run = subprocess.run([sys.executable, str(HERE / "_foreign_reader.py"), str(spec)], cwd=tmp, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["slimkit_blocked"] and not report["slimkit_in_modules"]
    return report


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every case smashed once and saved in both formats; reference logits from slimkit's packed model."""
    root = tmp_path_factory.mktemp("interop")
    out = {}
    for case in CASES:
        smashed = smash_case(*case)
        name = "-".join(map(str, case))
        for fmt in ("compressed-tensors", "gptq"):
            smashed.save_pretrained(root / fmt / name, format=fmt)
        out[case] = (name, logits(smashed))
    return root, out


@pytest.mark.parametrize("fmt", ["compressed-tensors", "gptq"])
def test_transformers_without_slimkit_reads_the_export(exported, fmt, tmp_path):
    root, cases = exported
    # symmetric compressed-tensors folders load on transformers' default (compressed) path; asymmetric ones through
    # dequantize=True: with compressed-tensors 0.20 the default path builds unpacked zero points and rejects the
    # packed ones every pack-quantized writer (llm-compressor included) stores
    jobs = [{"folder": str(root / fmt / name), "kind": fmt, "dequantize": fmt == "gptq" or not case[2],
             "out": str(tmp_path / f"{name}.safetensors")} for case, (name, _) in cases.items()]
    report = read_elsewhere(tmp_path, jobs)
    for (case, (_name, ref)), result, job in zip(cases.items(), report["results"], jobs, strict=True):
        got = load_file(job["out"])["logits"]
        err = float((got - ref).abs().max())
        assert err < BOUND, (fmt, case, err)
        if not job["dequantize"]:  # transformers held the packed layout itself
            assert "weight_packed" in result["q_proj_tensors"], result


def test_export_layout_and_config(exported):
    root, cases = exported
    name = cases[("llama", "gptq", False, 32)][0]
    ct = json.loads((root / "compressed-tensors" / name / "config.json").read_text())
    qc = ct["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and qc["format"] == "pack-quantized"
    assert qc["ignore"] == ["lm_head"] and qc["quantization_status"] == "compressed"
    weights = qc["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["group_size"], weights["strategy"], weights["symmetric"]) == (4, 32, "group",
                                                                                                          False)
    assert weights["actorder"] == "weight"  # gptq's act order with static groups: no g_idx stored
    tensors = load_file(str(root / "compressed-tensors" / name / "model.safetensors"))
    q = "model.layers.0.self_attn.q_proj"
    packed = tensors[f"{q}.weight_packed"]
    assert packed.dtype == torch.int32 and tuple(packed.shape) == (128, 16)
    assert tuple(tensors[f"{q}.weight_zero_point"].shape) == (16, 4) and tensors[f"{q}.weight_scale"].shape == (128, 4)
    assert "lm_head.weight" not in tensors  # tied to the embedding: written once
    gq = json.loads((root / "gptq" / name / "config.json").read_text())["quantization_config"]
    assert gq == {**gq, "quant_method": "gptq", "bits": 4, "group_size": 32, "sym": False, "desc_act": False,
                  "static_groups": True, "checkpoint_format": "gptq", "modules_to_not_convert": ["lm_head"]}
    g = load_file(str(root / "gptq" / name / "model.safetensors"))
    assert tuple(g[f"{q}.qweight"].shape) == (16, 128) and tuple(g[f"{q}.qzeros"].shape) == (4, 16)
    assert torch.equal(g[f"{q}.g_idx"], (torch.arange(128) // 32).to(torch.int32))
    for fmt in ("compressed-tensors", "gptq"):
        files = sorted(p.name for p in (root / fmt / name).iterdir())
        assert {"README.md", "config.json", "model.safetensors", "tokenizer.json"} <= set(files), files


@pytest.mark.parametrize("fmt", ["compressed-tensors", "gptq"])
def test_export_reimports_bit_for_bit(exported, fmt):
    root, cases = exported
    for case in [("qwen2", "rtn", False, 128), ("llama", "gptq", True, 32)]:
        name, ref = cases[case]
        again = SmashedModel.from_pretrained(root / fmt / name)
        assert again.algorithms == [] and again.base_spec["source"]["format"] == fmt
        assert sum(isinstance(m, PackedLinear) for m in again.model.modules()) == 14
        assert torch.equal(logits(again), ref)  # same codes, scales, zeros: the same kernel output


def test_per_channel_and_awq_fold_only_export(tmp_path):
    smashed = smash_case("llama", "rtn", False, -1)
    assert {m.scales.shape[1] for m in smashed.model.modules() if isinstance(m, PackedLinear)} == {1}
    smashed.save_pretrained(tmp_path / "pc", format="compressed-tensors")
    weights = json.loads((tmp_path / "pc" / "config.json").read_text())["quantization_config"]["config_groups"]
    assert [g["weights"]["strategy"] for g in weights.values()] == ["channel"]
    smashed.save_pretrained(tmp_path / "pcg", format="gptq")
    assert json.loads((tmp_path / "pcg" / "config.json").read_text())["quantization_config"]["group_size"] == -1
    assert torch.equal(logits(SmashedModel.from_pretrained(tmp_path / "pcg")), logits(smashed))

    plain = smash_case("llama", "awq", False, 32, n_grid=3)
    assert any(m.input_scale is not None for m in plain.model.modules() if isinstance(m, PackedLinear))
    with pytest.raises(FormatError, match="awq_fold_only=True"):
        plain.save_pretrained(tmp_path / "awq", format="compressed-tensors")
    assert not (tmp_path / "awq").exists()
    folded = smash_case("llama", "awq", False, 32, n_grid=3, fold_only=True)
    assert all(m.input_scale is None for m in folded.model.modules() if isinstance(m, PackedLinear))
    folded.save_pretrained(tmp_path / "awq", format="compressed-tensors")
    assert torch.equal(logits(SmashedModel.from_pretrained(tmp_path / "awq")), logits(folded))


def test_refused_exports_write_nothing(tmp_path):
    three = smash_case("llama", "rtn", True, 32, bits=3)
    for fmt in ("compressed-tensors", "gptq"):
        with pytest.raises(FormatError, match=r"cannot hold these layers exactly: 3-bit codes "
                                              r"\(model.layers.0.self_attn.q_proj.* and 11 more\).*4 or 8 bits"):
            three.save_pretrained(tmp_path / fmt, format=fmt)
        assert not (tmp_path / fmt).exists() and not list(tmp_path.iterdir())
    hqq = smash(tiny("llama"), SmashConfig({"hqq": {"bits": 4, "group_size": 32, "iters": 2}}), verbose=False)
    with pytest.raises(FormatError, match="fractional"):
        hqq.save_pretrained(tmp_path / "h", format="gptq")
    with pytest.raises(FormatError, match="save_pretrained does not write 'gguf': the llama_cpp compiler writes it"):
        three.save_pretrained(tmp_path / "x", format="gguf")
    with pytest.raises(FormatError, match="Unknown checkpoint format 'ggml'; save_pretrained writes 'slimkit', "):
        three.save_pretrained(tmp_path / "x", format="ggml")
    assert not list(tmp_path.iterdir())


def test_model_cards_tell_each_format_how_to_load(exported, tmp_path):
    root, cases = exported
    name = cases[("llama", "gptq", False, 32)][0]
    ct = (root / "compressed-tensors" / name / "README.md").read_text()
    assert ct.startswith("---\nlibrary_name: transformers") and "`gptq`" in ct and "`bits=4`" in ct
    assert "CompressedTensorsConfig(dequantize=True)" in ct and "vllm serve DIR" in ct
    assert "Q4_1" in ct and "no re-quantization" in ct  # groups of 32, asymmetric: GGUF's Q4_1 twin
    assert "kept in float: lm_head" in ct and "No before/after figures" in ct
    smashed = smash_case("llama", "rtn", False, 128, bits=8)
    smashed.save_pretrained(tmp_path / "native")
    card = (tmp_path / "native" / "README.md").read_text()
    assert "library_name: slimkit" in card and "transformers**: not directly" in card
    assert "llama.cpp**: not for this folder" in card and "8-bit asymmetric" in card  # Q8_0 is symmetric only
    assert SmashedModel.from_pretrained(tmp_path / "native").algorithms == ["rtn"]
