"""Score `cadence bench collectives` runs with each of the two changes of 2026-12-01 on and off:
processor time per byte fitted from the calibration's latency-bound all-reduces
(`AlphaBeta.cpu_s_per_byte`, `calibrate._fit_token_bucket`) and reduce-scatter's own alpha
from its calls at 2 and 8 KB (`bench.collectives.LATENCY_FITTED`).

Each run is refitted from its saved calibration calls four ways and its gloo rows counted
within 10%: "before" (no processor time, reduce-scatter priced with all-reduce's alpha, the
model as it was), "cpu" and "rs" (one change each), "both" (the package from 2026-12-01 on).
Runs saved before reduce-scatter was timed in the calibration have no such calls, so there
"rs" equals "before" and "both" equals "cpu".

    python results/collectives_fitted_cpu.py [RUN.json ...] > results/collectives-fitted-cpu-X.txt
"""

from __future__ import annotations

import glob
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from collectives_reprice import eligible

import cadence.comm.calibrate as calibrate
from cadence.bench.collectives import CollectivesBenchConfig, build_rows, within_target
from cadence.bench.collectives_fit import fit_run
from cadence.comm.local_copy import LocalCopyTimes

FITTED_LINE = calibrate._fit_latency_line


def _no_slope(messages: np.ndarray, wire: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    return max(0.0, float(np.median(t / messages))), 0.0


@contextmanager
def line(fitter: Callable[..., tuple[float, float]]) -> Iterator[None]:
    calibrate._fit_latency_line = fitter  # type: ignore[assignment]
    try:
        yield
    finally:
        calibrate._fit_latency_line = FITTED_LINE  # type: ignore[assignment]


def count(data: dict, cpu: bool, rs: bool) -> tuple[int, int]:
    """(gloo rows within 10%, gloo rows) of one run refitted with the changes named."""
    config = CollectivesBenchConfig.from_json_dict(data["config"])
    local = LocalCopyTimes.from_dict(data["local_copy"])
    points = [p for p in data["calibration"]["rows"]
              if rs or p["collective"] != "reduce_scatter"]  # fmt: skip
    with line(FITTED_LINE if cpu else _no_slope):
        fitted = fit_run(config, points, local)
    measured = [r for r in data["rows"] if r["implementation"] == "gloo"]
    rows = build_rows(config, measured, fitted.models["token-bucket"], local,
                      fitted.by_collective["token-bucket"])  # fmt: skip
    return sum(within_target(r.measured_over_predicted) for r in rows), len(rows)


VARIANTS = {"before": (False, False), "cpu": (True, False), "rs": (False, True),
            "both": (True, True)}  # fmt: skip


def main(paths: list[str]) -> None:
    totals = {label: [0, 0] for label in VARIANTS}
    print("| run | " + " | ".join(VARIANTS) + " | saved |")
    print("| --- |" + " --- |" * (len(VARIANTS) + 1))
    for path in paths:
        data = eligible(path)
        if data is None:
            continue
        cells = []
        for label, (cpu, rs) in VARIANTS.items():
            hit, n = count(data, cpu, rs)
            totals[label][0] += hit
            totals[label][1] += n
            cells.append(f"{hit}/{n}")
        saved = data["accuracy"]
        print(f"| {Path(path).name} | " + " | ".join(cells)
              + f" | {saved['rows_within']}/{saved['rows']} |")
    print("\nall runs: " + ", ".join(f"{k} {h} of {n}" for k, (h, n) in totals.items()))


if __name__ == "__main__":
    main(sys.argv[1:] or sorted(glob.glob("results/bench-collectives-*.json")))
