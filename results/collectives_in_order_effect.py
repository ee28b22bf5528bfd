"""What running a process group's collectives one at a time in issue order changes
(`SimOptions.collectives_in_order`, `bench sim --collectives`): every check of
`results/halves_every_check.py` scored twice under one folder of charges and the checks' step
shares, once with every issued collective sharing the link (the simulator until 2026-11-29)
and once with them queued in issue order, both with gradients ready layer by layer. Then, per
row (model, strategy, cap) over the checks that have it: in how many the prediction is low,
the mean signed error and the mean |error|, each way.

Run from the repository root:
    python results/collectives_in_order_effect.py [COSTS_FOLDER] \\
        > results/collectives-in-order-effect-DATE.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from halves_every_check import (  # noqa: E402
    check_reports,
    print_row_changes,
    print_side_by_side,
    share_files,
)

WAYS = ("shared", "in-order")


def main_(costs: str) -> None:
    shares = ("--step-shares", *share_files())
    scored = {way: list(check_reports(costs, ("--collectives", way, *shares))) for way in WAYS}
    print_side_by_side(scored, costs, "sharing the link | in issue order", " collectives")
    print_row_changes(scored)


if __name__ == "__main__":
    main_(sys.argv[1] if len(sys.argv) > 1 else "results/costs-20261126")
