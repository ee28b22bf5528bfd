"""The mean of every rank's flat pseudo-gradient, started now and read later, in the outer
dtype. Every rank receives bitwise the same mean (the replicas must stay identical):

- fp32: one all-reduce (sum), divided by the world size.
- bf16: the all-reduce in bf16 (half the bytes; the sum itself rounds to bf16).
- int8: each rank quantises its tensor per chunk of `INT8_CHUNK` values to int8 with the
  chunk's absolute maximum / 127 as scale (a quarter of the bytes, plus one fp32 scale per
  chunk); the int8 values and scales are all-gathered and every rank dequantises and sums
  them in fp32 in rank order. Summing in int8 would overflow and an int32 sum would carry as
  many bytes as fp32, hence the gather: each value is off by at most half its chunk's step
  (absmax / 254) per rank, and the sum adds no error of its own.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.distributed as dist

from cadence.comm import ops as comm
from cadence.localsgd.config import INT8_CHUNK


class Reduction(Protocol):
    def wait(self) -> torch.Tensor:
        """The fp32 mean over ranks (blocks until it has arrived; the same tensor each call)."""
        ...


def quantize_int8(flat: torch.Tensor, chunk: int = INT8_CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """`flat` (fp32, 1-D) as int8 values and one fp32 scale per chunk of `chunk` values."""
    n = flat.numel()
    chunks = -(-n // chunk)
    padded = torch.zeros(chunks * chunk, dtype=torch.float32, device=flat.device)
    padded[:n] = flat
    rows = padded.view(chunks, chunk)
    scales = rows.abs().amax(dim=1) / 127
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    q = torch.round(rows / safe[:, None]).clamp_(-127, 127).to(torch.int8)
    return q.view(-1), scales


def dequantize_int8(q: torch.Tensor, scales: torch.Tensor, n: int) -> torch.Tensor:
    """The fp32 values `quantize_int8` encoded (the first `n`)."""
    rows = q.view(scales.numel(), -1).to(torch.float32) * scales[:, None]
    return rows.view(-1)[:n]


class Done:
    """A mean already known (a world of one, or one restored from a checkpoint)."""

    def __init__(self, value: torch.Tensor):
        self._value = value

    def wait(self) -> torch.Tensor:
        return self._value


class _Summed:
    """An all-reduce (sum) in flight; its mean in fp32."""

    def __init__(self, buffer: torch.Tensor, work: dist.Work, world: int):
        self._buffer, self._work, self._world = buffer, work, world
        self._mean: torch.Tensor | None = None

    def wait(self) -> torch.Tensor:
        if self._mean is None:
            self._work.wait()
            self._mean = self._buffer.to(torch.float32).div_(self._world)
        return self._mean


class _Gathered:
    """Every rank's int8 values and scales in flight; their dequantised mean."""

    def __init__(
        self, values: torch.Tensor, scales: torch.Tensor, works: list[dist.Work], n: int, world: int
    ):
        self._values, self._scales, self._works = values, scales, works
        self._n, self._world = n, world
        self._mean: torch.Tensor | None = None

    def wait(self) -> torch.Tensor:
        if self._mean is None:
            self._mean = self._sum().div_(self._world)
        return self._mean

    def _sum(self) -> torch.Tensor:
        for work in self._works:
            work.wait()
        values = self._values.view(self._world, -1)
        scales = self._scales.view(self._world, -1)
        total = dequantize_int8(values[0], scales[0], self._n).clone()
        for r in range(1, self._world):  # rank order: every rank rounds the sum alike
            total += dequantize_int8(values[r], scales[r], self._n)
        return total


def start_mean(
    flat: torch.Tensor, dtype: str, world: int, group: dist.ProcessGroup | None
) -> Reduction:
    """Start the mean over ranks of `flat` (fp32, 1-D; left unchanged) sent as `dtype`. In a
    world of one the value takes the same rounding, with nothing sent."""
    if dtype == "int8":
        q, scales = quantize_int8(flat)
        if world == 1:
            return Done(dequantize_int8(q, scales, flat.numel()))
        values = torch.empty(world * q.numel(), dtype=torch.int8, device=q.device)
        all_scales = torch.empty(world * scales.numel(), dtype=scales.dtype, device=q.device)
        works = [
            comm.all_gather_into_tensor_async(values, q, group),
            comm.all_gather_into_tensor_async(all_scales, scales, group),
        ]
        return _Gathered(values, all_scales, works, flat.numel(), world)
    wire = torch.bfloat16 if dtype == "bf16" else torch.float32
    buffer = flat.to(wire, copy=True)
    if world == 1:
        return Done(buffer.to(torch.float32))
    return _Summed(buffer, comm.all_reduce_async(buffer, "sum", group), world)
