"""One rank of `results/collectives_block_position.py`: gloo's flat all-gather timed call by
call in blocks that start as `cadence bench collectives` starts its blocks (an untimed
all-reduce of twice the links' token bucket, then a barrier), the barrier timed too. Writes
this rank's times to OUT_DIR/rankR.json; `yield` as the third argument runs gloo's I/O thread
under SCHED_IDLE, as `bench collectives` does by default."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from cadence.comm import destroy, init_from_env
from cadence.comm.calibrate import bucket_drain
from cadence.comm.gloo_threads import gloo_io_yields

SIZES = (16 << 10, 64 << 10, 256 << 10)
CALLS = 16  # a block; `bench collectives` gives 64 KB 4 calls a block, 16 KB 16
ROUNDS = 24


def main(out_dir: str, drain_bytes: int, io_yields: bool) -> None:
    torch.set_num_threads(1)
    ctx = init_from_env()
    p = dist.get_world_size()
    drain = bucket_drain(drain_bytes)
    gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
    bufs = {n: (torch.zeros(n // 4), torch.zeros(n // 4 // p)) for n in SIZES}
    times: dict[str, list[list[float]]] = {str(n): [] for n in SIZES}
    barrier_s: list[float] = []
    with gloo_io_yields(io_yields) as demoted:  # as `bench collectives` runs by default
        assert demoted or not io_yields, "no gloo I/O thread to demote"
        measure(drain, gather, bufs, times, barrier_s)
    Path(out_dir, f"rank{ctx.rank}.json").write_text(
        json.dumps({"times": times, "barrier_s": barrier_s})
    )
    destroy()


def measure(drain, gather, bufs, times, barrier_s) -> None:  # noqa: ANN001
    for rnd in range(ROUNDS + 2):
        for n in SIZES:
            out, mine = bufs[n]
            drain()
            start = time.perf_counter()
            dist.barrier()
            settled = time.perf_counter() - start
            block = []
            for _ in range(CALLS):
                start = time.perf_counter()
                gather(out, mine)
                block.append(time.perf_counter() - start)
            if rnd >= 2:  # two rounds of warm-up
                times[str(n)].append(block)
                barrier_s.append(settled)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "yield")
