"""Ring reduce-scatter / all-gather / all-reduce, plus Bruck all-gather (same block layout).

Ring reduce-scatter sends (p-1)/p of the vector per rank, half of what gloo's
allreduce-then-slice moves; ring all-reduce is reduce-scatter followed by all-gather.
"""

from __future__ import annotations

import torch

from cadence.comm.collectives._exec import run_steps
from cadence.comm.collectives._p2p import Comm, offsets_of, reducer, split_sizes
from cadence.comm.collectives.schedules import (
    bruck_all_gather_schedule,
    ring_all_gather_schedule,
    ring_all_reduce_schedule,
    ring_reduce_scatter_schedule,
)


def block_views(flat: torch.Tensor, sizes: list[int]) -> tuple[list[torch.Tensor], list[int]]:
    offsets = offsets_of(sizes)
    return [flat[offsets[i] : offsets[i + 1]] for i in range(len(sizes))], offsets


def all_reduce_ring(comm: Comm, flat: torch.Tensor, op: str, elems: int) -> None:
    """In-place ring all-reduce of a contiguous 1-D tensor over p near-equal blocks."""
    views, offsets = block_views(flat, split_sizes(flat.numel(), comm.size))
    run_steps(comm, ring_all_reduce_schedule(comm.size), views, reducer(op), elems, flat, offsets)


def reduce_scatter_ring(
    comm: Comm, scratch: torch.Tensor, sizes: list[int], op: str, elems: int
) -> torch.Tensor:
    """Reduce-scatter `scratch` (1-D, blocks of `sizes`, clobbered); returns this rank's block."""
    views, offsets = block_views(scratch, sizes)
    plan = ring_reduce_scatter_schedule(comm.size)
    run_steps(comm, plan, views, reducer(op), elems, scratch, offsets)
    return views[comm.rank]


def all_gather_blocks(
    comm: Comm,
    views: list[torch.Tensor],
    algorithm: str,
    elems: int,
    flat: torch.Tensor | None = None,
    offsets: list[int] | None = None,
) -> None:
    """Fill every block from its owner; `views[rank]` must already hold this rank's data."""
    p = comm.size
    plan = ring_all_gather_schedule(p) if algorithm == "ring" else bruck_all_gather_schedule(p)
    run_steps(comm, plan, views, None, elems, flat, offsets)
