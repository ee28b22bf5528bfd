"""Bytes on the wire of cadence-dp's gradient compression, without torch: the engine's codecs
(`dp.compress`) count with these and the simulator prices chunks with them."""

from __future__ import annotations

import math
from collections.abc import Sequence

from cadence.dp.config import COMPRESSIONS
from cadence.dp.plan import Segment


def sign_wire_bytes(numel: int) -> int:
    """Bytes one rank sends for a chunk of `numel` elements: the bits and a float32 scale."""
    return math.ceil(numel / 8) + 4


def matrix_shape(shape: Sequence[int], seg: Segment) -> tuple[int, int] | None:
    """The (rows, columns) `seg` is viewed as for PowerSGD, or None where it goes uncompressed:
    a parameter of at least two dimensions is a matrix of shape[0] rows; a segment of it is
    compressed only when it holds whole rows, at least two, and rows have two elements."""
    if len(shape) < 2:
        return None
    cols = math.prod(shape[1:])
    if cols < 2 or seg.start % cols or seg.length % cols or seg.length // cols < 2:
        return None
    return seg.length // cols, cols


def powersgd_wire_elements(
    shapes: Sequence[tuple[int, int] | None], lengths: Sequence[int], rank: int
) -> int:
    """Elements one rank sends for a chunk: r (n + m) per matrix, every element otherwise."""
    total = 0
    for shape, length in zip(shapes, lengths, strict=True):
        if shape is None:
            total += length
        else:
            n, m = shape
            total += min(rank, n, m) * (n + m)
    return total


def wire_bytes(
    method: str,
    numel: int,
    element_size: int,
    matrices: Sequence[tuple[int, int] | None] = (),
    lengths: Sequence[int] = (),
    rank: int = 2,
) -> int:
    """Bytes one rank hands to the collectives for a chunk of `numel` elements of
    `element_size` bytes under `method` (what both the engine counts and the simulator prices).
    `matrices`/`lengths`: the chunk's segments as `matrix_shape` sees them (powersgd only)."""
    if method == "none":
        return numel * element_size
    if method in ("bf16", "fp16"):
        return numel * 2
    if method == "sign":
        return sign_wire_bytes(numel)
    if method == "powersgd":
        return powersgd_wire_elements(matrices, lengths, rank) * element_size
    raise ValueError(f"unknown compression {method!r}: choose one of {', '.join(COMPRESSIONS)}")
