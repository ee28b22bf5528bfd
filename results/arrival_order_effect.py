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

import statistics
import sys
from collections import defaultdict
from pathlib import Path

import cadence.sim.bench as bench
import cadence.sim.bench_dp as bench_dp

sys.path.insert(0, str(Path(__file__).parent))
from halves_every_check import check_reports, score  # noqa: E402

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
    print(f"# charges from {costs}; mean/worst |error| in %: expected order | arrival order")
    print("| check | expected | arrival |")
    print("| --- | --- | --- |")
    for (name, old), (_, new) in zip(scored["expected"], scored["arrival"], strict=True):
        print(f"| {name} | {score(old)} | {score(new)} |")
    for order in ORDERS:
        met = sum(r["mean_abs_error"] <= 0.05 and r["worst_abs_error"] <= 0.10
                  for _, r in scored[order])  # fmt: skip
        print(f"{order} order: target met on {met} of {len(scored[order])} checks")
    errors: dict[tuple[str, str, str], dict[str, list[float]]] = defaultdict(
        lambda: {o: [] for o in ORDERS}
    )
    for order in ORDERS:
        for _, report in scored[order]:
            for row in report["rows"]:
                key = (row["model"], row["strategy"], row["bandwidth"])
                errors[key][order].append(row["error"] * 100)
    print()
    print("# per row over the checks that have it: checks predicted low, mean signed error, "
          "mean |error| (%): expected order -> arrival order")  # fmt: skip
    print("| row | checks | low | signed | abs |")
    print("| --- | --- | --- | --- | --- |")
    for key in sorted(errors):
        old, new = errors[key]["expected"], errors[key]["arrival"]
        low = f"{sum(e < 0 for e in old)} -> {sum(e < 0 for e in new)}"
        signed = f"{statistics.mean(old):+.1f} -> {statistics.mean(new):+.1f}"
        size = (f"{statistics.mean(abs(e) for e in old):.1f} -> "
                f"{statistics.mean(abs(e) for e in new):.1f}")  # fmt: skip
        print(f"| {' '.join(key)} | {len(old)} | {low} | {signed} | {size} |")


if __name__ == "__main__":
    main_(sys.argv[1] if len(sys.argv) > 1 else "results/costs-20261126")
