"""The collectives benchmark's noise floor: gloo's all-reduce as timed by the calibration and
by the benchmark, side by side."""

from __future__ import annotations

from cadence.bench.collectives import BenchRow
from cadence.bench.collectives_same_call import same_call, same_call_line, same_call_summary
from cadence.comm.calibrate import CalibrationRow


def bench_row(collective: str, implementation: str, nbytes: int, seconds: float) -> BenchRow:
    return BenchRow(
        collective=collective, implementation=implementation,
        algorithm="gloo" if implementation == "gloo" else "ring", nbytes=nbytes,
        measured_s=seconds, predicted_s=seconds, bound_s=0.0, measured_over_predicted=1.0,
    )  # fmt: skip


CALIBRATION = [
    CalibrationRow("all_reduce", 1024, measured_s=1.0e-3, predicted_s=1.0e-3),
    CalibrationRow("all_reduce", 4096, measured_s=2.0e-3, predicted_s=2.0e-3),
    CalibrationRow("broadcast", 1024, measured_s=5.0e-3, predicted_s=5.0e-3),
]


def test_pairs_gloo_all_reduce_at_the_sizes_both_timed() -> None:
    rows = [
        bench_row("all_reduce", "gloo", 4096, 2.5e-3),
        bench_row("all_reduce", "gloo", 1024, 1.05e-3),
        bench_row("all_reduce", "gloo", 16384, 9.0e-3),  # not calibrated: left out
        bench_row("all_reduce", "cadence", 1024, 9.0e-3),  # not gloo's: left out
        bench_row("broadcast", "gloo", 1024, 9.0e-3),  # the fit's collective only
    ]
    pairs = same_call(CALIBRATION, rows, 4)
    assert [p["nbytes"] for p in pairs] == [1024, 4096]
    assert abs(pairs[0]["ratio"] - 1.05) < 1e-12 and abs(pairs[1]["ratio"] - 1.25) < 1e-12
    summary = same_call_summary(pairs)
    assert summary["sizes"] == 2 and summary["sizes_within"] == 1
    assert summary["furthest"] == {"nbytes": 4096, "ratio": pairs[1]["ratio"]}
    assert same_call_line(summary).endswith("within 10% at 1 of 2 sizes; furthest 4KB at 1.25x")


def test_three_ranks_pair_the_calibrated_size_with_the_benchmark_s_cut_vector() -> None:
    # 4 KB on 3 ranks: the benchmark times 1023 floats, 4092 bytes.
    pairs = same_call(CALIBRATION, [bench_row("all_reduce", "gloo", 4092, 2.0e-3)], 3)
    assert [(p["nbytes"], p["calibration_s"]) for p in pairs] == [(4092, 2.0e-3)]


def test_no_common_size_says_so() -> None:
    summary = same_call_summary(same_call(CALIBRATION, [], 4))
    assert summary["sizes"] == 0 and summary["furthest"] is None
    assert same_call_line(summary).endswith("within 10% at 0 of 0 sizes")
