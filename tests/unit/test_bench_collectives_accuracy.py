"""`cadence bench collectives`' accuracy summary: gloo's rows only, the 10% count, the worst."""

from __future__ import annotations

from cadence.bench.collectives import BenchRow, accuracy, accuracy_line


def row(collective: str, implementation: str, nbytes: int, ratio: float) -> BenchRow:
    return BenchRow(
        collective=collective, implementation=implementation,
        algorithm="gloo" if implementation == "gloo" else "ring", nbytes=nbytes,
        measured_s=ratio * 1e-3, predicted_s=1e-3, bound_s=1e-4, measured_over_predicted=ratio,
    )  # fmt: skip


def test_counts_gloo_rows_within_ten_percent_and_names_the_worst() -> None:
    rows = [
        row("all_reduce", "gloo", 1024, 0.96),
        row("all_reduce", "gloo", 4096, 0.80),
        row("all_gather", "gloo", 64 << 20, 1.54),
        row("broadcast", "gloo", 1 << 20, 1.10),  # on the line: counts as within
        row("all_reduce", "cadence", 1024, 3.0),  # cadence's own rows do not count
    ]
    summary = accuracy(rows)
    assert summary["rows"] == 4 and summary["rows_within"] == 2
    assert summary["worst"] == {
        "collective": "all_gather", "nbytes": 64 << 20, "measured_over_predicted": 1.54,
    }  # fmt: skip
    assert accuracy_line(summary) == (
        "gloo within 10% of the prediction: 2 of 4 rows; worst all_gather 64MB at 1.54x"
    )


def test_no_gloo_rows() -> None:
    summary = accuracy([row("all_reduce", "cadence", 1024, 1.0)])
    assert summary["rows"] == 0 and summary["worst"] is None
    assert accuracy_line(summary) == "gloo within 10% of the prediction: 0 of 0 rows"
