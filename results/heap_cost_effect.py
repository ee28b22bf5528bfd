"""What charging DDP's dynamic heap changes: every check of `results/halves_every_check.py`
scored twice under one folder of charges, with the optimizer step as a share of the compute
where a row timed none (as that script does), once without a heap charge and once with
`--heap-cost FILE` (`cadence bench heap-cost`: DDP's separate runs, whose processes left
glibc's heap thresholds dynamic, compute slower by the factor measured at the nearest cap).
Then, per row (model, strategy, cap) over the checks that have it, how many are predicted
low, the mean signed error and the mean |error|.

Run from the repository root:
    python results/heap_cost_effect.py HEAP_COST_FILE [COSTS_FOLDER] \
        > results/heap-cost-effect-DATE.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from halves_every_check import check_reports, print_row_changes, print_side_by_side, share_files  # noqa: E402


def main_(heap_cost: str, costs: str) -> None:
    shares = ("--step-shares", *share_files())
    print(f"# heap charge: {heap_cost}")
    scored = {
        "no heap charge": list(check_reports(costs, shares)),
        "heap charge": list(check_reports(costs, (*shares, "--heap-cost", heap_cost))),
    }
    print_side_by_side(scored, costs, "no heap charge | heap charge", "")
    print_row_changes(scored)


if __name__ == "__main__":
    main_(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "results/costs-20261126")
