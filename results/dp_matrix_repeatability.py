"""How far the same row of `cadence bench dp` moves between separate-run matrices of the same
configuration, next to the simulator's error on each: the measurement's own repeatability,
which bounds how close any one prediction can come on these runs.

    python results/dp_matrix_repeatability.py > results/dp-matrix-repeatability.txt

Reads the five kept matrices since `keep_heap` (`cadence bench dp --models
cnn_lstm,resnet32,gpt_mini --caps 1gbit,400mbit --steps 12`, 2026-11-25) and their `cadence
bench sim --contention results/contention-gpt_mini-400mbit.json` evaluations.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
RUNS = {  # matrix -> its simulator evaluation with the contention charge
    "bench-dp-small-keep-heap-20261125.json":
        "sim-bench-dp-small-keep-heap-contention-20261125.json",
    "bench-dp-small-one-chunk-rule-20261125.json":
        "sim-bench-dp-small-one-chunk-rule-contention-20261125.json",
    "bench-dp-small-one-chunk-rule-20261125b.json":
        "sim-bench-dp-small-one-chunk-rule-contention-20261125b.json",
    "bench-dp-small-20261125c.json": "sim-bench-dp-small-contention-20261125c.json",
    "bench-dp-small-20261125d.json": "sim-bench-dp-small-contention-20261125d.json",
}  # fmt: skip
STRATEGY = {"ddp": "ddp", "cadence": "cadence-dp"}


def load(name: str) -> dict:
    return json.loads((HERE / name).read_text())


def main() -> None:
    measured: dict[tuple[str, str, str], list[float]] = {}
    errors: dict[tuple[str, str, str], list[float]] = {}
    for matrix, sim in RUNS.items():
        for row in load(matrix)["rows"]:
            for variant, strategy in STRATEGY.items():
                key = (row["model"], row["cap"], strategy)
                measured.setdefault(key, []).append(row["iteration_s"][variant])
        for row in load(sim)["rows"]:
            key = (row["model"], row["bandwidth"], row["strategy"])
            errors.setdefault(key, []).append(row["error"])
    print(f"measured iteration (ms) in each of the {len(RUNS)} matrices, max/min, and the")
    print("simulator's error with the contention charge on each (predicted / measured - 1)")
    print(f"{'model':<9}{'cap':<8}{'strategy':<11}{'measured ms':>{7 * len(RUNS)}}"
          f"{'max/min':>9}{'simulator error %':>{7 * len(RUNS)}}")  # fmt: skip
    spreads = []
    for key in sorted(measured):
        times, errs = measured[key], errors[key]
        spread = max(times) / min(times)
        spreads.append(spread)
        print(
            f"{key[0]:<9}{key[1]:<8}{key[2]:<11}"
            + "".join(f"{t * 1e3:>7.1f}" for t in times)
            + f"{spread:>9.2f}"
            + "".join(f"{e * 100:>+7.1f}" for e in errs)
        )
    print(f"rows: {len(spreads)}; max/min above 1.10 in {sum(s > 1.10 for s in spreads)}, "
          f"largest {max(spreads):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
