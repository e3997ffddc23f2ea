"""`slimkit smash` on a result that only generates (c_whisper): generate is timed and compared instead of forward."""

from __future__ import annotations

import re

import pytest
import torch

from slimkit import zoo
from slimkit.cli import main
from slimkit.demo import GENERATE_TOKENS, GenerateCall
from tests.algorithms.models import _whisper_inputs, tiny_whisper, whisper_tokenizer

pytest.importorskip("ctranslate2", reason="c_whisper needs the ctranslate2 extra (in dev)")


def tiny_whisper_with_tokenizer() -> zoo.ZooModel:
    """``--model tests.test_cli_generate:tiny_whisper_with_tokenizer``: the offline Whisper tester, its vocabulary."""
    return zoo.ZooModel(tiny_whisper(), _whisper_inputs(), "tests.test_cli_generate:tiny_whisper_with_tokenizer",
                        tokenizer=whisper_tokenizer())


def _metric(out: str, label: str) -> list[str]:
    """The cells of the comparison table's row ``label`` (the label first)."""
    line = next(line for line in out.splitlines() if label in line)
    return [cell.strip() for cell in re.split(r"[│|]", line) if cell.strip()]


@pytest.mark.slow  # 1 s warm at load ~3, 2.7 s cold, ~45 s at load 15: HF Whisper generates, a save, a reload
def test_c_whisper_runs_from_the_shell_timing_generate(tmp_path, capsys):
    out_dir = tmp_path / "whisper"
    code = main(["smash", "--model", "tests.test_cli_generate:tiny_whisper_with_tokenizer", "--algorithm",
                 "c_whisper", "--set", "c_whisper_weight_bits=32", "--set", "c_whisper_n_threads=1",
                 "--output", str(out_dir), "--repeats", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    assert ("the smashed model only generates (CTranslate2's Whisper decodes; it gives no teacher-forced logits): "
            f"both models are timed on greedy generate(max_new_tokens={GENERATE_TOKENS}) instead of forward") in out
    # float32 CTranslate2 decodes exactly the original's greedy tokens: every position agrees
    assert _metric(out, "fidelity cosine mean")[1:3] == ["1", "1"]
    assert _metric(out, "fidelity cosine min")[2] == "1"
    assert float(_metric(out, "latency median (ms)")[2]) > 0
    assert "outputs identical to the smashed model" in out and (out_dir / "smash_config.json").is_file()


class _Fixed(torch.nn.Module):
    """generate() returns the given ids (prompt-less, as Whisper's new tokens)."""

    def __init__(self, ids: list[list[int]]) -> None:
        super().__init__()
        self.ids = torch.tensor(ids)

    def generate(self, **kwargs) -> torch.Tensor:
        assert kwargs["max_new_tokens"] == 4
        return self.ids


def test_generate_call_cosine_is_the_share_of_agreeing_tokens():
    from slimkit.evaluation import fidelity

    inputs = {"input_features": torch.zeros(2, 1, 1)}
    a = GenerateCall(_Fixed([[5, 6, 7, 8], [1, 2, 3, 4]]), 4, 10)
    b = GenerateCall(_Fixed([[5, 6, 0, 8], [1, 2, 3, 4]]), 4, 10)
    assert a(**inputs).shape == (2, 4, 10) and torch.equal(a(**inputs).argmax(-1), a.model.ids)
    result = fidelity(a, b, inputs)
    assert result.cosine_min == pytest.approx(0.75) and result.cosine_mean == pytest.approx(0.875)
    short = GenerateCall(_Fixed([[5, 6], [1, 2]]), 4, 10)  # stopped early: padded with zero vectors
    assert short(**inputs)[:, 2:].abs().sum() == 0
    assert fidelity(a, short, inputs).cosine_min == pytest.approx(2 / (4 * 2) ** 0.5)
