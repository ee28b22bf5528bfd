"""Loops the parity matrix does not walk, against DDP on 2 gloo ranks: two synchronising
backward passes before one step (their reduced gradients add up), a backward pass dropped by
`zero_grad()` without a step, an evaluation forward between backward and step, and BatchNorm
buffers with `broadcast_buffers` on and off."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from cadence.dp import DPConfig, data_parallel
from cadence.testing import run_ranks


def _net() -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3)]
    return nn.Sequential(*layers)


def _run(rank: int, wrap: str, threshold: int | None) -> dict[str, Any]:
    plain = _net()
    if wrap == "ddp":
        model: Any = DistributedDataParallel(plain)
        optimizer: Any = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        model, optimizer = data_parallel(
            plain,
            torch.optim.SGD(plain.parameters(), lr=0.1, momentum=0.9),
            DPConfig(threshold_bytes=threshold),
        )
    gen = torch.Generator().manual_seed(30 + rank)

    def loss() -> torch.Tensor:
        x, y = torch.randn(4, 6, generator=gen), torch.randint(0, 3, (4,), generator=gen)
        return F.cross_entropy(model(x), y)

    seen = []
    for step in range(4):
        optimizer.zero_grad()
        loss().backward()
        if step == 1:
            loss().backward()  # a second synchronising pass: gradients add up
        if step == 2:
            optimizer.zero_grad()  # this backward pass is dropped, never stepped
            loss().backward()
        model.eval()
        with torch.no_grad():  # before step(): the weights of the last step
            seen.append(model(torch.ones(2, 6)).clone())
        model.train()
        optimizer.step()
    if wrap != "ddp":
        optimizer.flush()
        model._cadence_dp_engine.close()
    return {"params": {n: p.detach().clone() for n, p in plain.named_parameters()}, "seen": seen}


def _compare(rank: int, world_size: int) -> list[Any]:
    reference = _run(rank, "ddp", None)
    return [(t, reference, _run(rank, "dp", t)) for t in (64, 1 << 30)]


def test_extra_backward_dropped_backward_and_eval_before_step_follow_ddp() -> None:
    for results in run_ranks(_compare, 2, timeout=120):
        for threshold, reference, got in results:
            for name, value in reference["params"].items():
                torch.testing.assert_close(got["params"][name], value, msg=f"{name} {threshold}")
            for i, value in enumerate(reference["seen"]):
                torch.testing.assert_close(got["seen"][i], value, msg=f"eval {i} {threshold}")


def _bn_run(rank: int, wrap: str, broadcast: bool) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3))
    if wrap == "ddp":
        model: Any = DistributedDataParallel(plain, broadcast_buffers=broadcast)
        optimizer: Any = torch.optim.SGD(model.parameters(), lr=0.1)
    else:
        model, optimizer = data_parallel(
            plain,
            torch.optim.SGD(plain.parameters(), lr=0.1),
            DPConfig(threshold_bytes=64, broadcast_buffers=broadcast),
        )
    gen = torch.Generator().manual_seed(40 + rank)  # each rank's own statistics
    for _ in range(3):
        x = torch.randn(4, 6, generator=gen) * (1 + rank)
        y = torch.randint(0, 3, (4,), generator=gen)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    state = {k: v.detach().clone() for k, v in plain.state_dict().items()}
    if wrap != "ddp":
        model._cadence_dp_engine.close()
    return state


def _compare_bn(rank: int, world_size: int) -> list[Any]:
    return [(b, _bn_run(rank, "ddp", b), _bn_run(rank, "dp", b)) for b in (True, False)]


def test_buffers_broadcast_per_forward_or_kept_local_as_ddp() -> None:
    per_rank = run_ranks(_compare_bn, 2, timeout=120)
    for results in per_rank:
        for broadcast, reference, got in results:
            for name, value in reference.items():
                torch.testing.assert_close(got[name], value, msg=f"{name} {broadcast}")
    # Kept local, the ranks' running statistics differ (so the comparison above is not vacuous).
    local = [dict((b, g) for b, _, g in results)[False] for results in per_rank]
    assert not torch.equal(local[0]["1.running_mean"], local[1]["1.running_mean"])
