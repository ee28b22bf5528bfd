"""Rabenseifner all-reduce: recursive-halving reduce-scatter + recursive-doubling all-gather.

log2(q) steps each way instead of the ring's p-1, with the same (q-1)/q bandwidth term per
phase; non-powers of two fold the p - q extra ranks into partners first (see the schedule).
"""

from __future__ import annotations

import torch

from cadence.comm.collectives._exec import run_steps
from cadence.comm.collectives._p2p import Comm, reducer, split_sizes
from cadence.comm.collectives.ring import block_views
from cadence.comm.collectives.schedules import (
    halving_doubling_all_reduce_schedule,
    largest_power_of_two,
)


def all_reduce_halving_doubling(comm: Comm, flat: torch.Tensor, op: str, elems: int) -> None:
    """In-place all-reduce of a contiguous 1-D tensor over q = 2^floor(log2 p) blocks."""
    q = largest_power_of_two(comm.size)
    views, offsets = block_views(flat, split_sizes(flat.numel(), q))
    plan = halving_doubling_all_reduce_schedule(comm.size)
    run_steps(comm, plan, views, reducer(op), elems, flat, offsets)
