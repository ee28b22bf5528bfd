"""Whether the between-the-steps probe moves the iteration it sits in: runs of one model and
strategy at one cap, 30 steps, in alternating pairs, one with two-step blocks after every 5
steps (its median leaves out the step after each block, as `cadence bench dp` does) and one
without. Printed: each pair's two medians and their ratio, then the median ratio.

Run from the repository root (as root: the links are emulated):
    python results/interleaved_disturbance.py MODEL STRATEGY CAP PAIRS > results/interleaved-disturbance-X.txt
"""  # noqa: E501

from __future__ import annotations

import statistics
import sys

from cadence.bench._train import train_for_bench
from cadence.config import TrainConfig


def median_iteration(model: str, strategy: str, cap: str, every: int) -> float:
    metrics = train_for_bench(TrainConfig(
        model=model, workers=2, batch_size=64, steps=30, strategy=strategy,
        emulate_bandwidth=cap, out="/tmp/cadence-disturbance", eval_every_epoch=False,
        threads=1, interleaved_probe_every=every,
    ))  # fmt: skip
    return float(metrics["median_iteration_s"])


def main(model: str, strategy: str, cap: str, pairs: int) -> None:
    print(f"# {model} {strategy} at {cap}: median iteration in ms, 30 steps")
    print("| pair | without blocks | with blocks | with / without |")
    print("| --- | --- | --- | --- |")
    ratios = []
    for i in range(pairs):
        order = (0, 5) if i % 2 == 0 else (5, 0)
        times = {every: median_iteration(model, strategy, cap, every) for every in order}
        ratios.append(times[5] / times[0])
        print(f"| {i + 1} | {times[0] * 1e3:.1f} | {times[5] * 1e3:.1f} | {ratios[-1]:.3f} |",
              flush=True)  # fmt: skip
    print(f"median with / without: {statistics.median(ratios):.3f} over {pairs} pairs")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
