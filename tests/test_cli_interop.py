"""`slimkit smash --format` writes checkpoints other runtimes open (with the measured figures in the model card);
`--model` takes another tool's checkpoint; a recipe the format cannot hold is refused before anything runs."""

from __future__ import annotations

import json

import pytest

from slimkit.cli import main
from slimkit.zoo._hf import byte_tokenizer
from tests.engine.test_interop import tiny


@pytest.fixture
def hf_folder(tmp_path):
    folder = tmp_path / "tiny"
    tiny("llama").save_pretrained(folder)
    byte_tokenizer().save_pretrained(str(folder))
    return folder


def test_smash_format_compressed_tensors_writes_a_measured_checkpoint(hf_folder, tmp_path, capsys):
    out = tmp_path / "ct"
    code = main(["smash", "--model", str(hf_folder), "--algorithm", "gptq", "--set", "gptq_group_size=32",
                 "--set", "gptq_n_calibration_samples=4", "--set", "gptq_seq_len=32", "--format",
                 "compressed-tensors", "--output", str(out), "--repeats", "2", "--warmup", "1"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "outputs identical" in printed  # reloaded from the compressed-tensors folder through the import path
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and not (out / "smash_config.json").exists()
    card = (out / "README.md").read_text()
    assert "Measured by `slimkit smash` on" in card and "threads" in card and "perplexity" in card
    assert "| latency" in card.lower() or "latency" in card


def test_refused_recipe_stops_before_loading_anything(hf_folder, tmp_path, capsys):
    code = main(["smash", "--model", str(hf_folder), "--algorithm", "hqq", "--set", "hqq_bits=3",
                 "--format", "gptq", "--output", str(tmp_path / "g")])
    captured = capsys.readouterr()
    assert code == 2
    err = " ".join(captured.err.split())
    assert "Cannot save this recipe as gptq: hqq makes 3-bit codes; hqq makes fractional zero points" in err
    assert "loading model" not in captured.out and not (tmp_path / "g").exists()


def test_group_size_that_does_not_split_the_rows_stops_before_quantizing(tmp_path, capsys):
    import transformers

    folder = tmp_path / "narrow"  # hidden 96: groups of 64 leave a partial group in q/k/v/o/gate/up, not in down
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=96, intermediate_size=192, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    byte_tokenizer().save_pretrained(str(folder))
    code = main(["smash", "--model", str(folder), "--algorithm", "gptq", "--set", "gptq_group_size=64",
                 "--format", "compressed-tensors", "--output", str(tmp_path / "ct")])
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    err = " ".join(captured.err.split())
    assert "Cannot save this model as compressed-tensors with gptq_group_size=64" in err
    assert "96 input columns (model.layers.0.self_attn.q_proj" in err and "192 input columns" not in err
    assert "Set gptq_group_size to 16 or 32" in err
    assert "recipe" not in captured.out and not (tmp_path / "ct").exists()  # refused before GPTQ ran


def test_foreign_checkpoint_as_model_needs_a_recipe(hf_folder, tmp_path, capsys):
    from slimkit import SmashConfig, smash

    cfg = SmashConfig({"rtn": {"bits": 4, "group_size": 32}})
    cfg.add_tokenizer(byte_tokenizer())
    smash(tiny("llama"), cfg, verbose=False).save_pretrained(tmp_path / "g", format="gptq")
    code = main(["smash", "--model", str(tmp_path / "g"), "--no-save"])
    assert code == 2 and "already quantized (gptq)" in capsys.readouterr().err
