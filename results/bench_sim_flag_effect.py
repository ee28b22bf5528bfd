"""What one `cadence bench sim` switch changes: every check of `results/halves_every_check.py`
scored twice under one folder of charges and the checks' step shares, once with each of two
values of FLAG. Then, per row (model, strategy, cap) over the checks that have it: in how many
the prediction is low, the mean signed error and the mean |error|, each way.

Run from the repository root, e.g.:
    python results/bench_sim_flag_effect.py --gradients-ready block layer \\
        > results/layer-ready-points-effect-20261129.txt
    python results/bench_sim_flag_effect.py --collectives shared in-order \\
        > results/collectives-in-order-effect-20261129.txt
(a fourth argument names another charges folder than results/costs-20261126).
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


def main_(flag: str, first: str, second: str, costs: str) -> None:
    shares = ("--step-shares", *share_files())
    scored = {value: list(check_reports(costs, (flag, value, *shares)))
              for value in (first, second)}  # fmt: skip
    print_side_by_side(scored, costs, f"{flag} {first} | {flag} {second}", f" ({flag})")
    print_row_changes(scored)


if __name__ == "__main__":
    main_(*sys.argv[1:4], sys.argv[4] if len(sys.argv) > 4 else "results/costs-20261126")
