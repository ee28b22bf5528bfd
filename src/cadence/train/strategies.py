"""Distribution strategies selectable with `--strategy`.

A strategy wraps a freshly built model and optimizer for the current process group and can give
back the plain module (for evaluation and checkpoints). Later strategies (cadence-dp, zero, ps,
pipeline) register here under the same interface.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim import Optimizer

from cadence.comm import DistContext
from cadence.errors import UserError

Wrap = Callable[[nn.Module, Optimizer, DistContext], tuple[nn.Module, Optimizer]]


@dataclass(frozen=True)
class Strategy:
    """A named way to distribute training."""

    name: str
    """Value of `--strategy`."""
    description: str
    """One line for `--help` and error messages."""
    wrap: Wrap
    """Turns (model, optimizer) into their distributed versions for this rank."""
    unwrap: Callable[[nn.Module], nn.Module]
    """Returns the plain module whose parameters are the trained ones."""


def _wrap_ddp(
    model: nn.Module, optimizer: Optimizer, ctx: DistContext
) -> tuple[nn.Module, Optimizer]:
    if not dist.is_initialized():  # a world of one: nothing to synchronise
        return model, optimizer
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids), optimizer


def _unwrap_ddp(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


def _wrap_cadence_dp(
    model: nn.Module, optimizer: Optimizer, ctx: DistContext
) -> tuple[nn.Module, Optimizer]:
    from cadence.dp import data_parallel

    return data_parallel(model, optimizer)


_STRATEGIES: dict[str, Strategy] = {
    "ddp": Strategy(
        "ddp",
        "PyTorch DistributedDataParallel with default 25 MB buckets (the baseline)",
        _wrap_ddp,
        _unwrap_ddp,
    ),
    "cadence-dp": Strategy(
        "cadence-dp",
        "scheduled data parallel: prioritised split/fused gradient sync, per-layer updates, "
        "next forward overlapping communication",
        _wrap_cadence_dp,
        lambda model: model,  # hooks in place: the model itself is the trained module
    ),
}


def strategy_names() -> list[str]:
    return sorted(_STRATEGIES)


def get_strategy(name: str) -> Strategy:
    try:
        return _STRATEGIES[name]
    except KeyError:
        raise UserError(
            f"unknown strategy '{name}': choose one of {', '.join(strategy_names())}"
        ) from None
