"""The spawn helper itself: results come back in rank order; failures and hangs are reported."""

import time

import pytest
import torch
import torch.distributed as dist

from cadence.testing import RankFailed, run_ranks


def _sum_of_ranks(rank, world_size):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return rank, t.item()


def _rank_one_raises(rank, world_size):
    if rank == 1:
        raise ValueError("boom on purpose")
    dist.barrier()


def _rank_zero_hangs(rank, world_size):
    if rank == 0:
        time.sleep(60)


@pytest.mark.parametrize("world_size", [2, 4])
def test_results_in_rank_order(world_size):
    results = run_ranks(_sum_of_ranks, world_size)
    expected = sum(range(world_size))
    assert results == [(r, expected) for r in range(world_size)]


def test_failing_rank_traceback_is_shown():
    with pytest.raises(RankFailed, match=r"(?s)rank 1 of 2 failed.*ValueError: boom on purpose"):
        run_ranks(_rank_one_raises, 2, timeout=60)


def test_timeout_names_missing_ranks():
    start = time.monotonic()
    with pytest.raises(RankFailed, match=r"timed out .*ranks \[0\]"):
        run_ranks(_rank_zero_hangs, 2, timeout=6)
    assert time.monotonic() - start < 30
