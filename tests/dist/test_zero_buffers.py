"""ZeRO sends rank 0's buffers before each training forward as DDP does: one message per dtype
(not one per buffer), the same values as DDP's broadcast."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import cadence
from cadence.comm import collectives
from cadence.testing import run_ranks


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Tanh(),
        nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Tanh(),
        nn.Linear(8, 3), nn.BatchNorm1d(3),
    )  # fmt: skip


def _run(rank: int, wrap: Any) -> dict[str, torch.Tensor]:
    model, optimizer = wrap(_net())
    gen = torch.Generator().manual_seed(40 + rank)  # each rank's own statistics
    inputs = torch.randn(3, 4, 6, generator=gen) * (1 + rank)
    for x, y in zip(inputs, torch.randint(0, 3, (3, 4), generator=gen), strict=True):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    module = model.module if isinstance(model, DistributedDataParallel) else model
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    if hasattr(optimizer, "engine"):
        optimizer.engine.close()
    return state


def _ranks(rank: int, world_size: int, stage: int) -> tuple[Any, Any, int]:
    sent: list[int] = []  # one entry per broadcast ZeRO's engine makes
    broadcast = collectives.broadcast

    def counted(*args: Any, **kwargs: Any) -> None:
        sent.append(1)
        broadcast(*args, **kwargs)

    collectives.broadcast = counted

    def ddp(net: nn.Module) -> Any:
        model = DistributedDataParallel(net)
        return model, torch.optim.SGD(model.parameters(), lr=0.1)

    def zero(net: nn.Module) -> Any:
        return cadence.zero(net, stage=stage, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))

    reference = _run(rank, ddp)
    got = _run(rank, zero)
    return reference, got, len(sent)


@pytest.mark.parametrize("stage", [1, 3])
def test_zero_broadcasts_buffers_once_per_dtype_as_ddp(stage: int) -> None:
    for reference, got, messages in run_ranks(_ranks, 2, stage, timeout=120):
        for name, value in reference.items():
            torch.testing.assert_close(got[name], value, msg=name)
        # 3 training forwards, each sending the float statistics and the int64 batch counters.
        assert messages == 3 * 2
