"""DDP's rules for gradients a rank did not compute, and GradScaler, on 2 gloo ranks: a
parameter used on one rank only is reduced with zeros from the other (and counts in a global
norm clip, here through a reference to torch's clip taken at import); one used on no rank keeps
grad None and gets no weight decay or momentum; GradScaler's unscale_ and skipped steps."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.nn.utils import clip_grad_norm_ as clip_bound_at_import  # before any engine exists

from cadence.dp import DPConfig, data_parallel
from cadence.testing import run_ranks

STEPS = 3


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.rank0_only = nn.Linear(8, 8)  # used by rank 0's forward only
        self.nowhere = nn.Linear(8, 8)  # used by no rank
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, branch: bool) -> torch.Tensor:
        x = torch.tanh(self.inp(x))
        if branch:
            x = x + torch.tanh(self.rank0_only(x))
        return self.out(x)


def _train(rank: int, wrap: Any, threshold: int | None, to_none: bool = True) -> dict[str, Any]:
    torch.manual_seed(0)
    plain = Branchy()
    optimizer: Any
    if wrap == "ddp":
        model: Any = DistributedDataParallel(plain, find_unused_parameters=True)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.5)
    else:
        model, optimizer = data_parallel(
            plain,
            torch.optim.AdamW(plain.parameters(), lr=1e-2, weight_decay=0.5),
            DPConfig(threshold_bytes=threshold),
        )
    gen = torch.Generator().manual_seed(10 + rank)
    for _ in range(STEPS):
        x, y = torch.randn(4, 6, generator=gen), torch.randint(0, 3, (4,), generator=gen)
        optimizer.zero_grad(set_to_none=to_none)
        F.cross_entropy(model(x, rank == 0), y).backward()
        clip_bound_at_import(plain.parameters(), 0.05)
        optimizer.step()
    if hasattr(optimizer, "flush"):
        optimizer.flush()
    params = {n: p.detach().clone() for n, p in plain.named_parameters()}
    grads = {n: p.grad is None for n, p in plain.named_parameters() if n.startswith("nowhere")}
    if wrap != "ddp":
        model._cadence_dp_engine.close()
    return {"params": params, "grad_none": grads}


def _compare_unused(rank: int, world_size: int) -> list[Any]:
    results = []
    for to_none in (True, False):  # zeroed gradients, once they exist, count as used
        reference = _train(rank, "ddp", None, to_none)
        results += [(t, reference, _train(rank, "dp", t, to_none)) for t in (64, 1 << 30)]
    return results


def test_parameters_unused_on_some_or_all_ranks_follow_ddp() -> None:
    torch.manual_seed(0)
    initial = {n: p.detach().clone() for n, p in Branchy().named_parameters()}
    for results in run_ranks(_compare_unused, 2, timeout=120):
        for threshold, reference, got in results:
            for name, value in reference["params"].items():
                torch.testing.assert_close(got["params"][name], value, msg=f"{name} {threshold}")
            # Used nowhere: no weight decay, no update, no gradient (DDP's as well).
            for name in ("nowhere.weight", "nowhere.bias"):
                torch.testing.assert_close(got["params"][name], initial[name])
                assert got["grad_none"][name]
            # Used on rank 0 only: updated on both ranks alike (rank 1 contributed zeros).
            assert not torch.equal(got["params"]["rank0_only.weight"], initial["rank0_only.weight"])


def _scaled(rank: int, wrap: str, threshold: int | None) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model: Any = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    plain = model
    if wrap == "ddp":
        model = DistributedDataParallel(model)
        optimizer: Any = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        model, optimizer = data_parallel(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
            DPConfig(threshold_bytes=threshold),
        )
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    gen = torch.Generator().manual_seed(20 + rank)
    for step in range(4):
        x, y = torch.randn(4, 6, generator=gen), torch.randint(0, 3, (4,), generator=gen)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        if step == 1:
            loss = loss * float("inf")  # an overflow: the scaler skips this step
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.5)
        scaler.step(optimizer)
        scaler.update()
    if wrap != "ddp":
        optimizer.flush()
        model._cadence_dp_engine.close()
    return {n: p.detach().clone() for n, p in plain.named_parameters()}


def _compare_scaled(rank: int, world_size: int) -> list[Any]:
    reference = _scaled(rank, "ddp", None)
    return [(t, reference, _scaled(rank, "dp", t)) for t in (64, 1 << 30)]


def test_grad_scaler_with_unscale_and_a_skipped_step_follows_ddp() -> None:
    for results in run_ranks(_compare_scaled, 2, timeout=120):
        for threshold, reference, got in results:
            for name, value in reference.items():
                torch.testing.assert_close(got[name], value, msg=f"{name} {threshold}")
