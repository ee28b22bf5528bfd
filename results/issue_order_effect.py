"""What spacing one block's gradients in arrival order changes: every check of
`results/halves_every_check.py` scored twice under one folder of charges, once with the
simulator's planned ready times tied within a block (`HOOK_SPACING_S` = 0, the default:
priority decides which of a block's chunks goes first) and once spaced 1 ns apart in the order
the runtime's hooks see them (the first one ready goes first, as in the runtime's measured
plan). Both passes use the zoo's arrival order for fusing.

The optimizer step is timed once per model for the whole run (older result files have no step
of their own and are otherwise timed anew on every call), so only the plan differs between the
two columns. Then, per row (model, strategy, cap): the mean signed error and mean |error|.

Run from the repository root:
    python results/issue_order_effect.py [COSTS_FOLDER] > results/issue-order-effect-DATE.txt
"""

from __future__ import annotations

import functools
import statistics
import sys
from pathlib import Path

import cadence.sim.api as api
import cadence.sim.command as command

sys.path.insert(0, str(Path(__file__).parent))
from halves_every_check import check_reports, print_side_by_side, row_errors  # noqa: E402

SPACINGS = {"tied": 0.0, "spaced": 1e-9}  # tied: the default (`HOOK_SPACING_S`)


def reports(costs: str, spacing: float) -> list[tuple[str, dict]]:
    """Every check's `bench sim` report with a block's gradients spaced by `spacing`."""
    default = api.HOOK_SPACING_S
    api.HOOK_SPACING_S = spacing
    try:
        return list(check_reports(costs))
    finally:
        api.HOOK_SPACING_S = default


def main_(costs: str) -> None:
    command.step_s_per_byte = functools.cache(command.step_s_per_byte)  # one timing per model
    scored = {label: reports(costs, spacing) for label, spacing in SPACINGS.items()}
    print_side_by_side(scored, costs, "tied | spaced in arrival order")
    errors = row_errors(scored)
    print()
    print(
        "# per row over the checks that have it: mean signed error, mean |error| (%), "
        "rows that moved more than 0.05 points: tied -> spaced"
    )
    print("| row | checks | signed | abs | moved |")
    print("| --- | --- | --- | --- | --- |")
    for key in sorted(errors):
        old, new = errors[key]["tied"], errors[key]["spaced"]
        signed = f"{statistics.mean(old):+.2f} -> {statistics.mean(new):+.2f}"
        size = (
            f"{statistics.mean(abs(e) for e in old):.2f} -> "
            f"{statistics.mean(abs(e) for e in new):.2f}"
        )
        moved = sum(abs(a - b) > 0.05 for a, b in zip(old, new, strict=True))
        print(f"| {' '.join(key)} | {len(old)} | {signed} | {size} | {moved} |")


if __name__ == "__main__":
    main_(sys.argv[1] if len(sys.argv) > 1 else "results/costs-20261126")
