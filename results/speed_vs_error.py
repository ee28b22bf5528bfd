"""Is the simulator's error tied to how fast the machine ran? For every check of
`results/halves_every_check.py`, the median over its rows of the compute the rows were
predicted from over the same model's compute when the charges were measured
(`runtime-cost.json` of the folder), and the mean signed error of its rows. Charges in
seconds (communication's processor time, latency) measured on a faster machine would price
too little on a slower one, so slow checks would lean low.

Run from the repository root:
    python results/speed_vs_error.py [COSTS_FOLDER] > results/speed-vs-error-DATE.txt
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from halves_every_check import check_reports  # noqa: E402


def folder_compute(costs: str) -> dict[str, float]:
    """Each model's compute when the folder's charges were measured (its runtime-cost.json)."""
    cost_rows = json.loads(Path(costs, "runtime-cost.json").read_text())["rows"]
    return {r["model"]: r["compute_s"] for r in cost_rows}


def compute_ratio(rows: list[dict], base: dict[str, float]) -> float:
    """The median over `bench sim` rows of the row's compute over its model's in `base`."""
    return statistics.median(r["compute_s"] / base[r["model"]] for r in rows)


def main_(costs: str) -> None:
    base = folder_compute(costs)
    print(f"# charges from {costs}; compute ratio: the rows' compute over the folder's")
    print("| check | compute ratio (median) | mean signed error |")
    print("| --- | --- | --- |")
    per_check = []
    for name, report in check_reports(costs):
        rows = report["rows"]
        ratio = compute_ratio(rows, base)
        signed = statistics.mean(r["error"] for r in rows)
        per_check.append((ratio, signed))
        print(f"| {name} | {ratio:.2f} | {100 * signed:+.1f}% |")
    x, y = np.array(per_check).T
    print(f"correlation over {len(x)} checks: {np.corrcoef(x, y)[0, 1]:+.2f}")
    for label, keep in (("ratio <= 1.05", x <= 1.05), ("ratio > 1.05", x > 1.05)):
        print(f"{label}: {keep.sum()} checks, mean signed error {100 * y[keep].mean():+.1f}%")


if __name__ == "__main__":
    main_(sys.argv[1] if len(sys.argv) > 1 else "results/costs-20261126")
