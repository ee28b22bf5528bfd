"""Shared by the offline looks at other link-cost formulas (`collectives_smooth_max.py`,
`collectives_cpu_per_byte.py`): refit a saved `cadence bench collectives` run, price its gloo
rows with `AlphaBeta._cost` replaced, and print a table of rows within 10% per run and in all.
The fit does not use the cost formula, so the model as it is reproduces every saved count."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

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


def gloo_within(data: dict, cost: Cost) -> tuple[int, int]:
    """(gloo rows within 10%, gloo rows) of one run, refitted and priced with `cost`."""
    AlphaBeta._cost = cost  # type: ignore[method-assign]
    try:
        config = CollectivesBenchConfig.from_json_dict(data["config"])
        local = LocalCopyTimes.from_dict(data["local_copy"])
        fitted = fit_run(config, list(data["calibration"]["rows"]), local)
        measured = [r for r in data["rows"] if r["implementation"] == "gloo"]
        rows = build_rows(config, measured, fitted.models["token-bucket"], local,
                          fitted.by_collective["token-bucket"])  # fmt: skip
    finally:
        AlphaBeta._cost = ORIGINAL_COST  # type: ignore[method-assign]
    return sum(within_target(r.measured_over_predicted) for r in rows), len(rows)


def print_table(paths: Iterable[str], costs: dict[str, Cost]) -> None:
    """One row per eligible run: its count under each labelled cost, then the saved count."""
    totals = {label: [0, 0] for label in costs}
    print("| run | " + " | ".join(costs) + " | saved |")
    print("| --- |" + " --- |" * (len(costs) + 1))
    for path in paths:
        data = eligible(path)
        if data is None:
            continue
        cells = []
        for label, cost in costs.items():
            hit, n = gloo_within(data, cost)
            totals[label][0] += hit
            totals[label][1] += n
            cells.append(f"{hit}/{n}")
        saved = data["accuracy"]
        print(f"| {Path(path).name} | " + " | ".join(cells)
              + f" | {saved.get('rows_within', '?')}/{saved.get('rows', '?')} |")
    print("\nall runs: " + ", ".join(f"{label} {h} of {n}" for label, (h, n) in totals.items()))
