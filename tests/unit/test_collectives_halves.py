"""The collectives benchmark's noise floor: each gloo row's odd rounds against its even rounds."""

from __future__ import annotations

from typing import Any

from cadence.bench.collectives_halves import halves, halves_line, halves_summary


def timed(
    collective: str, implementation: str, nbytes: int, even: float, odd: float
) -> dict[str, Any]:
    return {"role": "row", "collective": collective, "implementation": implementation,
            "algorithm": "gloo" if implementation == "gloo" else "ring", "nbytes": nbytes,
            "measured_s": (even + odd) / 2, "halves_s": [even, odd]}  # fmt: skip


def test_pairs_gloo_rows_and_counts_the_ones_within_ten_percent() -> None:
    measured = [
        timed("all_reduce", "gloo", 1024, 1.0e-3, 1.05e-3),
        timed("all_gather", "gloo", 4096, 2.0e-3, 2.5e-3),
        timed("all_reduce", "cadence", 1024, 1.0e-3, 9.0e-3),  # not gloo's: left out
    ]
    pairs = halves(measured)
    assert [(p["collective"], p["nbytes"]) for p in pairs] == [
        ("all_reduce", 1024),
        ("all_gather", 4096),
    ]
    assert abs(pairs[0]["ratio"] - 1.05) < 1e-12 and abs(pairs[1]["ratio"] - 1.25) < 1e-12
    summary = halves_summary(pairs)
    assert summary["rows"] == 2 and summary["rows_within"] == 1
    assert summary["furthest"] == {
        "collective": "all_gather",
        "nbytes": 4096,
        "ratio": pairs[1]["ratio"],
    }
    line = halves_line(summary)
    assert line.endswith("within 10% at 1 of 2 rows; furthest all_gather 4KB at 1.25x")


def test_one_timed_round_has_no_halves_and_says_so() -> None:
    one_round = {**timed("all_reduce", "gloo", 1024, 1e-3, 1e-3), "halves_s": None}
    summary = halves_summary(halves([one_round]))
    assert summary["rows"] == 0 and summary["furthest"] is None
    assert halves_line(summary).endswith("(one timed round: no halves)")
