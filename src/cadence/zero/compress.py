"""1-bit compression: sign bits packed 8 per byte plus one fp32 scale per chunk.

A chunk is `SCALE_CHUNK` consecutive elements; its scale is their mean absolute value, the
least-squares best single magnitude for a sign vector. Small chunks follow the magnitude of
nearby entries (a layer's rows differ a lot), at 4 bytes per 256 elements: the wire then costs
1/8 + 1/64 bytes per element, 1/28 of fp32. A piece travels as one uint8 buffer, signs then
scales, so one message carries both.

The sign of an element is its IEEE sign bit (so -0.0 travels as negative), which makes the
decoded value exactly `copysign(scale, x)`: the encoder forms it in one pass and error
feedback stays exact. The codec runs every step on the full momentum, so each function makes
as few passes over it as it can: numpy's `signbit`/`packbits` pack on CPU (one fast pass each,
several times quicker than torch's compare at one thread), decoding is one table lookup per
byte fused with the scale (and, for a running sum, the add).
"""

from __future__ import annotations

import numpy as np
import torch

from cadence.zero.wire import SCALE_BYTES, SCALE_CHUNK, wire_bytes

_SHIFTS = torch.arange(8, dtype=torch.uint8)
_WEIGHTS = (1 << _SHIFTS).to(torch.uint8)
# Row b holds the 8 signs (+1/-1) byte b stands for.
_SIGN_TABLE = (((torch.arange(256).reshape(-1, 1) >> torch.arange(8)) & 1) * 2 - 1).float()


def _numel_of(wire: torch.Tensor) -> int:
    return wire.numel() * 8 * SCALE_CHUNK // (SCALE_CHUNK + 8 * SCALE_BYTES)


def pack_signs(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Bit i of byte j is 1 where x[8j + i]'s sign bit is clear (x >= 0, but not -0.0).

    `x.numel()` must be a multiple of 8; `out` (uint8, numel / 8) receives the bytes if given.
    """
    if out is None:
        out = torch.empty(x.numel() // 8, dtype=torch.uint8, device=x.device)
    if x.device.type == "cpu":
        packed = np.packbits(np.signbit(x.detach().contiguous().numpy()), bitorder="little")
        np.invert(packed, out=out.numpy())  # set bit = sign bit clear
    else:
        bits = (~torch.signbit(x.reshape(-1, 8))).to(torch.uint8)
        torch.sum(bits * _WEIGHTS.to(x.device), dim=1, dtype=torch.uint8, out=out)
    return out


def unpack_signs(packed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """+1 / -1 per bit, inverse of `pack_signs`."""
    table = _SIGN_TABLE.to(device=packed.device, dtype=dtype)
    return torch.index_select(table, 0, packed.reshape(-1).long()).view(-1)


def encode_into(x: torch.Tensor, wire: torch.Tensor, decoded: torch.Tensor | None) -> None:
    """Write `x`'s encoding into `wire` (uint8, `wire_bytes(x.numel())`); if `decoded` is given,
    also what the receiver will decode there (may not alias `x`)."""
    chunks = x.view(-1, SCALE_CHUNK)
    nsign = x.numel() // 8
    scales = wire[nsign:].view(torch.float32)
    torch.mean(chunks.abs(), dim=1, out=scales)
    pack_signs(x, out=wire[:nsign])
    if decoded is not None:
        torch.copysign(scales.unsqueeze(1).expand_as(chunks), chunks,
                       out=decoded.view(-1, SCALE_CHUNK))  # fmt: skip


def encode(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(wire buffer, what the receiver will decode) for a 1-D float piece."""
    wire = torch.empty(wire_bytes(x.numel()), dtype=torch.uint8, device=x.device)
    decoded = torch.empty_like(x)
    encode_into(x, wire, decoded)
    return wire, decoded


def decode_add_(out: torch.Tensor, wire: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """out += alpha * decode(wire), in one fused pass over `out`."""
    numel = _numel_of(wire)
    scales = wire[numel // 8 :].view(torch.float32).unsqueeze(1)
    signs = unpack_signs(wire[: numel // 8]).view(-1, SCALE_CHUNK)
    out.view(-1, SCALE_CHUNK).addcmul_(signs, scales, value=alpha)
    return out


def decode(wire: torch.Tensor) -> torch.Tensor:
    """The float piece a wire buffer stands for."""
    numel = _numel_of(wire)
    scales = wire[numel // 8 :].view(torch.float32).unsqueeze(1)
    signs = unpack_signs(wire[: numel // 8]).view(-1, SCALE_CHUNK)
    return signs.mul_(scales).view(-1)


def encode_feedback_(target: torch.Tensor, wire: torch.Tensor,
                     decoded: torch.Tensor | None = None) -> None:  # fmt: skip
    """Encode `target` into `wire` and leave what the encoding lost in `target` itself.

    The caller has summed value and error into `target` (usually the error buffer, in place);
    `decoded`, if given, receives what was sent (else a temporary holds it).
    """
    sent = torch.empty_like(target) if decoded is None else decoded
    encode_into(target, wire, sent)
    target.sub_(sent)


def encode_with_feedback(x: torch.Tensor, error: torch.Tensor) -> torch.Tensor:
    """Encode `x + error` and keep what the encoding lost in `error` (error feedback)."""
    wire = torch.empty(wire_bytes(x.numel()), dtype=torch.uint8, device=x.device)
    encode_feedback_(error.add_(x), wire)
    return wire
