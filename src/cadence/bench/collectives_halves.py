"""How far one gloo call's time moves within one run of `cadence bench collectives`.

Every row is timed in each round; the median of its even rounds and that of its odd rounds
are two measurements of the same call, interleaved with everything else, in the same
processes. No prediction can be held closer to one measurement than two measurements of the
same call are to each other, so the benchmark reports how often they agree next to its
accuracy count.
"""

from __future__ import annotations

from typing import Any

from cadence.bench.collectives import WITHIN, format_size, within_target


def halves(measured: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """gloo's rows that have both halves (`halves_s`: even rounds' and odd rounds' median
    seconds): collective, size, both halves, and the odd rounds' over the even rounds'."""
    return [
        {"collective": m["collective"], "nbytes": m["nbytes"], "even_s": m["halves_s"][0],
         "odd_s": m["halves_s"][1], "ratio": m["halves_s"][1] / m["halves_s"][0]}
        for m in measured
        if m["implementation"] == "gloo" and m.get("halves_s") and m["halves_s"][0] > 0
    ]  # fmt: skip


def halves_summary(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows whose two halves agree within `WITHIN`, and the furthest apart."""
    if not pairs:
        return {"within": WITHIN, "rows": 0, "rows_within": 0, "furthest": None}
    furthest = max(pairs, key=lambda p: abs(p["ratio"] - 1))
    return {
        "within": WITHIN,
        "rows": len(pairs),
        "rows_within": sum(within_target(p["ratio"]) for p in pairs),
        "furthest": {"collective": furthest["collective"], "nbytes": furthest["nbytes"],
                     "ratio": furthest["ratio"]},  # fmt: skip
    }


def halves_line(summary: dict[str, Any]) -> str:
    """One line for the terminal, e.g. "gloo's own time, odd rounds against even rounds:
    within 10% at 34 of 36 rows; furthest all_gather 4KB at 1.21x"."""
    head = "gloo's own time, odd rounds against even rounds: "
    head += f"within {summary['within']:.0%} at {summary['rows_within']} of {summary['rows']} rows"
    furthest = summary["furthest"]
    if furthest is None:
        return f"{head} (one timed round: no halves)"
    size = format_size(furthest["nbytes"])
    return f"{head}; furthest {furthest['collective']} {size} at {furthest['ratio']:.2f}x"
