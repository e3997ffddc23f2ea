import pytest
import torch
from torch import nn

from slimkit.engines.quantization.int8 import quantize_layers
from slimkit.engines.quantization.lowbit import quantize_model_rtn
from slimkit.errors import ModelNotSupportedError
from slimkit.evaluation import count_macs, count_macs_by_dtype, count_parameters

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*torch.ao.quantization is deprecated"),
    pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions"),
    pytest.mark.filterwarnings("ignore:Please use quant_min and quant_max"),
]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=4, bias=False)
        self.fc = nn.Linear(8 * 16 * 16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x))
        x = self.grouped(x)
        return self.fc(x.flatten(1))


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.head = nn.Linear(16, 50, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


def test_parameters_of_known_mlp_exact():
    assert count_parameters(mlp()) == 10 * 20 + 20 + 20 * 5 + 5


def test_tied_parameters_count_once():
    assert count_parameters(Tied()) == 50 * 16


def test_two_parameter_objects_on_one_storage_count_once():
    model = nn.Module()
    weight = torch.randn(4, 4)
    model.a = nn.Parameter(weight)
    model.b = nn.Parameter(weight)  # a second Parameter object viewing the same memory
    assert count_parameters(model) == 16


def test_macs_of_known_conv_and_linear_net_exact():
    x = torch.randn(2, 3, 16, 16)
    conv = 8 * 16 * 16 * (3 * 3 * 3)  # outputs per image x MACs per output
    grouped = 8 * 16 * 16 * ((8 // 4) * 3 * 3)
    fc = 8 * 16 * 16 * 10
    assert count_macs(ConvNet(), x) == 2 * (conv + grouped + fc)


def test_macs_of_mlp_exact_and_keyword_inputs():
    class Kw(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(7, 3)

        def forward(self, *, features: torch.Tensor) -> torch.Tensor:
            return self.fc(features)

    assert count_macs(mlp(), torch.randn(4, 10)) == 4 * (10 * 20 + 20 * 5)
    assert count_macs(Kw(), {"features": torch.randn(5, 7)}) == 5 * 7 * 3


def test_dynamic_quantized_model_counts_like_fp32():
    model = mlp()
    x = torch.randn(3, 10)
    q = torch.ao.quantization.quantize_dynamic(mlp(), {nn.Linear}, dtype=torch.qint8)
    assert type(q[0]).__module__.startswith("torch.ao.nn.quantized.dynamic")
    assert list(q.parameters()) == []  # weights live in packed params, yet they are counted
    assert count_parameters(q) == count_parameters(model) == 325
    assert count_macs(q, x) == count_macs(model, x) == 3 * (10 * 20 + 20 * 5)


class StaticNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 5)
        self.dequant = torch.ao.quantization.DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(self.quant(x))
        return self.dequant(self.fc(x.flatten(1)))


def test_static_quantized_conv_and_linear_count_like_fp32():
    torch.manual_seed(0)
    model = StaticNet().eval()
    x = torch.randn(2, 3, 8, 8)
    expected = 2 * (4 * 6 * 6 * 3 * 9 + 4 * 6 * 6 * 5)
    assert count_macs(model, x) == expected
    model.qconfig = torch.ao.quantization.get_default_qconfig("fbgemm")
    prepared = torch.ao.quantization.prepare(model)
    prepared(x)
    q = torch.ao.quantization.convert(prepared)
    assert type(q.conv).__module__.startswith("torch.ao.nn.quantized")
    assert count_macs(q, x) == expected
    assert count_parameters(q) == count_parameters(StaticNet()) == 4 * 3 * 9 + 4 + 144 * 5 + 5


def test_quantized_modules_count_their_macs_by_dtype():
    x = torch.randn(3, 10)
    fp32 = count_macs_by_dtype(mlp(), x)
    assert fp32 == {"fp32": 3 * (10 * 20 + 20 * 5)}
    int8 = quantize_layers(mlp(), ["0"], reduce_range=False)  # slimkit's Int8Linear: its kernel is invisible to torch
    assert count_macs_by_dtype(int8, x) == {"fp32": 3 * 20 * 5, "int8": 3 * 10 * 20}
    packed = mlp()
    quantize_model_rtn(packed, 4, 16, exclude=["2"])
    packed[0].use_kernel = False  # dequantize + F.linear: the counter sees an fp32 matmul, the layer says int4
    assert count_macs_by_dtype(packed, x) == {"fp32": 3 * 20 * 5, "int4 weights": 3 * 10 * 20}
    assert count_macs(packed, x) == count_macs(int8, x) == sum(fp32.values())
    half = mlp().to(torch.bfloat16)
    assert count_macs_by_dtype(half, x.to(torch.bfloat16)) == {"bf16": sum(fp32.values())}


def test_non_module_is_refused_with_reason():
    with pytest.raises(ModelNotSupportedError, match="needs a torch.nn.Module, got function"):
        count_parameters(lambda x: x)
    with pytest.raises(ModelNotSupportedError, match="count_macs needs a torch.nn.Module"):
        count_macs("model", torch.randn(1))


def test_many_same_shape_quantized_layers_are_all_counted():
    # unpacked weights are fresh tensors; freed memory reused by the next unpack must not look "shared"
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(12)])
    q = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    assert count_parameters(q) == 12 * (64 * 64 + 64)
