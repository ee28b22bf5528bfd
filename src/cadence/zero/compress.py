"""1-bit compression: sign bits packed 8 per byte plus one fp32 scale per piece.

The scale is the mean absolute value, the least-squares best single magnitude for a sign
vector. A piece travels as one uint8 buffer: `numel / 8` bytes of signs, then the scale's
4 bytes, so one message carries both.
"""

from __future__ import annotations

import torch

_SHIFTS = torch.arange(8, dtype=torch.uint8)
_WEIGHTS = (1 << _SHIFTS).to(torch.uint8)
SCALE_BYTES = 4


def wire_bytes(numel: int) -> int:
    """Size of one encoded piece of `numel` elements (a multiple of 8)."""
    return numel // 8 + SCALE_BYTES


def pack_signs(x: torch.Tensor) -> torch.Tensor:
    """Bit i of byte j is 1 where x[8j + i] >= 0; `x.numel()` must be a multiple of 8."""
    bits = (x.reshape(-1, 8) >= 0).to(torch.uint8)
    return (bits * _WEIGHTS).sum(dim=1, dtype=torch.uint8)


def unpack_signs(packed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """+1 / -1 per bit, inverse of `pack_signs`."""
    bits = (packed.reshape(-1, 1) >> _SHIFTS) & 1
    return bits.reshape(-1).to(dtype) * 2 - 1


def encode(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(wire buffer, what the receiver will decode) for a 1-D float piece."""
    scale = x.abs().mean().reshape(1).to(torch.float32) if x.numel() else x.new_zeros(1)
    wire = torch.cat([pack_signs(x), scale.view(torch.uint8)])
    return wire, unpack_signs(wire[:-SCALE_BYTES]) * scale


def decode(wire: torch.Tensor) -> torch.Tensor:
    """The float piece a wire buffer stands for."""
    scale = wire[-SCALE_BYTES:].clone().view(torch.float32)
    return unpack_signs(wire[:-SCALE_BYTES]) * scale


def encode_with_feedback(x: torch.Tensor, error: torch.Tensor) -> torch.Tensor:
    """Encode `x + error` and keep what the encoding lost in `error` (error feedback)."""
    target = x + error
    wire, decoded = encode(target)
    torch.sub(target, decoded, out=error)
    return wire
