"""Fine-tuning habits against DDP: a frozen embedding left in the optimizer (torch skips it, so
must cadence), a block applied twice in one forward, and OneCycleLR, which moves AdamW's
betas as well as its learning rate every step."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cadence.testing import run_ranks


class FrozenReused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 8, padding_idx=0)
        self.emb.weight.requires_grad_(False)
        self.block = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.block(self.emb(x).mean(1))))


def _adamw(params) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, eps=1e-6)


def _train(rank: int, world_size: int, strategy: str) -> dict[str, torch.Tensor]:
    import cadence

    torch.manual_seed(0)
    model = FrozenReused()
    if strategy == "ddp":
        wrapped = nn.parallel.DistributedDataParallel(model)
        optimizer = _adamw(model.parameters())
    elif strategy == "cadence-dp":
        config = cadence.DPConfig(threshold_bytes=64)  # many chunks
        wrapped, optimizer = cadence.data_parallel(model, _adamw(model.parameters()), config)
    else:
        wrapped, optimizer = cadence.zero(model, stage=int(strategy[-1]), optimizer=_adamw)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=6)
    gen = torch.Generator().manual_seed(1)
    share = slice(rank * 4, (rank + 1) * 4)
    for _ in range(5):
        x = torch.randint(0, 20, (4 * world_size, 5), generator=gen)[share]
        y = torch.randint(0, 3, (4 * world_size,), generator=gen)[share]
        optimizer.zero_grad()
        F.cross_entropy(wrapped(x), y).backward()
        optimizer.step()
        schedule.step()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if hasattr(optimizer, "flush"):
        optimizer.flush()
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return state


@pytest.mark.parametrize("strategy", ["cadence-dp", "zero1", "zero2", "zero3"])
def test_frozen_parameters_a_reused_block_and_one_cycle_equal_ddp(strategy):
    reference = run_ranks(_train, 2, "ddp", timeout=120)[0]
    for got in run_ranks(_train, 2, strategy, timeout=120):
        assert got.keys() == reference.keys()
        for name, value in reference.items():
            torch.testing.assert_close(got[name], value, rtol=1e-4, atol=1e-5, msg=name)
