"""Three other ways to price `cadence bench dp-paired` rounds (and the contention charge),
each scored on every check as `halves_every_check.py` does, to see whether any of them
lowers the misses. None is what `cadence bench sim` does; all three were left out.

- pooled: every round predicted from the median compute (and optimizer step) over all of the
  row's rounds, not from its own round's compute turn;
- interpolated: each variant's turn predicted from the compute interpolated linearly, by turn
  position, between the compute turns around it (rounds alternate their order, so the compute
  turns of two rounds are back to back);
- slowest-rank contention: the contention charge of results/costs-20261126 refitted per round
  from the slowest rank's compute with traffic against the slowest rank's compute alone
  (a synchronous step waits for its slowest rank), not from the medians over ranks.

Run from the repository root (about 4 minutes):
    python results/round_compute_variants.py pooled|interpolated|slowest-rank-contention \
        > results/round-compute-VARIANT-20261129.txt
"""

from __future__ import annotations

import json
import runpy
import shutil
import statistics
import sys
import tempfile
from dataclasses import asdict
from typing import Any

import numpy as np

import cadence.sim.bench_dp as bench_dp
from cadence.bench.contention import fit_costs
from cadence.bench.dp_paired import COMPUTE
from cadence.sim.bench_dp_records import VARIANTS


def _row(row: dict[str, Any], common: dict[str, Any], basis: str,
         results: dict[str, list[Any]]) -> list[dict[str, Any]]:  # fmt: skip
    rounds = row["rounds_s"]
    out = []
    for variant, strategy in VARIANTS.items():
        median_row = bench_dp._median_row({**common, "compute_basis": basis}, strategy,
                                          rounds[variant], results[variant], "round_errors")  # fmt: skip
        twin = rounds.get(bench_dp.TWINS[variant])
        if twin:
            median_row.update(bench_dp.twin_fields(
                [r.iteration_s for r in results[variant]], rounds[variant], twin))  # fmt: skip
        out.append(median_row)
    return out


def pooled(row: dict[str, Any], case: Any, common: dict[str, Any]) -> list[dict[str, Any]]:
    computes = bench_dp.round_computes(row)
    steps = row.get("compute_step_rounds_s") or []
    if case.own_steps and len(steps) == len(computes):
        case = case.with_step(statistics.median(steps))
    predicted = case.predict(statistics.median(computes), 1.0)
    return _row(row, common, "pooled",
                {v: [predicted[v]] * len(computes) for v in VARIANTS})  # fmt: skip


def interpolated(row: dict[str, Any], case: Any, common: dict[str, Any]) -> list[dict[str, Any]]:
    names = list(row["rounds_s"])  # the turn order of even rounds (the worker's)
    n = len(names)
    computes = bench_dp.round_computes(row)
    cases = case.per_sample(row.get("compute_step_rounds_s") or [], len(computes))

    def turn(k: int, name: str) -> int:  # the k-th timed round is round k + 1: odd first
        i = names.index(name)
        return k * n + (i if (k + 1) % 2 == 0 else n - 1 - i)

    at_compute = [turn(k, COMPUTE) for k in range(len(computes))]
    results = {
        v: [cases[k].predict(float(np.interp(turn(k, v), at_compute, computes)), 1.0, [v])[v]
            for k in range(len(computes))]
        for v in VARIANTS
    }  # fmt: skip
    return _row(row, common, "interpolated", results)


def slowest_rank_costs(src: str, dst: str) -> None:
    shutil.copytree(src, dst, dirs_exist_ok=True)
    with open(f"{src}/contention.json") as f:
        data = json.load(f)
    raw = data["raw"]["rows"]
    rows = []
    for size in sorted({r["size"] for r in raw}):
        per_round = []
        for k in sorted({r["round"] for r in raw if r["size"] == size}):
            ranks = [r for r in raw if r["size"] == size and r["round"] == k]
            slow = max(ranks, key=lambda r: r["with_traffic_s"])
            per_round.append((max(r["alone_s"] for r in ranks), slow["with_traffic_s"],
                              slow["messages"]))  # fmt: skip
        alone, loaded, messages = (statistics.median(p[i] for p in per_round) for i in range(3))
        rows.append({"size": size, "alone_s": alone, "with_traffic_s": loaded,
                     "extra_s": loaded - alone, "messages": messages, "bytes": messages * size})  # fmt: skip
    fit = fit_costs(rows)
    print(f"# contention refitted on the slowest rank: {data['fit']} -> {asdict(fit)}")
    data["rows"], data["fit"] = rows, asdict(fit)
    with open(f"{dst}/contention.json", "w") as f:
        json.dump(data, f)


def main(variant: str) -> None:
    sys.path.insert(0, "results")
    argv = ["halves_every_check.py"]
    if variant == "pooled":
        bench_dp._paired_rows = pooled  # type: ignore[assignment]
    elif variant == "interpolated":
        bench_dp._paired_rows = interpolated  # type: ignore[assignment]
    elif variant == "slowest-rank-contention":
        folder = tempfile.mkdtemp(prefix="costs-slowest-rank-")
        slowest_rank_costs("results/costs-20261126", folder)
        argv.append(folder)
    else:
        raise SystemExit(f"unknown variant {variant!r}: pooled, interpolated or "
                         "slowest-rank-contention")  # fmt: skip
    print(f"# variant: {variant}")
    sys.argv = argv
    runpy.run_path("results/halves_every_check.py", run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
