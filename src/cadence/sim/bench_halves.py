"""How far `cadence bench sim`'s score moves with which runs of a benchmark it is given.

A row read from `cadence bench dp` (separate runs) or `cadence bench dp-paired` (rounds in
turns) is several samples, each predicted from the compute its own run timed and compared
with its own measurement; the row's error is the median of theirs. Scoring the same
predictions on the odd samples alone (1st, 3rd, ...) and on the even ones alone (2nd, 4th,
...) gives two scores of one benchmark run. Where those differ by more than the target's
margin, whether the check passes is decided by which runs the machine gave, not by the
predictor: no prediction can be held closer to a measurement than two halves of it are to
each other (as `cadence bench collectives` reports for its rows).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

SAMPLE_ERRORS = {"run_errors": "runs", "round_errors": "rounds"}
"""Row key that holds each sample's error (`bench_dp._median_row`) -> what a sample is."""


def row_halves(row: dict[str, Any]) -> tuple[float, float] | None:
    """The median error of a row's odd samples and of its even samples; None for a row
    with fewer than two samples."""
    errors = next((row[key] for key in SAMPLE_ERRORS if row.get(key)), None)
    if not errors or len(errors) < 2:
        return None
    return statistics.median(errors[0::2]), statistics.median(errors[1::2])


def error_score(errors: Sequence[float]) -> dict[str, float]:
    """The mean and the worst absolute error: how `cadence bench sim` scores a check."""
    magnitudes = [abs(e) for e in errors]
    return {"mean_abs_error": statistics.fmean(magnitudes), "worst_abs_error": max(magnitudes)}


def halves_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Both halves' scores over every row (a row of one sample counts its one error in
    both), and the row whose halves differ most; None when no row has two samples."""
    split = [(row, row_halves(row)) for row in rows]
    if not any(halves for _, halves in split):
        return None
    odd = [halves[0] if halves else row["error"] for row, halves in split]
    even = [halves[1] if halves else row["error"] for row, halves in split]
    widest, (odd_error, even_error) = max(
        ((row, halves) for row, halves in split if halves), key=lambda x: abs(x[1][0] - x[1][1])
    )
    kinds = {kind for key, kind in SAMPLE_ERRORS.items() for r in rows if r.get(key)}
    return {
        "samples": " and ".join(sorted(kinds)),
        "rows_split": sum(halves is not None for _, halves in split),
        "odd_samples": error_score(odd),
        "even_samples": error_score(even),
        "widest": {
            "run": widest.get("run"), "model": widest.get("model"),
            "strategy": widest.get("strategy"), "bandwidth": widest.get("bandwidth"),
            "odd_error": odd_error, "even_error": even_error,
        },
    }  # fmt: skip


def halves_line(summary: dict[str, Any]) -> str:
    """One line for the terminal, e.g. "scored on alternate runs (odd | even): mean |error|
    2.1% | 3.0%, worst 5.0% | 13.5%; one row's halves differ by up to 11.7 points
    (cnn_lstm ddp 400mbit: -1.8% | -13.5%)"."""
    odd, even, widest = summary["odd_samples"], summary["even_samples"], summary["widest"]
    gap = abs(widest["odd_error"] - widest["even_error"]) * 100
    return (
        f"scored on alternate {summary['samples']} (odd | even): "
        f"mean |error| {odd['mean_abs_error'] * 100:.1f}% | {even['mean_abs_error'] * 100:.1f}%, "
        f"worst {odd['worst_abs_error'] * 100:.1f}% | {even['worst_abs_error'] * 100:.1f}%; "
        f"one row's halves differ by up to {gap:.1f} points ({widest['model']} "
        f"{widest['strategy']} {widest['bandwidth']}: {widest['odd_error'] * 100:+.1f}% | "
        f"{widest['even_error'] * 100:+.1f}%)"
    )
