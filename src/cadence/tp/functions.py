"""The communication of tensor parallelism as autograd functions (Megatron-LM's f, g and gather).

Every rank of a tensor-parallel group holds the same activations between sharded layers and a
slice of each sharded weight. Three conjugate pairs move data across the slices:

  copy_to_tp      forward: identity           backward: all-reduce (sum) of the input gradient
  reduce_from_tp  forward: all-reduce (sum)   backward: identity
  gather_from_tp  forward: all-gather on the last dim   backward: keep this rank's slice

The collectives run on the group with torch.distributed (gloo's ring on CPU): activations are
small and latency-bound, where gloo's C++ loop beats cadence's Python-driven algorithms.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.autograd.function import FunctionCtx

from cadence.comm import ops as comm
from cadence.comm.process_group import new_group
from cadence.errors import UserError

Group = dist.ProcessGroup | None


class CollectiveLog(Counter[str]):
    """Collectives issued, counted by name, plus `calls`: (name, bytes) in issue order, bytes
    as the cost model counts them (all-gather: the gathered output)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []


# Open `count_collectives()` logs; every collective below adds itself to each of them.
_LOGS: list[CollectiveLog] = []


@contextlib.contextmanager
def count_collectives() -> Iterator[CollectiveLog]:
    """Record the collectives tensor-parallel layers issue inside the block ("all_reduce",
    "all_gather"), e.g. to check that a transformer MLP costs one all-reduce per forward."""
    log = CollectiveLog()
    _LOGS.append(log)
    try:
        yield log
    finally:
        _LOGS.remove(log)


def _note(name: str, nbytes: int) -> None:
    for log in _LOGS:
        log[name] += 1
        log.calls.append((name, nbytes))


def group_rank_size(group: Group) -> tuple[int, int]:
    """(rank, size) within `group`; (0, 1) without an initialised process group."""
    if not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _all_reduce(x: Tensor, group: Group) -> Tensor:
    if group_rank_size(group)[1] == 1:
        return x
    out = x.contiguous().clone()  # never reduce into a tensor autograd may still read
    _note("all_reduce", out.numel() * out.element_size())
    comm.all_reduce(out, group=group)
    return out


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, group: Group) -> Tensor:
        ctx.group = group  # type: ignore[attr-defined]
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return _all_reduce(grad, ctx.group), None


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, group: Group) -> Tensor:
        return _all_reduce(x, group)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


class _GatherFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, group: Group) -> Tensor:
        rank, size = group_rank_size(group)
        ctx.rank, ctx.size = rank, size  # type: ignore[attr-defined]
        if size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(size)]
        _note("all_gather", size * x.numel() * x.element_size())
        comm.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        # Every rank computes the same loss from the gathered tensor, so the gradient of its
        # own slice is already complete here: no communication.
        if ctx.size == 1:
            return grad, None
        return grad.chunk(ctx.size, dim=-1)[ctx.rank].contiguous(), None


def copy_to_tp(x: Tensor, group: Group = None) -> Tensor:
    """Identity forward; all-reduce of the gradient backward (enters a column-parallel layer)."""
    out: Tensor = _CopyToTP.apply(x, group)
    return out


def reduce_from_tp(x: Tensor, group: Group = None) -> Tensor:
    """All-reduce forward (sums partial outputs); identity backward (ends a row-parallel layer)."""
    out: Tensor = _ReduceFromTP.apply(x, group)
    return out


def gather_from_tp(x: Tensor, group: Group = None) -> Tensor:
    """Concatenate every rank's slice along the last dimension; backward keeps this rank's."""
    out: Tensor = _GatherFromTP.apply(x, group)
    return out


def hybrid_groups(tp_size: int) -> tuple[Group, Group]:
    """(tensor-parallel group, data-parallel group) of this rank for a world of
    W = tp_size x dp_size ranks: consecutive ranks share a model (TP, the chattiest traffic,
    stays among neighbours, e.g. on one machine), ranks with equal TP rank form a DP group.

    Call it on every rank, in the same order as any other `new_group` call.
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    if tp_size < 1 or world % tp_size:
        raise UserError(f"tensor-parallel size {tp_size} does not divide the world size {world}")
    tp_groups = [new_group(list(range(s, s + tp_size))) for s in range(0, world, tp_size)]
    dp_groups = [new_group(list(range(j, world, tp_size))) for j in range(tp_size)]
    return tp_groups[rank // tp_size], dp_groups[rank % tp_size]
