"""A worker process killed mid-run (SIGKILL; real worker processes, real server process): the
server stops hearing its heartbeats, declares it dead, and the other worker trains on (backup
workers) or stops with an error that names it (bsp) instead of waiting forever."""

from __future__ import annotations

import os
import signal
from typing import Any

import torch

from cadence.ps import PSConfig, PSTrainer
from cadence.ps.worker import WorkerDead
from cadence.testing import run_ranks
from tests.dist.test_ps_parity import BATCH, batch, make_model, make_optimizer

STEPS, DIES_AT = 8, 2


def dead_worker_job(rank: int, world: int, consistency: str) -> dict[str, Any]:
    model = make_model()
    config = PSConfig(
        workers=world, consistency=consistency, priority="layer", heartbeat_s=0.2,
        dead_after_s=1.5, timeout_s=30.0,
    )  # fmt: skip
    trainer = PSTrainer(model, make_optimizer("sgd", model.parameters()), config, rank)
    share = BATCH // world
    for step in range(STEPS):
        if rank == 1 and step == DIES_AT:
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = batch(step)
        part = slice(rank * share, (rank + 1) * share)
        try:
            loss = trainer.train_step(x[part], y[part])
        except WorkerDead as exc:
            stats = trainer.channels.stop(config.servers)  # let the server finish too
            for proc in trainer.servers:
                proc.wait(timeout=30)
            return {"error": str(exc), "step": step, "stats": stats}
    counters = trainer.worker_counters()
    return {"loss": float(loss), "stats": trainer.close(), "counters": counters}


def test_backup_trains_on_without_a_killed_worker():
    # K = 2 of 2: every step needs both workers until worker 1 is declared dead.
    rank0, rank1 = run_ranks(dead_worker_job, 2, "backup:2", timeout=150, dying=(1,))
    assert rank1 is None
    assert "error" not in rank0, rank0.get("error")
    assert torch.isfinite(torch.tensor(rank0["loss"]))
    assert rank0["stats"]["version"] == STEPS  # every step made, the last ones by worker 0
    assert rank0["stats"]["dead_workers"] == 1
    assert rank0["counters"]["dead_workers"] == [1]


def test_bsp_names_the_killed_worker():
    rank0, _ = run_ranks(dead_worker_job, 2, "bsp", timeout=150, dying=(1,))
    assert rank0["error"].startswith("worker 1 sent the parameter servers nothing for 1.5 s")
    assert "--consistency asp, ssp:S or backup:K" in rank0["error"]
    # Worker 1's last gradients may or may not have left before the kill.
    assert rank0["step"] in (DIES_AT, DIES_AT + 1)
    assert rank0["stats"][0]["dead_workers"] == 1
