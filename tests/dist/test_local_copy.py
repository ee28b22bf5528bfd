"""Local copy times measured on a live gloo group: one table on every rank, a large copy
takes time, and bad arguments are refused."""

import pytest

from cadence.comm.local_copy import LocalCopyTimes, measure_local_copy
from cadence.testing import run_ranks

LARGE = 32 << 20  # a clone of this takes ms, well above the barriers' noise


def _measure(rank, world_size):
    return measure_local_copy([LARGE, 4096], repeats=2, calls=2)


def test_every_rank_gets_the_same_table_and_a_large_copy_costs_time():
    first, second = run_ranks(_measure, 2, timeout=120)
    assert first == second
    assert isinstance(first, LocalCopyTimes) and first.sizes == (4096, LARGE)
    assert first.fresh(LARGE) > 0 and first.warm(LARGE) > 0
    assert all(t >= 0 for t in (*first.fresh_s, *first.warm_s))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="positive sizes"):
        measure_local_copy([], repeats=1)
    with pytest.raises(ValueError, match="repeats"):
        measure_local_copy([1024], repeats=0)
