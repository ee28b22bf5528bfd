"""Shared by the offline looks at other link-cost formulas (`collectives_smooth_max.py`,
`collectives_cpu_per_byte.py`, `collectives_fitted_cpu.py`): refit a saved `cadence bench
collectives` run, price its gloo rows with `AlphaBeta._cost` or the fit's latency line
replaced, and print a table of rows within 10% per run and in all.
The fit does not use the cost formula, so the model as it was reproduces every saved count
(`no_slope`: the fit before the processor time per byte joined it on 2026-12-01)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import numpy as np

import cadence.comm.calibrate as calibrate
from cadence.bench.collectives import CollectivesBenchConfig, build_rows, within_target
from cadence.bench.collectives_fit import fit_run
from cadence.comm.cost import AlphaBeta, Terms
from cadence.comm.local_copy import LocalCopyTimes

ORIGINAL_COST = AlphaBeta._cost
Cost = Callable[[AlphaBeta, Terms], float]
"""A replacement for `AlphaBeta._cost`."""


def eligible(path: str) -> dict | None:
    """The run at `path` if it has the token-bucket model and per-collective alphas."""
    data = json.loads(Path(path).read_text())
    cal = data.get("calibration")
    if not isinstance(cal, dict) or cal.get("link_model") != "token-bucket":
        return None
    if "local_copy" not in data:
        return None
    return data if data["config"].get("alpha_per_collective") else None


def refit_count(data: dict, points: list[dict] | None = None) -> tuple[int, int]:
    """(gloo rows within 10%, gloo rows) of one run, refitted from `points` (default: its
    saved calibration calls) with the cost model as it stands."""
    config = CollectivesBenchConfig.from_json_dict(data["config"])
    local = LocalCopyTimes.from_dict(data["local_copy"])
    fitted = fit_run(config, list(data["calibration"]["rows"]) if points is None else points,
                     local)  # fmt: skip
    measured = [r for r in data["rows"] if r["implementation"] == "gloo"]
    rows = build_rows(config, measured, fitted.models["token-bucket"], local,
                      fitted.by_collective["token-bucket"])  # fmt: skip
    return sum(within_target(r.measured_over_predicted) for r in rows), len(rows)


def no_slope(messages: np.ndarray, wire: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """The token-bucket fit's latency line as it was before 2026-12-01's processor time per
    byte: each call's median time per message, no slope."""
    return max(0.0, float(np.median(t / messages))), 0.0


@contextmanager
def latency_line(fitter: Callable[..., tuple[float, float]]) -> Iterator[None]:
    """Fit token-bucket links with `fitter` in place of `calibrate._fit_latency_line`."""
    saved = calibrate._fit_latency_line
    calibrate._fit_latency_line = fitter  # type: ignore[assignment]
    try:
        yield
    finally:
        calibrate._fit_latency_line = saved  # type: ignore[assignment]


def gloo_within(data: dict, cost: Cost) -> tuple[int, int]:
    """(gloo rows within 10%, gloo rows) of one run, refitted as the model was before the
    fitted processor time per byte (`no_slope`) and priced with `cost`."""
    AlphaBeta._cost = cost  # type: ignore[method-assign]
    try:
        with latency_line(no_slope):
            return refit_count(data)
    finally:
        AlphaBeta._cost = ORIGINAL_COST  # type: ignore[method-assign]


Counter = Callable[[dict], tuple[int, int]]
"""(gloo rows within 10%, gloo rows) of one saved run."""


def print_counts(paths: Iterable[str], counters: dict[str, Counter]) -> None:
    """One row per eligible run: its (within, rows) count under each labelled counter, then
    the saved count, and the totals."""
    totals = {label: [0, 0] for label in counters}
    print("| run | " + " | ".join(counters) + " | saved |")
    print("| --- |" + " --- |" * (len(counters) + 1))
    for path in paths:
        data = eligible(path)
        if data is None:
            continue
        cells = []
        for label, counter in counters.items():
            hit, n = counter(data)
            totals[label][0] += hit
            totals[label][1] += n
            cells.append(f"{hit}/{n}")
        saved = data["accuracy"]
        print(f"| {Path(path).name} | " + " | ".join(cells)
              + f" | {saved.get('rows_within', '?')}/{saved.get('rows', '?')} |")
    print("\nall runs: " + ", ".join(f"{label} {h} of {n}" for label, (h, n) in totals.items()))


def print_table(paths: Iterable[str], costs: dict[str, Cost]) -> None:
    """`print_counts` with each labelled replacement for `AlphaBeta._cost`."""
    print_counts(paths, {label: partial(gloo_within, cost=cost) for label, cost in costs.items()})
