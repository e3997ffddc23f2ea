import copy

import pytest
import torch

from slimkit import zoo
from slimkit.data import DataModule, DictDataset
from slimkit.engines.quantization.lowbit import (
    PackedLinear,
    calibration_ids,
    find_blocks,
    quantize_model_awq,
    quantize_model_gptq,
    quantize_model_rtn,
    run_blockwise,
)
from slimkit.engines.quantization.lowbit.calibration import BlockQuantizer, capture_block_inputs
from slimkit.errors import ConfigError, DataError, ModelNotSupportedError


class ByteTokenizer:
    eos_token_id = 0

    def __call__(self, texts, add_special_tokens=True, **_):
        return {"input_ids": [list(t.encode("utf-8")) for t in texts]}


def _text_data(texts):
    train = DictDataset({"text": texts})
    return DataModule(train, None, None, lambda batch: batch)


class Recorder(BlockQuantizer):
    def __init__(self):
        self.seen: dict[str, int] = {}
        self.blocks: list[tuple[str, list[list[str]], dict[str, str]]] = []

    def observe(self, name, x):
        self.seen[name] = self.seen.get(name, 0) + x.reshape(-1, x.shape[-1]).shape[0]

    def quantize_block(self, model, block_name, block, names, shared, producers, probe=None):
        self.probe_shape = tuple(probe().shape)
        self.blocks.append((block_name, shared, producers))


@pytest.fixture()
def llama():
    return zoo.load("tiny_llama").model.eval()


def test_find_blocks_picks_the_decoder_layers(llama):
    name, blocks = find_blocks(llama)
    assert name == "model.layers" and len(blocks) == 2
    with pytest.raises(ModelNotSupportedError, match="no list of transformer blocks"):
        find_blocks(torch.nn.Sequential(torch.nn.Linear(4, 4)))


def test_capture_stops_at_block_zero(llama):
    calls = []
    handle = llama.model.layers[1].register_forward_pre_hook(lambda *_: calls.append(1))
    captured = capture_block_inputs(llama, llama.model.layers[0], [torch.randint(0, 256, (1, 8))] * 3)
    handle.remove()
    assert calls == [] and len(captured) == 3
    assert captured[0].args[0].shape == (1, 8, 64)


def test_runner_walks_blocks_and_finds_shared_inputs_and_their_producers(llama):
    recorder = Recorder()
    targets = [n for n, m in llama.named_modules() if type(m) is torch.nn.Linear and n != "lm_head"]
    outside = run_blockwise(llama, torch.randint(0, 256, (3, 10)), targets + ["lm_head"], recorder)
    assert outside == ["lm_head"]
    assert recorder.probe_shape == (1, 10, 64)  # probe runs the block on one calibration sample
    assert recorder.seen == {n: 30 for n in targets}  # 3 samples x 10 tokens each
    block, shared, producers = recorder.blocks[1]
    p = "model.layers.1"
    assert block == p
    assert [f"{p}.self_attn.q_proj", f"{p}.self_attn.k_proj", f"{p}.self_attn.v_proj"] in shared
    assert [f"{p}.mlp.gate_proj", f"{p}.mlp.up_proj"] in shared
    assert producers[f"{p}.self_attn.q_proj"] == f"{p}.input_layernorm"
    assert producers[f"{p}.mlp.up_proj"] == f"{p}.post_attention_layernorm"


def test_calibration_ids_are_consecutive_tokens_of_the_train_text():
    data = _text_data(["abcd", "efgh", "ijkl"])
    ids = calibration_ids(data, ByteTokenizer(), 2, 5)
    assert ids.tolist() == [[97, 98, 99, 100, 0], [101, 102, 103, 104, 0]]  # EOS (0) between documents


def test_calibration_ids_explain_what_is_missing():
    data = _text_data(["abcd"])
    with pytest.raises(DataError, match=r"has 4 tokens, fewer than n_calibration_samples x seq_len = 2 x 5 = 10"):
        calibration_ids(data, ByteTokenizer(), 2, 5)
    with pytest.raises(DataError, match="the tokenizer does not belong to this model"):
        calibration_ids(data, ByteTokenizer(), 1, 4, vocab_size=50)
    with pytest.raises(DataError, match="needs a tokenizer"):
        calibration_ids(data, None, 1, 4)


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_calibrated_methods_beat_rtn_on_held_out_tokens(llama, method):
    gen = torch.Generator().manual_seed(0)
    calib, held_out = torch.randint(0, 256, (16, 32), generator=gen), torch.randint(0, 256, (4, 32), generator=gen)
    with torch.no_grad():
        ref = llama(input_ids=held_out).logits
    errors = {}
    for name in ("rtn", method):
        model = copy.deepcopy(llama)
        if name == "rtn":
            quantize_model_rtn(model, 3, 32)
        elif name == "gptq":
            quantize_model_gptq(model, calib, 3, 32)
        else:
            quantize_model_awq(model, calib, 3, 32, n_grid=10)
        assert sum(isinstance(m, PackedLinear) for m in model.modules()) == 14
        with torch.no_grad():
            errors[name] = float((model(input_ids=held_out).logits - ref).pow(2).mean())
    assert errors[method] < errors["rtn"]


def test_exclude_everything_is_refused(llama):
    with pytest.raises(ConfigError, match=r"found 15 x Linear \(linear\), all excluded by \['\*'\]"):
        quantize_model_rtn(llama, 4, 32, exclude=("*",))


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_statistics_are_built_once_per_input_not_once_per_sample(llama, method, monkeypatch):
    """A Hessian is an [in, in] matrix (822 MB for an 8B down_proj): building one per calibration sample and
    throwing it away doubled the peak memory of the forward pass (found on the 8B streaming run)."""
    from slimkit.engines.quantization.lowbit import quantize

    name = "HessianAccumulator" if method == "gptq" else "ActivationStats"
    owner = quantize if method == "gptq" else quantize.awq_mod
    built = []
    real = getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *a, **k: built.append(a) or real(*a, **k))
    calib = torch.randint(0, 256, (6, 16), generator=torch.Generator().manual_seed(0))
    blocks = len(find_blocks(llama)[1])
    (quantize_model_gptq if method == "gptq" else quantize_model_awq)(llama, calib, 4, 32)
    # per block: q/k/v share one input, o, gate/up share one, down: 4 statistics, whatever the 6 samples
    assert len(built) == 4 * blocks
