"""Why `cadence bench dp` times its between-the-steps compute probe in cadence-dp's runs only:
DDP runs of one model at 1gbit, 30 steps, each timing two-step blocks after every 5 steps and
10 steps after its steps, run in processes with glibc's heap thresholds dynamic (as DDP runs)
and fixed through the environment (`MALLOC_TRIM_THRESHOLD_` and `MALLOC_MMAP_THRESHOLD_` at
cadence-dp's own values, `cadence.dp.heap`). Printed per run: the blocks' steps by position in
the block (lockstep medians), the probe after the steps, and the run's median iteration.
With `none` as the third argument the runs time no blocks, which asks whether DDP's own steps
pay for the dynamic thresholds (the blocks' columns are then left out).

Run from the repository root (as root: the links are emulated):
    python results/interleaved_heap_probe.py [MODEL] [RUNS] [blocks|none] \
        > results/interleaved-heap-DATE.txt
"""

from __future__ import annotations

import statistics
import sys

from cadence.bench._env import child_environment
from cadence.bench._train import train_for_bench
from cadence.config import TrainConfig
from cadence.dp.heap import FIXED_HEAP_ENV
from cadence.train.compute_probe import BLOCK_STEPS


def one_run(model: str, heap: str, blocks: bool) -> str:
    # The workers are spawned with this environment; it is restored on the way out.
    with child_environment(FIXED_HEAP_ENV if heap == "fixed" else {}):
        m = train_for_bench(TrainConfig(
            model=model, workers=2, batch_size=64, steps=30, strategy="ddp",
            emulate_bandwidth="1gbit", out="/tmp/cadence-heap-probe", eval_every_epoch=False,
            threads=1, compute_probe_steps=10, interleaved_probe_every=5 if blocks else 0,
        ))  # fmt: skip
    after = m["compute_probe"]["lockstep_median_s"]
    if not blocks:
        return f"| {heap} | {after * 1e3:.1f} | {m['median_iteration_s'] * 1e3:.1f} |"
    steps = m["interleaved_compute_probe"]["lockstep_steps_s"]
    by_position = " / ".join(
        f"{statistics.median(steps[i::BLOCK_STEPS]) * 1e3:.1f}" for i in range(BLOCK_STEPS)
    )
    between = m["interleaved_compute_probe"]["lockstep_median_s"]
    return (f"| {heap} | {by_position} | {after * 1e3:.1f} | {between / after:.2f} "
            f"| {m['median_iteration_s'] * 1e3:.1f} |")  # fmt: skip


def main(model: str, runs: int, blocks: bool) -> None:
    if blocks:
        print(f"# {model}, DDP at 1gbit; ms; blocks after every 5 of 30 steps")
        print("| heap thresholds | between the steps, by position | after the steps "
              "| between / after | run's median iteration |")  # fmt: skip
        print("| --- | --- | --- | --- | --- |")
    else:
        print(f"# {model}, DDP at 1gbit; ms; 30 steps, no blocks")
        print("| heap thresholds | after the steps | run's median iteration |")
        print("| --- | --- | --- |")
    for i in range(runs):
        for heap in ("dynamic", "fixed") if i % 2 == 0 else ("fixed", "dynamic"):
            print(one_run(model, heap, blocks), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(
        args[0] if args else "cnn_lstm",
        int(args[1]) if len(args) > 1 else 3,
        (args[2] if len(args) > 2 else "blocks") != "none",
    )
