"""`slimkit smash --model <folder>` streams large folders (or on --stream) and says so."""

from __future__ import annotations

import json

import pytest
import torch

from slimkit import SmashedModel
from slimkit.cli import build_parser, main
from slimkit.engine.stream import memory


def test_stream_flag_runs_gptq_with_the_folders_tokenizer_and_pydoc_text(byte_llama_folder, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["smash", "--model", str(byte_llama_folder), "--algorithm", "gptq", "--stream", "--output", str(out),
                 "--set", "gptq_group_size=32", "--set", "gptq_n_calibration_samples=2", "--set", "gptq_seq_len=32"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "streaming" in printed and f"saved to {out}" in printed and "peak RSS" in printed
    assert "slimkit: gptq: quantized 21 layers" in printed  # 3 blocks x 7 Linear layers; lm_head kept by design
    saved = json.loads((out / "smash_config.json").read_text())
    assert saved["data"] == "PyDocText" and (out / "tokenizer").is_dir()
    model = SmashedModel.from_pretrained(out)
    with torch.no_grad():
        assert model(torch.tensor([[5, 6, 7]])).logits.shape == (1, 3, 256)


def test_stream_flag_with_format_writes_a_compressed_tensors_checkpoint(byte_llama_folder, tmp_path, capsys):
    out = tmp_path / "ct"
    code = main(["smash", "--model", str(byte_llama_folder), "--algorithm", "rtn", "--stream", "--output", str(out),
                 "--format", "compressed-tensors", "--set", "rtn_group_size=32"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    assert (out / "tokenizer.json").is_file() and not (out / "smash_config.json").exists()
    model = SmashedModel.from_pretrained(out)
    with torch.no_grad():
        assert model(torch.tensor([[5, 6, 7]])).logits.shape == (1, 3, 256)


def test_a_folder_that_would_not_fit_streams_by_itself(byte_llama_folder, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 1_000_000)  # 1 MB "available": the model is larger
    code = main(["smash", "--model", str(byte_llama_folder), "--algorithm", "rtn", "--output", str(tmp_path / "o"),
                 "--set", "rtn_group_size=32"])
    printed = capsys.readouterr().out
    assert code == 0 and "streaming it block by block (--no-stream to load it whole)" in printed


@pytest.mark.parametrize("argv, message", [
    (["--model", "tiny_llama", "--algorithm", "rtn", "--stream"], "--stream needs a local Hugging Face model folder"),
    (["--algorithm", "int8_dynamic", "--stream"], "int8_dynamic cannot run on a model streamed block by block"),
    (["--algorithm", "rtn", "--stream", "--memory-budget", "1MB"], "smaller than one decoder block needs"),
])
def test_streaming_refusals_exit_2(byte_llama_folder, tmp_path, capsys, argv, message):
    if "--model" not in argv:
        argv = ["--model", str(byte_llama_folder), *argv]
    assert main(["smash", *argv, "--output", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err


def test_stream_flags_parse():
    parser = build_parser()
    assert parser.parse_args(["smash"]).stream is None
    assert parser.parse_args(["smash", "--stream"]).stream is True
    assert parser.parse_args(["smash", "--no-stream"]).stream is False
    with pytest.raises(SystemExit):
        parser.parse_args(["smash", "--stream", "--no-stream"])
