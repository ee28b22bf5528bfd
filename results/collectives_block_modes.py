"""Blocks of back-to-back small gloo all-reduces on 2 emulated hosts at 400mbit, as `cadence
bench collectives` times them (hosts pinned, gloo's I/O thread under SCHED_IDLE, each block
after a 4 MB all-reduce, a drain of the links' bucket and a barrier): each block's median
call, block by block, to show whether one call's time holds still from block to block.

    sudo python results/collectives_block_modes.py > results/collectives-block-modes-20261125.txt

Run from the repository root (the workers start as `python -m results.collectives_block_modes`).
12 rounds; each times a block of 64 calls of every size in turn. Prints, per size, rank 0's
median call of each block in order, and all its calls' 10th, 50th and 90th percentiles.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

SIZES = (1024, 2048, 4096)  # bytes
ROUNDS, CALLS = 12, 64


def worker(out: Path) -> None:
    import torch
    import torch.distributed as dist

    from cadence.comm import destroy, init_from_env
    from cadence.comm.calibrate import bucket_drain
    from cadence.comm.gloo_threads import gloo_io_yields

    init_from_env()
    bufs = {n: torch.zeros(n // 4) for n in SIZES}
    big = torch.zeros(1 << 20)  # 4 MB, as the benchmark's larger rows come between blocks
    drain = bucket_drain(500_000)  # twice the 400mbit links' bucket
    blocks: dict[int, list[list[float]]] = {n: [] for n in SIZES}
    with gloo_io_yields(True):
        for _ in range(ROUNDS):
            for n, buf in bufs.items():
                dist.all_reduce(big)
                drain()
                dist.barrier()
                block = []
                for _ in range(CALLS):
                    start = time.perf_counter()
                    dist.all_reduce(buf)
                    block.append(time.perf_counter() - start)
                blocks[n].append(block)
    if dist.get_rank() == 0:
        out.write_text(json.dumps({str(n): b for n, b in blocks.items()}))
    destroy()


def main() -> None:
    from cadence.bench._launch import run_workers
    from cadence.netem import EmulatedCluster, check_netem_available, cleanup_on_signals

    if not Path("results", Path(__file__).name).is_file():
        sys.exit("run from the repository root")
    check_netem_available()
    with tempfile.TemporaryDirectory() as tmp, cleanup_on_signals(), EmulatedCluster(
        2, 400e6
    ) as cluster:
        out = Path(tmp, "blocks.json")
        run_workers(cluster, "results.collectives_block_modes", ["--worker", str(out)],
                    Path(tmp), 1, 600, pin_hosts=True)  # fmt: skip
        data = json.loads(out.read_text())
    print(f"{ROUNDS} rounds, blocks of {CALLS} gloo all-reduces, 2 hosts at 400mbit (rank 0)")
    for n, blocks in data.items():
        medians = " ".join(f"{statistics.median(b) * 1e3:.2f}" for b in blocks)
        calls = [x for b in blocks for x in b]
        deciles = statistics.quantiles(calls, n=10)
        print(f"{int(n):>5} B  block medians (ms, in order): {medians}")
        print(f"         all calls: p10 {deciles[0] * 1e3:.2f}, median "
              f"{statistics.median(calls) * 1e3:.2f}, p90 {deciles[8] * 1e3:.2f} ms")  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # the workers inherit it
    if "--worker" in sys.argv:
        worker(Path(sys.argv[-1]))
    else:
        main()
