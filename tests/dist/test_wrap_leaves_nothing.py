"""Wrapping a model again and again leaves nothing behind: after a first wrap (one-off set-up:
gloo's shared state, thread pools of torch), each further wrap, a few steps and close() end
with this rank's threads, open descriptors and sockets where they were. cadence-dp and ZeRO
make a process group per wrap and leave it on close; the parameter server's workers start
servers and close their pipes and sockets."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from cadence.testing import run_ranks
from cadence.train.resources import usage

WRAPS = 3
BATCH = 8


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(step)
    return torch.randn(BATCH, 8, generator=gen), torch.randint(0, 4, (BATCH,), generator=gen)


def _train(model: nn.Module, optimizer: Any) -> None:
    for step in range(2):
        x, y = _batch(step)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


def _dp_wrap(rank: int, world: int) -> None:
    from cadence.dp import data_parallel

    net = _net()
    model, optimizer = data_parallel(net, torch.optim.SGD(net.parameters(), lr=0.1))
    _train(model, optimizer)
    model._cadence_dp_engine.close()  # type: ignore[union-attr,operator]


def _zero(stage: int) -> Callable[[int, int], None]:
    def wrap(rank: int, world: int) -> None:
        from cadence.zero import zero

        model, optimizer = zero(_net(), stage=stage)
        _train(model, optimizer)
        optimizer.engine.close()

    return wrap


def _ps(rank: int, world: int) -> None:
    from cadence.ps import PSConfig, PSTrainer

    net = _net()
    trainer = PSTrainer(net, torch.optim.SGD(net.parameters(), lr=0.1), PSConfig(workers=world),
                        rank, example=_batch(0)[0])  # fmt: skip
    share = BATCH // world
    for step in range(2):
        x, y = _batch(step)
        mine = slice(rank * share, (rank + 1) * share)
        trainer.train_step(x[mine], y[mine])
    trainer.close()


JOBS: dict[str, Callable[[int, int], None]] = {
    "cadence-dp": _dp_wrap,
    "zero2": _zero(2),
    "zero3": _zero(3),
    "ps": _ps,
}


def _counts() -> tuple[int, int, int]:
    # Between two barriers: every rank measures before any moves on (a rank that returns
    # closes its connections to the store, one socket fewer on the others).
    dist.barrier()
    gc.collect()
    now = usage()
    dist.barrier()
    return now.threads, now.fds, now.sockets


def _soak(rank: int, world: int) -> dict[str, list[tuple[int, int, int]]]:
    seen = {}
    for name, job in JOBS.items():
        job(rank, world)  # the first wrap of each kind sets up what stays for good
        counts = [_counts()]
        for _ in range(WRAPS):
            job(rank, world)
            counts.append(_counts())
        seen[name] = counts
    return seen


def test_wrapping_again_and_again_keeps_threads_descriptors_and_sockets() -> None:
    for rank, seen in enumerate(run_ranks(_soak, 2)):
        for name, counts in seen.items():
            assert counts == [counts[0]] * len(counts), (
                f"rank {rank}, {name}: (threads, fds, sockets) after each wrap {counts}"
            )
