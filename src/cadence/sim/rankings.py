"""Rankings of a held-out set: does the simulator order the candidates of one case as they
measure, and is its pick as fast as the best measured?

Rows of a held-out file that share a `case` (the same model, cluster and batch, trained with
different strategies or settings) are one ranking. Per case: Kendall's tau between the
predicted and the measured median iterations (the candidates' order, 1 when it is the
same), the pick (the fastest predicted), the best measured, and the pick's measured time over
the best's. Targets: tau >= 0.8 and the pick within 5% of the best. Rows not predicted, or
whose runs failed, leave the case.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any

TAU_TARGET = 0.8
"""Kendall's tau a case's predicted order must reach."""
PICK_TARGET = 1.05
"""Largest measured time of the pick over the best measured."""


def kendall_tau(measured: Sequence[float], predicted: Sequence[float]) -> float:
    """Kendall's tau-b of two equally long sequences: (concordant - discordant) pairs over
    the pairs, ties in either sequence counted as neither (1.0 for fewer than 2 items)."""
    if len(measured) != len(predicted):
        raise ValueError("kendall_tau needs two sequences of one length")
    concordant = discordant = ties_m = ties_p = 0
    for i, j in combinations(range(len(measured)), 2):
        dm, dp = measured[i] - measured[j], predicted[i] - predicted[j]
        if dm == 0 and dp == 0:
            continue
        if dm == 0:
            ties_m += 1
        elif dp == 0:
            ties_p += 1
        elif (dm > 0) == (dp > 0):
            concordant += 1
        else:
            discordant += 1
    pairs_m = concordant + discordant + ties_p  # pairs not tied in measured
    pairs_p = concordant + discordant + ties_m
    if pairs_m == 0 or pairs_p == 0:
        return 1.0
    return float((concordant - discordant) / (pairs_m * pairs_p) ** 0.5)


def rank_cases(cases: dict[str, str], rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ranking per case (`cases`: row name -> case, scored `rows` as `score_row` gives
    them), in the order the cases first appear."""
    by_case: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        case = cases.get(row["row"])
        usable = row["measured_s"] is not None and row["predicted_s"] is not None
        if case is not None and usable and not row.get("failed"):
            by_case.setdefault(case, []).append(row)
    rankings = []
    for case, members in by_case.items():
        measured = [r["measured_s"] for r in members]
        predicted = [r["predicted_s"] for r in members]
        pick = min(members, key=lambda r: r["predicted_s"])
        best = min(members, key=lambda r: r["measured_s"])
        tau = kendall_tau(measured, predicted)
        ratio = pick["measured_s"] / best["measured_s"]
        swaps = swapped_pairs(members)
        met = tau >= TAU_TARGET and ratio <= PICK_TARGET
        ordered = [pair for pair in swaps if not pair["runs_overlap"]]
        verdict = "met" if met else "missed" if ordered or ratio > PICK_TARGET else "undecided"
        rankings.append({
            "case": case,
            "measured_order": [r["row"] for r in sorted(members, key=lambda r: r["measured_s"])],
            "predicted_order": [r["row"] for r in sorted(members, key=lambda r: r["predicted_s"])],
            "kendall_tau": tau,
            "pick": pick["row"],
            "best": best["row"],
            "pick_over_best": ratio,
            # Whether the pick's and the best's runs overlap: the measurement cannot tell them
            # apart, whatever the ratio of their medians.
            "pick_within_best_runs": min(pick["runs_s"]) <= max(best["runs_s"]),
            "swaps": swaps,
            "met": met,
            "verdict": verdict,
        })  # fmt: skip
    return rankings


def _overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two rows' runs overlap: neither's slowest run is faster than the other's
    fastest."""
    return min(a["runs_s"]) <= max(b["runs_s"]) and min(b["runs_s"]) <= max(a["runs_s"])


def swapped_pairs(members: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pairs of rows the prediction orders the other way from their measured medians,
    each with whether their runs overlap (then the measurement does not order them)."""
    out = []
    for a, b in combinations(members, 2):
        dm = a["measured_s"] - b["measured_s"]
        dp = a["predicted_s"] - b["predicted_s"]
        if dm * dp < 0:
            faster, slower = (a, b) if dm < 0 else (b, a)
            out.append({"measured_faster": faster["row"], "measured_slower": slower["row"],
                        "runs_overlap": _overlap(a, b)})  # fmt: skip
    return out


def ranking_lines(rankings: Sequence[dict[str, Any]]) -> list[str]:
    """Per case: tau, the pick, the best and their ratio; then both orders."""
    if not rankings:
        return []
    width = max(len("case"), *(len(r["case"]) for r in rankings)) + 2
    lines = [f"{'case':<{width}}{'tau':>6}{'pick / best':>13}  pick; best"]
    for r in rankings:
        overlap = " (runs overlap)" if r["pick_within_best_runs"] and r["pick"] != r["best"] else ""
        lines.append(
            f"{r['case']:<{width}}{r['kendall_tau']:>6.2f}{r['pick_over_best']:>13.3f}  "
            f"{r['pick']}; {r['best']}{overlap}"
        )
    for r in rankings:
        lines.append(f"  {r['case']} measured:  {' < '.join(r['measured_order'])}")
        lines.append(f"  {r['case']} predicted: {' < '.join(r['predicted_order'])}")
        for pair in r["swaps"]:
            how = "runs overlap" if pair["runs_overlap"] else "runs do not overlap"
            lines.append(
                f"  {r['case']} swapped: {pair['measured_faster']} measured faster than "
                f"{pair['measured_slower']} ({how})"
            )
    counts = {v: sum(r["verdict"] == v for r in rankings) for v in ("met", "undecided", "missed")}
    lines.append(
        f"{counts['met']} of {len(rankings)} cases meet tau >= {TAU_TARGET} with the pick "
        f"within {PICK_TARGET - 1:.0%} of the best measured; {counts['undecided']} undecided "
        f"(only pairs whose runs overlap are swapped), {counts['missed']} missed"
    )
    return lines
