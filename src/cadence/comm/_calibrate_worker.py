"""One rank of `cadence calibrate`: `python -m cadence.comm._calibrate_worker CONFIG.json`,
started by the launcher (loopback or an emulated host's namespace) with torchrun-style
environment variables; also the in-process body under torchrun. Rank 0 writes the file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from cadence.comm import destroy, init_from_env
from cadence.comm.calibrate import calibrate
from cadence.comm.calibrate_command import CalibrateConfig
from cadence.launch.errors import exit_worker, worker_entry


def run(config: CalibrateConfig) -> str | None:
    """Join the group, calibrate, and on rank 0 write `config.out` (through a temporary file,
    so an interrupted run leaves no half-written calibration) and return its table."""
    torch.set_num_threads(1)  # gloo's CPU path: one intra-op thread per rank, as in training
    ctx = init_from_env(backend="gloo", device="cpu")
    try:
        calibration = calibrate(
            sizes=config.sizes,
            repeats=config.repeats,
            warmup=config.warmup,
            collectives=config.collectives,
            drain_bytes=config.drain_bytes(),
        )
        table = None
        if ctx.rank == 0:
            out = Path(config.out)
            staged = out.with_name(out.name + ".tmp")
            calibration.save(staged)
            staged.replace(out)
            table = calibration.table()
        dist.barrier()  # leave together: a rank tearing down early can abort gloo's peers
        return table
    finally:
        destroy()


def main(argv: list[str]) -> int:
    raw = json.loads(Path(argv[0]).read_text())
    raw = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    return worker_entry(lambda: run(CalibrateConfig(**raw)))


if __name__ == "__main__":
    exit_worker(main(sys.argv[1:]))
