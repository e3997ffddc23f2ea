import pytest
import torch

from slimkit.engines.quantization.lowbit import SUPPORTED_BITS, pack, packed_length, unpack
from slimkit.errors import ConfigError


@pytest.mark.parametrize("bits", SUPPORTED_BITS)
@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 9, 64, 130, 577])
def test_pack_unpack_round_trip_is_exact(bits, n):
    gen = torch.Generator().manual_seed(bits * 1000 + n)
    q = torch.randint(0, 2**bits, (5, n), generator=gen, dtype=torch.uint8)
    packed = pack(q, bits)
    assert packed.dtype == torch.uint8
    assert packed.shape == (5, packed_length(n, bits))
    assert torch.equal(unpack(packed, bits, n), q)


@pytest.mark.parametrize("bits", SUPPORTED_BITS)
def test_extreme_codes_and_leading_dims_survive(bits):
    top = 2**bits - 1
    q = torch.tensor([[0, top] * 12, [top, 0] * 12], dtype=torch.uint8).view(2, 1, 24).expand(2, 3, 24)
    assert torch.equal(unpack(pack(q, bits), bits, 24), q)


def test_packed_sizes_are_really_low_bit():
    assert packed_length(128, 4) == 64
    assert packed_length(128, 2) == 32
    assert packed_length(128, 3) == 48  # 8 values in 3 bytes
    assert packed_length(128, 8) == 128
    assert packed_length(9, 3) == 6  # a partial unit is padded to a whole one
    assert packed_length(3, 4) == 2


def test_documented_layouts():
    # 4 bits: value 2j in the low nibble, 2j+1 in the high nibble
    assert pack(torch.tensor([[0x3, 0xA]]), 4).tolist() == [[0xA3]]
    # 2 bits: value 4j+i in bits 2i..2i+1
    assert pack(torch.tensor([[1, 2, 3, 0]]), 2).tolist() == [[0b00111001]]
    # 3 bits: eight values form a 24-bit word, value i in bits 3i..3i+2; bytes stored planar per row
    values = [1, 2, 3, 4, 5, 6, 7, 0]
    word = sum(v << (3 * i) for i, v in enumerate(values))
    assert pack(torch.tensor([values]), 3).tolist() == [[word & 0xFF, (word >> 8) & 0xFF, word >> 16]]
    other = [7, 6, 5, 4, 3, 2, 1, 0]
    word2 = sum(v << (3 * i) for i, v in enumerate(other))
    assert pack(torch.tensor([values + other]), 3).tolist() == [
        [word & 0xFF, word2 & 0xFF, (word >> 8) & 0xFF, (word2 >> 8) & 0xFF, word >> 16, word2 >> 16]
    ]


def test_pack_refuses_codes_that_do_not_fit():
    with pytest.raises(ConfigError, match=r"values in \[0, 16\]; they must lie in \[0, 15\]"):
        pack(torch.tensor([[0, 16]]), 4)
    with pytest.raises(ConfigError, match="integer tensor"):
        pack(torch.tensor([[0.5]]), 4)


def test_unsupported_bits_and_wrong_length_are_explained():
    with pytest.raises(ConfigError, match="bits=5 is not supported; use one of 2, 3, 4, 8"):
        pack(torch.zeros(1, 4, dtype=torch.uint8), 5)
    packed = pack(torch.zeros(2, 10, dtype=torch.uint8), 4)
    with pytest.raises(ConfigError, match="pass the length the tensor was packed with"):
        unpack(packed, 4, 20)
