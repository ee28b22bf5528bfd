"""What planning in the order gradients really arrive changes: every check of
`results/halves_every_check.py` scored twice under one folder of charges, once with the
simulator's old assumption (a block's gradients arrive in reverse registration order, which is
also how it filled DDP's buckets) and once with the order one backward pass of the zoo model
accumulates them (`zoo_arrival_order`, what cadence-dp's hooks and DDP's rebuilt buckets see).
Then, per row (model, strategy, cap) over the checks that have it: in how many the prediction
is low, the mean signed error and the mean |error|, under each order.

Run from the repository root:
    python results/arrival_order_effect.py [COSTS_FOLDER] > results/arrival-order-effect-DATE.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

import cadence.sim.bench as bench
import cadence.sim.bench_dp as bench_dp

sys.path.insert(0, str(Path(__file__).parent))
from halves_every_check import check_reports, print_row_changes, print_side_by_side  # noqa: E402

ORDERS = ("expected", "arrival")


def reports(costs: str, order: str) -> list[tuple[str, dict]]:
    """Every check's `bench sim` report with gradients planned in `order`."""
    real = bench_dp.zoo_arrival_order
    if order == "expected":  # None: the simulator's expected (reverse registration) order
        bench_dp.zoo_arrival_order = bench.zoo_arrival_order = lambda _model: None
    try:
        return list(check_reports(costs))
    finally:
        bench_dp.zoo_arrival_order = bench.zoo_arrival_order = real


def main_(costs: str) -> None:
    scored = {order: reports(costs, order) for order in ORDERS}
    print_side_by_side(scored, costs, "expected order | arrival order", " order")
    print_row_changes(scored)


if __name__ == "__main__":
    main_(sys.argv[1] if len(sys.argv) > 1 else "results/costs-20261126")
