"""Trial, not a feature: would the speed lean go if the charges measured in seconds
(`results/speed_vs_error.py`) were scaled with the machine's speed? Every check of
`results/halves_every_check.py` is scored with each sample's (round's or run's) latency and/or
communication processor charge multiplied by that sample's compute over the same model's
compute when the folder's charges were measured (`runtime-cost.json`). It wraps
`_Case.predict` in this process only; `cadence bench sim` itself is unchanged.

Run from the repository root:
    python results/scaled_charges_trial.py [COSTS_FOLDER] > results/scaled-charges-trial-DATE.txt
About 2 minutes (four scorings of every check).
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import cadence.sim.bench_dp as bench_dp

sys.path.insert(0, str(Path(__file__).parent))
from halves_every_check import check_reports  # noqa: E402
from speed_vs_error import compute_ratio, folder_compute  # noqa: E402

SCALED = {  # scoring -> which charges follow the sample's speed
    "as measured": (),
    "latency": ("latency",),
    "processor": ("processor",),
    "both": ("latency", "processor"),
}


def scaled_case(case: Any, ratio: float, charges: Sequence[str]) -> Any:
    """`case` with the named charges multiplied by `ratio`."""
    if "latency" in charges:
        link = case.link
        link = dataclasses.replace(
            link,
            alpha_s=link.alpha_s * ratio,
            collective_alphas=tuple((c, a * ratio) for c, a in link.collective_alphas),
            allreduce_alphas=tuple((n, a * ratio) for n, a in link.allreduce_alphas),
        )
        case = dataclasses.replace(case, link=link)
    if "processor" in charges:
        o = case.options
        o = dataclasses.replace(
            o,
            comm_cpu_s_per_message=o.comm_cpu_s_per_message * ratio,
            comm_cpu_s_per_byte=o.comm_cpu_s_per_byte * ratio,
        )
        case = dataclasses.replace(case, options=o)
    return case


def main_(costs: str) -> None:
    base = folder_compute(costs)
    original = bench_dp._Case.predict
    print(
        f"# charges from {costs}; per check under each scoring: mean signed error; "
        "mean / worst |error| (%)"
    )
    print("| check | compute ratio | " + " | ".join(SCALED) + " |")
    print("| --- | --- |" + " --- |" * len(SCALED))
    table: dict[str, list[str]] = {}
    lean: dict[str, list[tuple[float, float]]] = {name: [] for name in SCALED}
    meets: dict[str, int] = dict.fromkeys(SCALED, 0)
    for scoring, charges in SCALED.items():

        def predict(self: Any, compute_s: float, co_run: float, *rest: Any) -> Any:
            ratio = compute_s / base[self.description.split()[0]]
            return original(scaled_case(self, ratio, charges), compute_s, co_run, *rest)  # noqa: B023

        bench_dp._Case.predict = predict  # type: ignore[method-assign]
        try:
            for name, report in check_reports(costs):
                rows = report["rows"]
                ratio = compute_ratio(rows, base)
                signed = statistics.mean(r["error"] for r in rows)
                lean[scoring].append((ratio, signed))
                mean, worst = report["mean_abs_error"], report["worst_abs_error"]
                meets[scoring] += mean <= 0.05 and worst <= 0.10
                cells = table.setdefault(name, [f"{ratio:.2f}"])
                cells.append(f"{100 * signed:+.1f}; {100 * mean:.1f} / {100 * worst:.1f}")
        finally:
            bench_dp._Case.predict = original  # type: ignore[method-assign]
    for name, cells in table.items():
        print(f"| {name} | " + " | ".join(cells) + " |")
    for scoring, points in lean.items():
        x, y = np.array(points).T
        slow = x > 1.05
        print(f"{scoring}: correlation {np.corrcoef(x, y)[0, 1]:+.2f}; mean signed error "
              f"{100 * y[~slow].mean():+.1f}% at ratio <= 1.05 ({(~slow).sum()} checks), "
              f"{100 * y[slow].mean():+.1f}% above ({slow.sum()}); target met on "
              f"{meets[scoring]} of {len(points)} checks")  # fmt: skip


if __name__ == "__main__":
    main_(sys.argv[1] if len(sys.argv) > 1 else "results/costs-20261126")
