"""Pack low-bit integers into bytes and back, exactly.

Values are unsigned integers in ``[0, 2**bits)`` packed along the LAST dimension:

- 8 bits: one value per byte (the bytes are the values).
- 4 bits: two values per byte; value ``2j`` in the low nibble, ``2j+1`` in the high nibble.
- 2 bits: four values per byte; value ``4j+i`` in bits ``2i..2i+1``.
- 3 bits: eight values in three bytes. Unit ``u`` (values ``8u..8u+7``) forms a 24-bit word with value
  ``8u+i`` in bits ``3i..3i+2``. The bytes are stored planar: a row of ``U`` units holds the ``U`` low bytes
  of its words, then the ``U`` middle bytes, then the ``U`` high bytes (so each byte position is one
  contiguous run, which the CPU small-batch kernel masks without strided reads).

The last dimension is zero-padded up to a whole packing unit (2, 4 or 8 values), so ``unpack`` needs the
original length to drop the padding. ``unpack(pack(q, b), b, n)`` returns ``q`` bit for bit.
"""

from __future__ import annotations

import torch

from slimkit.errors import ConfigError

SUPPORTED_BITS = (2, 3, 4, 8)
#: bits -> (values per packing unit, bytes per packing unit)
_UNITS = {2: (4, 1), 3: (8, 3), 4: (2, 1), 8: (1, 1)}


def check_bits(bits: int) -> int:
    """Return ``bits`` if it is a supported width, else raise a ConfigError naming the allowed ones."""
    if isinstance(bits, bool) or bits not in SUPPORTED_BITS:
        raise ConfigError(f"bits={bits!r} is not supported; use one of {', '.join(map(str, SUPPORTED_BITS))}.")
    return int(bits)


def packed_length(n: int, bits: int) -> int:
    """Number of bytes that ``n`` values of width ``bits`` take along the packed dimension."""
    values, nbytes = _UNITS[check_bits(bits)]
    return -(-n // values) * nbytes


def pack(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack integers in ``[0, 2**bits)`` along the last dim into a uint8 tensor (layout in the module doc).

    Raises a ConfigError if a value does not fit in ``bits`` bits.
    """
    values, _ = _UNITS[check_bits(bits)]
    if q.dtype.is_floating_point or q.dtype == torch.bool or q.dim() == 0:
        raise ConfigError(
            f"pack needs an integer tensor with at least one dim; got {q.dtype} of shape {tuple(q.shape)}."
        )
    if q.numel() and (int(q.min()) < 0 or int(q.max()) >= 1 << bits):
        raise ConfigError(
            f"pack(bits={bits}) got values in [{int(q.min())}, {int(q.max())}]; "
            f"they must lie in [0, {(1 << bits) - 1}]."
        )
    n = q.shape[-1]
    pad = -n % values
    q = q.to(torch.int32)
    if pad:
        q = torch.nn.functional.pad(q, (0, pad))
    q = q.reshape(*q.shape[:-1], -1, values)
    shifts = torch.arange(values, device=q.device, dtype=torch.int32) * bits
    word = (q << shifts).sum(dim=-1, dtype=torch.int32)  # bit ranges are disjoint: sum == or
    if bits == 3:
        parts = torch.stack([word & 0xFF, (word >> 8) & 0xFF, (word >> 16) & 0xFF], dim=-2)
        return parts.reshape(*parts.shape[:-2], -1).to(torch.uint8)
    return word.to(torch.uint8)


def unpack(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Invert :func:`pack`: return the first ``n`` values along the last dim as uint8."""
    values, nbytes = _UNITS[check_bits(bits)]
    if packed.dtype != torch.uint8:
        raise ConfigError(f"unpack needs a uint8 tensor; got {packed.dtype}.")
    units = packed.shape[-1] // nbytes
    if packed.shape[-1] != packed_length(n, bits):
        raise ConfigError(
            f"unpack(bits={bits}, n={n}): the packed last dim is {packed.shape[-1]} bytes, but {n} values take "
            f"{packed_length(n, bits)}; pass the length the tensor was packed with."
        )
    if bits == 8:
        return packed[..., :n]
    if bits == 4:
        out = torch.stack([packed & 0xF, packed >> 4], dim=-1)
    elif bits == 2:
        out = torch.stack([(packed >> s) & 0x3 for s in (0, 2, 4, 6)], dim=-1)
    else:
        b = packed.reshape(*packed.shape[:-1], 3, units).to(torch.int32)
        word = b[..., 0, :] | (b[..., 1, :] << 8) | (b[..., 2, :] << 16)
        shifts = torch.arange(8, device=packed.device, dtype=torch.int32) * 3
        out = ((word.unsqueeze(-1) >> shifts) & 0x7).to(torch.uint8)
    out = out.reshape(*packed.shape[:-1], units * values)
    return out[..., :n]
