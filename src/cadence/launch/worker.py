"""Entry point of one worker process: `python -m cadence.launch.worker CONFIG.json RUN_DIR`.

Also the body cadence runs in-process when torchrun launched it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from cadence.comm import destroy, init_from_env
from cadence.comm import ops as comm
from cadence.config import TrainConfig
from cadence.launch.env import BANDWIDTH_ENV, THREADS_ENV
from cadence.launch.errors import exit_worker, worker_entry
from cadence.placement import check_strategy
from cadence.ps.config import survives_dead_workers


def run_worker(config: TrainConfig, run_dir: Path | None) -> dict[str, Any]:
    """Join the process group from the environment and train; always leave the group."""
    from cadence.train.loop import run_training  # heavy imports only in workers

    threads = int(os.environ.get(THREADS_ENV, "0")) or config.cluster.threads
    if threads:
        torch.set_num_threads(threads)
    bandwidth = os.environ.get(BANDWIDTH_ENV)
    ctx = init_from_env(device=config.cluster.device, timeout_s=config.cluster.timeout_s)
    try:
        check_strategy(config.job.strategy, str(ctx.device), ctx.backend)  # under torchrun too
        metrics = run_training(config, ctx, run_dir, float(bandwidth) if bandwidth else None)
        # Leave together: a rank that tears down its process group while rank 0 still writes
        # outputs can abort inside gloo ("terminate called without an active exception").
        # Not where a dead worker must not stop the others (`exit_worker` skips the teardown).
        if dist.is_initialized() and not survives_dead_workers(
            config.job.strategy, config.ps.consistency
        ):
            comm.barrier()
        return metrics
    finally:
        destroy()


def main(argv: list[str]) -> int:
    config = TrainConfig.from_json(json.loads(Path(argv[0]).read_text()))
    run_dir = Path(argv[1])  # rank 0 writes the outputs, every rank its checkpoint file
    return worker_entry(lambda: run_worker(config, run_dir))


if __name__ == "__main__":
    exit_worker(main(sys.argv[1:]))
