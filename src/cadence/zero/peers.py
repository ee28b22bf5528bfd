"""The peers `cadence bench zero` measures against: DDP, FSDP2 and DeepSpeed ZeRO-2.

Each `wrap_*` takes the freshly built model and returns a `Job`: one `train_step(x, y)` that
does zero_grad, forward, backward and the optimizer step the way that library's users write it.
All of them run Adam with the same hyper-parameters, so their losses match DDP + Adam's step
for step (up to floating-point order) until 1-bit Adam's switch-over.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from cadence.errors import UserError
from cadence.models import loss_fn
from cadence.zero.config import ZeroConfig
from cadence.zero.layout import model_units

Step = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class Job:
    """One benchmarked way of training, ready to step."""

    train_step: Step
    """zero_grad + forward + backward + step on this rank's batch; returns the loss."""
    close: Callable[[], None]
    """Releases threads the job started (no-op for most)."""


def deepspeed_missing() -> str | None:
    """Why DeepSpeed cannot run here, in one line, or None when it can."""
    try:
        import deepspeed  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install failing in its own import
        why = f"{type(exc).__name__}: {exc}"
        return f"deepspeed is not importable ({why}); pip install 'cadence[peers]'"
    return None


def _plain_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> Step:
    def step(x: Tensor, y: Tensor) -> Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def wrap_ddp(model: nn.Module, lr: float) -> Job:
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(model) if dist.is_initialized() else model
    return Job(_plain_step(ddp, torch.optim.Adam(ddp.parameters(), lr=lr)), lambda: None)


def wrap_fsdp2(model: nn.Module, lr: float) -> Job:
    """FSDP2: `fully_shard` on every block (ZeRO-3 style, resharded after forward), then root."""
    from torch.distributed.fsdp import fully_shard

    for _, block in reversed(model_units(model)):  # innermost first, as fully_shard needs
        if block is not model and any(p.requires_grad for p in block.parameters()):
            fully_shard(block)
    fully_shard(model)
    return Job(_plain_step(model, torch.optim.Adam(model.parameters(), lr=lr)), lambda: None)


def wrap_deepspeed(model: nn.Module, lr: float, micro_batch: int) -> Job:
    """DeepSpeed ZeRO stage 2 with torch's Adam as the client optimizer, fp32, on gloo."""
    reason = deepspeed_missing()
    if reason is not None:
        raise UserError(reason)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")  # reuses the group already initialised
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 2, "overlap_comm": False, "contiguous_gradients": True},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)

    def step(x: Tensor, y: Tensor) -> Tensor:
        loss = loss_fn(engine(x), y)
        engine.backward(loss)
        engine.step()  # zeroes the gradients itself
        return loss.detach()

    return Job(step, lambda: None)


def wrap_zero(model: nn.Module, lr: float, config: ZeroConfig) -> Job:
    from cadence.zero import zero_from_config

    model, optimizer = zero_from_config(model, config, lr=lr)
    return Job(_plain_step(model, optimizer), optimizer.engine.close)
