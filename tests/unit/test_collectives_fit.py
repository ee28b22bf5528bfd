"""What `cadence bench collectives` fits its predictions to: all-reduce at sizes between the
rows', and all-gather's and broadcast's own latency, so no row is a fitted point."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from cadence.bench._collectives_worker import Timed, schedule, timed_list
from cadence.bench.collectives import DEFAULT_SIZES, CollectivesBenchConfig, build_rows
from cadence.bench.collectives_fit import calibration_sizes, fit_run
from cadence.comm.calibrate import fit_latency
from cadence.comm.cost import AlphaBeta
from cadence.comm.local_copy import LocalCopyTimes


def test_calibration_sizes_sit_between_the_rows_and_never_on_one() -> None:
    mids = calibration_sizes(DEFAULT_SIZES)
    assert mids == tuple(2048 * 4**i for i in range(8))  # 2 KB .. 32 MB
    assert not set(mids) & set(DEFAULT_SIZES)
    # Two sizes leave one midpoint: half the smallest and twice the largest join it.
    assert calibration_sizes((4096, 524288)) == (2048, 46340, 1048576)
    assert calibration_sizes((4096,)) == (2048, 8192)


@pytest.mark.parametrize("overlap", [False, True])
def test_fit_latency_recovers_a_collective_s_own_alpha_and_keeps_beta(overlap: bool) -> None:
    shared = AlphaBeta(0.1e-3, 20e-9, overlap=overlap)
    truth = AlphaBeta(0.3e-3, 20e-9, overlap=overlap)  # all-gather's calls cost more
    sizes = [2048, 8192]
    seconds = [truth.time("allgather", "ring", n, 4) for n in sizes]
    got = fit_latency(shared, "allgather", "ring", sizes, seconds, 4)
    assert math.isclose(got.alpha_s, truth.alpha_s, rel_tol=1e-9)
    assert got.beta_s_per_byte == shared.beta_s_per_byte and got.overlap == overlap


def test_fit_latency_takes_the_processor_time_per_byte_off_a_token_bucket_call() -> None:
    shared = AlphaBeta(0.1e-3, 20e-9, overlap=True, cpu_s_per_byte=3e-9)
    truth = replace(shared, alpha_s=0.3e-3)
    sizes = [2048, 8192]
    seconds = [truth.time("allgather", "ring", n, 4) for n in sizes]
    got = fit_latency(shared, "allgather", "ring", sizes, seconds, 4)
    assert math.isclose(got.alpha_s, truth.alpha_s, rel_tol=1e-9)
    assert got.cpu_s_per_byte == shared.cpu_s_per_byte


def test_fit_latency_refuses_sizes_the_wire_decides() -> None:
    model = AlphaBeta(1e-6, 20e-9)
    big = [64 << 20]
    with pytest.raises(ValueError, match="no latency-bound allgather size"):
        fit_latency(
            model, "allgather", "ring", big, [model.time("allgather", "ring", big[0], 2)], 2
        )


def test_the_calibration_is_timed_in_the_rounds_of_the_rows_at_sizes_of_its_own() -> None:
    config = CollectivesBenchConfig(
        sizes=(1024, 4096, 16384), collectives=("all_reduce", "broadcast")
    )
    timed = timed_list(config, 4)
    rows = [t for t in timed if t.role == "row"]
    points = [t for t in timed if t.role == "calibration"]
    assert {4 * t.elems for t in rows} == {1024, 4096, 16384}
    assert [(t.variant[0], 4 * t.elems) for t in points] == [
        ("all_reduce", 2048), ("all_reduce", 8192), ("broadcast", 2048), ("broadcast", 8192),
    ]  # fmt: skip
    # all-gather's own alpha only where all-gather is measured; none when switched off
    off = timed_list(CollectivesBenchConfig(alpha_per_collective=False), 2)
    assert {t.variant[0] for t in off if t.role == "calibration"} == {"all_reduce"}


def test_a_round_spreads_small_calls_over_its_passes_and_times_every_entry_once() -> None:
    timed = [
        Timed("row", ("all_reduce", "gloo", "gloo"), n // 4)
        for n in (1024, 65536, 1 << 20, 64 << 20, 4 << 20)
    ]
    passes = schedule(timed)
    assert len(passes) == 4
    calls: dict[int, list[int]] = {}
    for blocks in passes:
        for i, n in blocks:
            calls.setdefault(i, []).append(n)
    assert calls[0] == [16] * 4 and calls[1] == [4] * 4  # 1 KB: 64 calls, 64 KB: 16
    assert calls[2] == [1] and calls[3] == [1] and calls[4] == [1]  # one block each, once


def test_rows_are_priced_with_each_collective_s_own_alpha() -> None:
    # A run whose all-gather costs 3x all-reduce's alpha per message: fitted from its own
    # calls at 2 and 8 KB, it predicts the 1 KB row; all-reduce's alpha would not.
    config = CollectivesBenchConfig(
        hosts=2, bandwidth_bps=400e6, collectives=("all_reduce", "all_gather")
    )
    link = AlphaBeta(0.1e-3, 20e-9, overlap=True)
    gather = AlphaBeta(0.3e-3, 20e-9, overlap=True)

    def point(collective: str, n: int, model: AlphaBeta, name: str) -> dict[str, object]:
        # a gloo call as the worker records it
        return {"collective": collective, "implementation": "gloo", "algorithm": "gloo",
                "nbytes": n, "measured_s": model.time(name, "ring", n, 2)}  # fmt: skip

    points = [point("all_reduce", n, link, "allreduce") for n in calibration_sizes(DEFAULT_SIZES)]
    points += [point("all_gather", n, gather, "allgather") for n in (2048, 8192)]
    fitted = fit_run(config, points, LocalCopyTimes.none())
    assert math.isclose(fitted.alphas("token-bucket")["all_gather"], 0.3e-3, rel_tol=1e-6)
    measured = [point("all_gather", 1024, gather, "allgather")]
    own = build_rows(
        config, measured, fitted.models["token-bucket"], None, fitted.by_collective["token-bucket"]
    )
    shared = build_rows(config, measured, fitted.models["token-bucket"])
    assert math.isclose(own[0].measured_over_predicted, 1.0, rel_tol=1e-6)
    assert shared[0].measured_over_predicted > 2.5
    rows = fitted.rows("token-bucket")
    assert all(math.isclose(r["predicted_s"], r["measured_s"], rel_tol=0.01) for r in rows)


def test_a_collective_whose_calls_the_wire_decides_keeps_the_all_reduce_alpha() -> None:
    config = CollectivesBenchConfig(hosts=2, bandwidth_bps=1e6, collectives=("broadcast",))
    link = AlphaBeta(0.1e-3, 8e-6, overlap=True)  # 1 Mbit/s: 2 KB takes 16 ms on the wire
    points: list[dict[str, object]] = [
        {
            "collective": "all_reduce",
            "nbytes": n,
            "measured_s": link.time("allreduce", "ring", n, 2),
        }
        for n in (16, 64, 1 << 20, 4 << 20)
    ]
    for n in (2048, 8192):  # the wire's time alone
        points.append({"collective": "broadcast", "nbytes": n, "measured_s": 8e-6 * n})
    fitted = fit_run(config, points, LocalCopyTimes.none())
    assert fitted.alphas("token-bucket") == {"all_reduce": fitted.models["token-bucket"].alpha_s}
