"""One rank of the wire measurement of `cadence bench dp`: `python -m
cadence.bench._allreduce_worker ELEMENTS CALLS RESULT.json`, started inside an emulated host's
namespace with torchrun-style environment variables. Times `CALLS` gloo all-reduces of one
float32 vector of `ELEMENTS` (all of a model's gradients as one message) after one untimed
call, and on rank 0 writes each call's seconds on its slowest rank to RESULT.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from cadence.comm import destroy, init_from_env
from cadence.launch.errors import worker_entry


def time_allreduces(elements: int, calls: int) -> list[float]:
    """Seconds of each of `calls` all-reduces, the slowest rank's (a collective ends when its
    last rank does); every rank gets the same list."""
    buf = torch.zeros(elements)  # zeros: repeated sums stay finite
    dist.all_reduce(buf)  # connections and buffers set up outside the timing
    seconds = []
    for _ in range(calls):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(buf)
        seconds.append(time.perf_counter() - start)
    slowest = torch.tensor(seconds, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return [float(s) for s in slowest.tolist()]


def main(argv: list[str]) -> int:
    def body() -> None:
        elements, calls, result = int(argv[0]), int(argv[1]), Path(argv[2])
        torch.set_num_threads(1)
        ctx = init_from_env()
        try:
            seconds = time_allreduces(elements, calls)
            if ctx.rank == 0:
                result.write_text(json.dumps({"elements": elements, "seconds": seconds}) + "\n")
        finally:
            destroy()

    return worker_entry(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
