"""Local copy times: looked up by size, and added to gloo's reduce-scatter and all-gather
predictions in the collectives benchmark (and to nothing else)."""

from __future__ import annotations

import math
from dataclasses import asdict

import pytest

from cadence.bench.collectives import CollectivesBenchConfig, build_rows, gloo_local_s
from cadence.comm.cost import AlphaBeta
from cadence.comm.local_copy import LocalCopyTimes

MB = 1 << 20
TIMES = LocalCopyTimes(sizes=(MB, 4 * MB), fresh_s=(1e-3, 7e-3), warm_s=(0.5e-3, 2e-3))


def test_times_are_measured_at_their_sizes_linear_between_and_proportional_outside() -> None:
    assert TIMES.fresh(MB) == 1e-3 and TIMES.warm(4 * MB) == 2e-3
    assert math.isclose(TIMES.fresh(2 * MB), 3e-3)  # a third of the way from 1 to 4 MB
    assert math.isclose(TIMES.warm(MB // 2), 0.25e-3)  # below: in proportion to 1 MB
    assert math.isclose(TIMES.fresh(8 * MB), 14e-3)  # above: in proportion to 4 MB
    assert TIMES.fresh(0) == 0.0


def test_no_measurement_prices_every_copy_at_zero() -> None:
    assert LocalCopyTimes.from_dict(None) == LocalCopyTimes.none()
    assert LocalCopyTimes.none().fresh(64 * MB) == 0.0 == LocalCopyTimes.none().warm(MB)
    assert LocalCopyTimes.from_dict(asdict(TIMES)) == TIMES


@pytest.mark.parametrize(
    "sizes, fresh, warm",
    [((MB,), (1e-3, 2e-3), (1e-3,)), ((4 * MB, MB), (1e-3, 1e-3), (1e-3, 1e-3)),
     ((MB,), (-1e-3,), (1e-3,)), ((0,), (0.0,), (0.0,))],
)  # fmt: skip
def test_bad_tables_are_refused(sizes, fresh, warm) -> None:
    with pytest.raises(ValueError):
        LocalCopyTimes(sizes, fresh, warm)


def test_gloo_reduce_scatter_pays_a_clone_and_a_block_and_all_gather_a_copy_out() -> None:
    n = 4 * MB
    assert gloo_local_s("reduce_scatter", n, 4, TIMES) == TIMES.fresh(n) + TIMES.warm(n // 4)
    assert gloo_local_s("all_gather", n, 4, TIMES) == TIMES.warm(n)
    for in_place in ("all_reduce", "broadcast", "all_to_all"):
        assert gloo_local_s(in_place, n, 4, TIMES) == 0.0


def test_bench_rows_add_the_copies_to_gloo_rows_only() -> None:
    config = CollectivesBenchConfig(sizes=(4 * MB,), hosts=4)
    model = AlphaBeta(1e-4, 1e-8)
    measured = [
        {"collective": c, "implementation": impl, "algorithm": alg, "nbytes": 4 * MB,
         "measured_s": 0.1}
        for c, impl, alg in [("reduce_scatter", "gloo", "gloo"), ("reduce_scatter", "cadence",
                             "ring"), ("all_reduce", "gloo", "gloo")]
    ]  # fmt: skip
    plain = {(r.collective, r.implementation): r.predicted_s
             for r in build_rows(config, measured, model)}  # fmt: skip
    priced = {(r.collective, r.implementation): r.predicted_s
              for r in build_rows(config, measured, model, TIMES)}  # fmt: skip
    assert math.isclose(
        priced["reduce_scatter", "gloo"] - plain["reduce_scatter", "gloo"],
        TIMES.fresh(4 * MB) + TIMES.warm(MB),
    )
    assert priced["reduce_scatter", "cadence"] == plain["reduce_scatter", "cadence"]
    assert priced["all_reduce", "gloo"] == plain["all_reduce", "gloo"]


def test_a_copy_shorter_than_a_barrier_is_timed_by_its_own_clock() -> None:
    from cadence.comm.local_copy import _copy_s

    # 64 MB on 4 ranks sharing 2 processors: 36 ms each, 70 ms until the last is done.
    assert math.isclose(_copy_s(own=0.036, span=0.0715, empty_span=0.0015), 0.070)
    # A copy that outlasts a barrier but is not staggered keeps its own time.
    assert _copy_s(own=0.010, span=0.0105, empty_span=0.0015) == 0.010
    # 4 KB: the barrier's jitter (span - empty 0.2 ms) is not the copy's.
    assert _copy_s(own=2e-6, span=0.0017, empty_span=0.0015) == 2e-6
