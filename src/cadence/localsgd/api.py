"""`cadence.local_sgd` and `cadence.diloco`: semi-synchronous data parallel."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn

from cadence import heap
from cadence.comm import ops as comm
from cadence.comm.process_group import new_group_like_default
from cadence.localsgd.config import LocalSGDConfig, OuterDtype
from cadence.localsgd.optimizer import LocalSGDOptimizer
from cadence.localsgd.runtime import OuterLoop


def diloco(
    model: nn.Module,
    inner_optimizer: torch.optim.Optimizer,
    *,
    sync_every: int = 500,
    outer_lr: float = 0.7,
    outer_momentum: float = 0.9,
    nesterov: bool = True,
    fragments: int = 1,
    overlap_steps: int | None = None,
    outer_dtype: OuterDtype = "fp32",
    keep_heap: bool = True,
) -> tuple[nn.Module, LocalSGDOptimizer]:
    """Train `model` with DiLoCo: every rank runs `inner_optimizer` on its own gradients (no
    per-step gradient sync); every `sync_every` steps the ranks average their pseudo-gradients
    (outer weights minus local weights) and an outer SGD with Nesterov momentum steps the outer
    weights, which every rank then takes. `fragments` > 1 streams the sync fragment by
    fragment, each overlapped with `overlap_steps` inner steps; `outer_dtype` bf16 or int8
    compresses it. Settings: `LocalSGDConfig`. The process group must already be initialised
    (like DDP); without one this is a world of one. Every rank starts from rank 0's weights
    and buffers. Returns the same model (with a `no_sync()` that does nothing: there is no
    per-step sync to skip) and the optimizer whose `step()` runs the inner step and the syncs
    and whose `sync()` syncs every fragment at once (call it on every rank before evaluating
    or saving). `keep_heap`: fix glibc's malloc thresholds for the process
    (`cadence.heap.keep_heap`), so each step reuses the heap's pages."""
    config = LocalSGDConfig(
        sync_every=sync_every,
        outer_lr=outer_lr,
        outer_momentum=outer_momentum,
        nesterov=nesterov,
        fragments=fragments,
        overlap_steps=overlap_steps,
        outer_dtype=outer_dtype,
    )
    return wrap(model, inner_optimizer, config, keep_heap=keep_heap)


def local_sgd(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    sync_every: int = 16,
    fragments: int = 1,
    overlap_steps: int | None = None,
    outer_dtype: OuterDtype = "fp32",
    keep_heap: bool = True,
) -> tuple[nn.Module, LocalSGDOptimizer]:
    """Local SGD: like `diloco`, but every `sync_every` steps the ranks' weights are simply
    replaced by their mean (outer lr 1, no momentum)."""
    config = LocalSGDConfig(
        sync_every=sync_every,
        outer_lr=1.0,
        outer_momentum=0.0,
        nesterov=False,
        fragments=fragments,
        overlap_steps=overlap_steps,
        outer_dtype=outer_dtype,
    )
    return wrap(model, optimizer, config, keep_heap=keep_heap)


def wrap(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    config: LocalSGDConfig,
    *,
    keep_heap: bool = True,
) -> tuple[nn.Module, LocalSGDOptimizer]:
    """`model` and `optimizer` set up for `config` on the current process group
    (`keep_heap`: glibc's malloc thresholds fixed for the process, `cadence.heap`)."""
    if keep_heap:
        heap.keep_heap()
    world = dist.get_world_size() if dist.is_initialized() else 1
    group = None
    if world > 1:
        with torch.no_grad():  # start from rank 0's weights and buffers, as DDP does
            comm.broadcast_tensors([*model.parameters(), *model.buffers()], src=0)
        # A group of its own: syncs in flight never interleave with the caller's collectives.
        group = new_group_like_default()
    outer = OuterLoop(model, config, group, world)
    if not callable(getattr(model, "no_sync", None)):
        model.no_sync = _no_sync  # type: ignore[assignment]  # as DDP's: nothing to skip here
    return model, LocalSGDOptimizer(optimizer, outer)


@contextlib.contextmanager
def _no_sync() -> Iterator[None]:
    yield
