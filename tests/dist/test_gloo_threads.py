"""gloo's I/O thread under SCHED_IDLE in a real gloo group (world size 2): it is found, demoted
inside the block, collectives stay correct there, and its policy comes back after."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from cadence.comm.gloo_threads import gloo_io_yields, io_thread_ids
from cadence.testing import run_ranks


def _demote_and_reduce(rank: int, world_size: int) -> tuple[int, list[int], set[float], list[int]]:
    dist.barrier()
    (io_thread,) = io_thread_ids()  # one per process
    sums: set[float] = set()
    with gloo_io_yields() as demoted:
        inside = [os.sched_getscheduler(t) for t in demoted]
        for step in range(20):  # small messages: the case the demotion is for
            x = torch.full((256,), float((rank + 1) * (step + 1)))
            dist.all_reduce(x)
            sums |= set((x / (step + 1)).tolist())
    after = [os.sched_getscheduler(t) for t in demoted]
    assert demoted == [io_thread]
    return io_thread, inside, sums, after


def test_io_thread_demoted_inside_and_restored_after() -> None:
    for thread, inside, sums, after in run_ranks(_demote_and_reduce, 2, timeout=60):
        assert thread > 0
        assert inside == [os.SCHED_IDLE]
        assert sums == {3.0}  # 1 + 2, scaled back, at every step
        assert after == [os.SCHED_OTHER]
