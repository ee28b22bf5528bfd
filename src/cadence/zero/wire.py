"""1-bit compression's wire format in sizes (`cadence.zero.compress` does the encoding): plain
arithmetic, so the layout and the simulator size compressed pieces without importing torch."""

from __future__ import annotations

SCALE_BYTES = 4
"""Bytes of one chunk's fp32 scale."""
SCALE_CHUNK = 256
"""Elements per fp32 scale; pieces are padded to a multiple of it."""


def wire_bytes(numel: int) -> int:
    """Size of one encoded piece of `numel` elements (a multiple of `SCALE_CHUNK`)."""
    return numel // 8 + SCALE_BYTES * (numel // SCALE_CHUNK)
