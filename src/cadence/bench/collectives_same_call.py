"""How far one gloo call's time moves within one run of `cadence bench collectives`.

The calibration and the benchmark both time gloo's all-reduce at the calibrated sizes, the
same way (blocks of single calls after a drain, the slowest rank's median), in the same
processes, a minute or two apart. No prediction can be held closer to one measurement than
two measurements of the same call are to each other, so the benchmark reports the two side
by side next to its accuracy count.
"""

from __future__ import annotations

from typing import Any

from cadence.bench.collectives import WITHIN, BenchRow, elements, format_size
from cadence.comm.calibrate import FITTED, CalibrationRow


def same_call(
    calibration: list[CalibrationRow], rows: list[BenchRow], world_size: int
) -> list[dict[str, Any]]:
    """gloo's all-reduce at every size both timed: calibration and benchmark seconds, and the
    benchmark's over the calibration's. The benchmark's vector is the calibrated size cut to
    a multiple of `world_size` floats (`elements`): a few bytes less on 3 ranks."""
    timed = {4 * elements(r.nbytes, world_size): r for r in calibration if r.collective == FITTED}
    return [
        {"nbytes": r.nbytes, "calibration_s": timed[r.nbytes].measured_s,
         "benchmark_s": r.measured_s, "ratio": r.measured_s / timed[r.nbytes].measured_s}
        for r in sorted(rows, key=lambda r: r.nbytes)
        if r.implementation == "gloo" and r.collective == "all_reduce" and r.nbytes in timed
    ]  # fmt: skip


def same_call_summary(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Sizes whose two timings agree within `WITHIN`, and the furthest apart."""
    if not pairs:
        return {"within": WITHIN, "sizes": 0, "sizes_within": 0, "furthest": None}
    furthest = max(pairs, key=lambda p: abs(p["ratio"] - 1))
    return {
        "within": WITHIN,
        "sizes": len(pairs),
        "sizes_within": sum(abs(p["ratio"] - 1) <= WITHIN + 1e-9 for p in pairs),
        "furthest": {"nbytes": furthest["nbytes"], "ratio": furthest["ratio"]},
    }


def same_call_line(summary: dict[str, Any]) -> str:
    """One line for the terminal, e.g. "the same gloo all-reduce, timed by the calibration
    and by the benchmark: within 10% at 8 of 9 sizes; furthest 4KB at 1.21x"."""
    head = "the same gloo all-reduce, timed by the calibration and by the benchmark: "
    head += f"within {summary['within']:.0%} at {summary['sizes_within']} of "
    head += f"{summary['sizes']} sizes"
    furthest = summary["furthest"]
    if furthest is None:
        return head
    return f"{head}; furthest {format_size(furthest['nbytes'])} at {furthest['ratio']:.2f}x"
