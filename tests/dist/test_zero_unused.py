"""A parameter that only some ranks use (a data-dependent branch) under ZeRO stages 1-2: the
ranks still issue their bucket reductions in the same order, and training equals DDP's with
find_unused_parameters. (Stage 3 gathers a unit's parameters around its forward and backward,
so, as under FSDP, every rank must run the same units.)"""

from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.utils import clip_grad_norm_ as clip_bound_at_import  # before any ZeRO model

from cadence.errors import UserError
from cadence.testing import run_ranks


class Branchy(nn.Module):
    """`layers[1]` (a bucket of its own) runs only where the batch asks for it, so its
    reduction is due on some ranks and not others; `never` runs nowhere."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])
        self.never = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, use_rare: bool) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            if i != 1 or use_rare:
                x = torch.tanh(layer(x))
        return self.head(x)


def _train(rank: int, world_size: int, stage: int) -> list[dict[str, torch.Tensor]]:
    import cadence

    out = []
    for strategy in ("ddp", "zero"):
        torch.manual_seed(0)
        model = Branchy()
        opt: Any  # AdamW under DDP, cadence's ZeroOptimizer (with its engine) under ZeRO
        if strategy == "ddp":
            wrapped = nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
            opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-2, weight_decay=0.1)
        else:
            wrapped, opt = cadence.zero(model, stage=stage, optimizer=lambda ps: torch.optim.AdamW(
                ps, lr=1e-2, weight_decay=0.1))  # fmt: skip
        gen = torch.Generator().manual_seed(5)
        for step in range(4):
            x = torch.randn(4 * world_size, 8, generator=gen)[rank * 4 : (rank + 1) * 4]
            opt.zero_grad()
            wrapped(x, use_rare=(rank + step) % 2 == 0).square().mean().backward()
            opt.step()
        out.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        if strategy == "zero":
            opt.engine.close()
    return out


@pytest.mark.parametrize("stage", [1, 2])
def test_a_parameter_some_ranks_skip_trains_as_under_ddp(stage):
    torch.manual_seed(0)
    initial = Branchy().state_dict()
    for ddp, zero in run_ranks(_train, 2, stage, timeout=120):
        for key, value in ddp.items():
            torch.testing.assert_close(zero[key], value, rtol=1e-5, atol=1e-6, msg=key)
        assert torch.equal(zero["never.weight"], initial["never.weight"])  # no decay either
        assert not torch.equal(zero["layers.1.weight"], initial["layers.1.weight"])


def _clip_bound_at_import(rank: int, world_size: int, stage: int) -> str:
    import cadence

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    wrapped, opt = cadence.zero(model, stage=stage, optimizer=lambda ps: torch.optim.SGD(ps, 0.1))
    wrapped(torch.randn(4, 8)).square().mean().backward()
    try:
        clip_bound_at_import(wrapped.parameters(), 0.01)
    except UserError as exc:
        return str(exc)
    finally:
        opt.engine.close()
    return "clipped"


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_a_clip_bound_before_wrapping_is_refused_not_wrong(stage):
    """torch's clip_grad_norm_ imported before cadence.zero existed cannot see the sharded,
    reduced gradients: it is stopped with one line instead of clipping the wrong ones."""
    for message in run_ranks(_clip_bound_at_import, 2, stage, timeout=120):
        assert "imported before cadence.zero wrapped the model" in message
