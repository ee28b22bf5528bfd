"""Activation checkpointing (`torch.utils.checkpoint`): the recomputed forward runs during the
backward, so cadence-dp's first-use gates and ZeRO-3's gathers fire again there. Training
still equals DDP's."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from cadence.testing import run_ranks


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.a(x))
        x = checkpoint(lambda t: torch.tanh(self.b(t)), x, use_reentrant=False)
        return self.c(x)


def _train(rank: int, world_size: int, strategy: str) -> dict[str, torch.Tensor]:
    import cadence

    torch.manual_seed(0)
    model = Checkpointed()
    if strategy == "ddp":
        wrapped = nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9)
    elif strategy == "cadence-dp":
        sgd = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9)
        wrapped, optimizer = cadence.data_parallel(model, sgd, cadence.DPConfig(threshold_bytes=64))
    else:
        def sgd_of(params) -> torch.optim.Optimizer:
            return torch.optim.SGD(params, 0.1, momentum=0.9)

        wrapped, optimizer = cadence.zero(model, stage=int(strategy[-1]), optimizer=sgd_of)
    gen = torch.Generator().manual_seed(1)
    share = slice(rank * 4, (rank + 1) * 4)
    for _ in range(4):
        x = torch.randn(4 * world_size, 8, generator=gen)[share]
        y = torch.randint(0, 3, (4 * world_size,), generator=gen)[share]
        optimizer.zero_grad()
        F.cross_entropy(wrapped(x), y).backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("strategy", ["cadence-dp", "zero2", "zero3"])
def test_activation_checkpointing_trains_as_under_ddp(strategy: str) -> None:
    reference = run_ranks(_train, 2, "ddp", timeout=120)[0]
    for got in run_ranks(_train, 2, strategy, timeout=120):
        for name, value in reference.items():
            torch.testing.assert_close(got[name], value, rtol=1e-4, atol=1e-5, msg=name)
