"""One rank of the wire measurement of `cadence bench dp`: `python -m
cadence.bench._allreduce_worker ELEMENTS RESULT.json`, started inside an emulated host's
namespace with torchrun-style environment variables. Times gloo all-reduces of one float32
vector of `ELEMENTS` (all of a model's gradients as one message) with the calibration's own
timing loop (`comm.calibrate.measure_s`: one round of at least 3 calls, after one untimed call)
and on rank 0 writes the slowest rank's median seconds to RESULT.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from cadence.comm import destroy, init_from_env
from cadence.comm import ops as comm
from cadence.comm.calibrate import measure_s
from cadence.launch.errors import exit_worker, worker_entry


def main(argv: list[str]) -> int:
    def body() -> None:
        elements, result = int(argv[0]), Path(argv[1])
        torch.set_num_threads(1)
        ctx = init_from_env()
        try:
            comm.all_reduce(torch.zeros(elements))  # buffers and connections set up untimed
            (seconds,) = measure_s("all_reduce", [4 * elements], repeats=1, warmup=0)
            if ctx.rank == 0:
                result.write_text(json.dumps({"elements": elements, "seconds": seconds}) + "\n")
        finally:
            destroy()

    return worker_entry(body)


if __name__ == "__main__":
    exit_worker(main(sys.argv[1:]))
