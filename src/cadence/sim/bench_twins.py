"""What an A/A pair says about `cadence bench sim`'s score (`cadence bench dp-paired --twins`).

A twin is an identical second copy of DDP or cadence-dp, timed in the same rounds as the
variant it copies; both are measurements of the same thing. How far the twin's median moves
from the original's is the benchmark's own noise at that row, and each round's prediction
can be scored against the twin as well as against the original. The twin itself, taken as a
prediction of the original, scores what a predictor that matched one of two identical
measurements exactly would score against the other: the floor under the score at that
noise. The main score stays against the originals; this is reported beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from cadence.sim.bench_halves import error_score


def twin_fields(
    predicted: Sequence[float], original: Sequence[float], twin: Sequence[float]
) -> dict[str, Any]:
    """A row's twin figures from its per-round predictions and both copies' rounds:
    `twin_gap` (median over rounds of twin / original, minus 1), `twin_error` (median over
    rounds of the prediction's error against the twin) and the per-round errors."""
    errors = [(p - t) / t for p, t in zip(predicted, twin, strict=True)]
    gaps = [t / o - 1 for t, o in zip(twin, original, strict=True)]
    return {
        "twin_gap": statistics.median(gaps),
        "twin_error": statistics.median(errors),
        "twin_round_errors": errors,
    }


def twins_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Over the rows that have twins: the score against the twins, the score of the same
    rows against the originals, the twins' own score taken as predictions of their originals
    (what a predictor that matched one measurement exactly would score against the other),
    and the row whose twin moved most; None without twins."""
    paired = [r for r in rows if "twin_error" in r]
    if not paired:
        return None
    widest = max(paired, key=lambda r: abs(r["twin_gap"]))
    return {
        "rows": len(paired),
        "against_twins": error_score([r["twin_error"] for r in paired]),
        "against_originals": error_score([r["error"] for r in paired]),
        "twins_as_predictions": error_score([r["twin_gap"] for r in paired]),
        "widest_gap": {
            "model": widest.get("model"), "strategy": widest.get("strategy"),
            "bandwidth": widest.get("bandwidth"), "twin_gap": widest["twin_gap"],
        },
    }  # fmt: skip


def twins_line(summary: dict[str, Any]) -> str:
    """One line for the terminal, e.g. "A/A twins (12 rows): scored against the twins mean
    |error| 3.1%, worst 8.0% (against the originals 3.5%, 11.8%); the twins themselves as
    predictions of their originals: 2.9%, worst 6.2% (gpt_mini ddp 1gbit)"."""
    twins, originals = summary["against_twins"], summary["against_originals"]
    itself, w = summary["twins_as_predictions"], summary["widest_gap"]
    return (
        f"A/A twins ({summary['rows']} rows): scored against the twins mean |error| "
        f"{twins['mean_abs_error'] * 100:.1f}%, worst {twins['worst_abs_error'] * 100:.1f}% "
        f"(against the originals {originals['mean_abs_error'] * 100:.1f}%, "
        f"{originals['worst_abs_error'] * 100:.1f}%); the twins themselves as predictions of "
        f"their originals: {itself['mean_abs_error'] * 100:.1f}%, worst "
        f"{itself['worst_abs_error'] * 100:.1f}% ({w['model']} {w['strategy']} {w['bandwidth']})"
    )
