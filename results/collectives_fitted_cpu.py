"""Score `cadence bench collectives` runs with each of the two changes tried on 2026-12-01 on
and off: processor time per byte fitted from the calibration's latency-bound all-reduces
(`AlphaBeta.cpu_s_per_byte`, `calibrate._fit_token_bucket`; kept) and reduce-scatter's own
alpha from its calls at 2 and 8 KB (undone in 628c8ad after it lost rows out of sample).

Each run is refitted from its saved calibration calls four ways and its gloo rows counted
within 10%: "before" (no processor time, reduce-scatter priced with all-reduce's alpha, the
model as it was), "cpu" (the package since 628c8ad) and "rs" (one change each), "both". Only
the runs of the first fresh pass (`...-fitted-20261201.json`) timed reduce-scatter calibration
calls; elsewhere "rs" equals "before" and "both" equals "cpu".

    python results/collectives_fitted_cpu.py [RUN.json ...] > results/collectives-fitted-cpu-X.txt
"""

from __future__ import annotations

import glob
import sys
from functools import partial

from collectives_reprice import latency_line, no_slope, print_counts, refit_count

import cadence.comm.calibrate as calibrate

FITTED_LINE = calibrate._fit_latency_line


def count(data: dict, cpu: bool, rs: bool) -> tuple[int, int]:
    """(gloo rows within 10%, gloo rows) of one run refitted with the changes named."""
    points = [p for p in data["calibration"]["rows"]
              if rs or p["collective"] != "reduce_scatter"]  # fmt: skip
    with latency_line(FITTED_LINE if cpu else no_slope):
        return refit_count(data, points)


VARIANTS = {"before": (False, False), "cpu": (True, False), "rs": (False, True),
            "both": (True, True)}  # fmt: skip


def main(paths: list[str]) -> None:
    print_counts(paths, {label: partial(count, cpu=cpu, rs=rs)
                         for label, (cpu, rs) in VARIANTS.items()})  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:] or sorted(glob.glob("results/bench-collectives-*.json")))
