"""`model.zero_grad()` in place of the optimizer's (Hugging Face's Trainer and many scripts do
it), before the forward or after `step()` with `set_to_none=False`: cadence-dp and ZeRO train
as DDP does. It must neither clear gradients still being reduced nor leave reduced ones behind."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cadence.testing import run_ranks


def _train(rank: int, world_size: int, strategy: str, where: str) -> dict[str, torch.Tensor]:
    import cadence

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(6)], nn.Linear(64, 3))

    def adamw(params) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=1e-2, eps=1e-6)

    if strategy == "ddp":
        wrapped = nn.parallel.DistributedDataParallel(model)
        optimizer = adamw(model.parameters())
    elif strategy == "cadence-dp":
        config = cadence.DPConfig(threshold_bytes=4096)  # many chunks in flight after step()
        wrapped, optimizer = cadence.data_parallel(model, adamw(model.parameters()), config)
    else:
        wrapped, optimizer = cadence.zero(model, stage=int(strategy[-1]), optimizer=adamw)
    gen = torch.Generator().manual_seed(1)
    share = slice(rank * 4, (rank + 1) * 4)
    for _ in range(6):
        x = torch.randn(4 * world_size, 64, generator=gen)[share]
        y = torch.randint(0, 3, (4 * world_size,), generator=gen)[share]
        if where == "before":
            wrapped.zero_grad()
        F.cross_entropy(wrapped(x), y).backward()
        optimizer.step()
        if where == "after":
            wrapped.zero_grad(set_to_none=False)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("strategy", ["cadence-dp", "zero1", "zero2", "zero3"])
def test_module_zero_grad_trains_as_under_ddp(strategy: str, where: str) -> None:
    reference = run_ranks(_train, 2, "ddp", where, timeout=120)[0]
    for got in run_ranks(_train, 2, strategy, where, timeout=120):
        for name, value in reference.items():
            torch.testing.assert_close(got[name], value, rtol=1e-4, atol=1e-5, msg=name)
