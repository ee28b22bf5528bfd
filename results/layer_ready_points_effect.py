"""What gradients ready layer by layer inside their block change (`cadence.sim.grad_ready`,
`bench sim --gradients-ready`): every check of `results/halves_every_check.py` scored twice
under one folder of charges and the checks' step shares, once with all of a block's gradients
ready at its end (the simulator until 2026-11-29) and once with each layer's at its own point
(a norm's before the convolution it follows). Then, per row (model, strategy, cap) over the
checks that have it: in how many the prediction is low, the mean signed error and the mean
|error|, each way.

Run from the repository root:
    python results/layer_ready_points_effect.py [COSTS_FOLDER] \
        > results/layer-ready-points-effect-DATE.txt
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

WAYS = ("block", "layer")


def main_(costs: str) -> None:
    shares = ("--step-shares", *share_files())
    scored = {
        way: list(check_reports(costs, ("--gradients-ready", way, *shares))) for way in WAYS
    }
    print_side_by_side(scored, costs, "at the block's end | layer by layer", " ready")
    print_row_changes(scored)


if __name__ == "__main__":
    main_(sys.argv[1] if len(sys.argv) > 1 else "results/costs-20261126")
