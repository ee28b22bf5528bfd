"""`cadence.zero(model, ...)`: shard a model's training state (the package's entry point,
loaded on first call so that the plain-data modules beside it import without torch)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from cadence import heap
from cadence.amp import install as install_scaler
from cadence.comm.ops import broadcast_tensors
from cadence.comm.process_group import new_group_like_default
from cadence.zero.config import DEFAULT_FORWARD_GATHER_SHARE, ZeroConfig
from cadence.zero.engine import ZeroEngine
from cadence.zero.grad_norm import install as install_clip
from cadence.zero.optim import ZeroOptimizer
from cadence.zero.params3 import Stage3Engine
from cadence.zero.plan import build_zero_plan, describe_model
from cadence.zero.shard_optim import BY_NAME, OptimizerArg, resolve


def zero(
    model: nn.Module,
    stage: int = 2,
    optimizer: OptimizerArg = "adam",
    compression: str = "none",
    freeze_steps: int = 100,
    *,
    broadcast_buffers: bool = True,
    gather_dtype: str = "fp32",
    prefetch: bool = True,
    overlap_gather: bool = False,
    forward_gather_share: float = DEFAULT_FORWARD_GATHER_SHARE,
    gather_lane: bool = True,
    replicated_update: bool = False,
    replicated_share: float = 1.0,
    keep_heap: bool = True,
    **optimizer_kwargs: Any,
) -> tuple[nn.Module, ZeroOptimizer]:
    """Shard `model`'s training state over the current process group (a world of one without).

    `optimizer` is the user's torch optimizer built over `model.parameters()` (its param
    groups are kept), a factory `params -> optimizer`, or a name ("adam", "adamw", "sgd") with
    `optimizer_kwargs` (lr, betas, momentum, weight_decay, ...). Only optimizers whose update is
    element by element can be sharded exactly (`shard_optim.ELEMENTWISE`); others are refused.
    `broadcast_buffers`: rank 0's buffers go to every rank before each forward that records
    gradients, as under DDP. `keep_heap`: fix glibc's malloc thresholds for the process
    (`cadence.heap.keep_heap`), so each step reuses the heap's pages: GPT-2 under ZeRO-2 on
    two workers sharing two cores faulted 2,500-3,500 pages a step without it.
    Returns the same model (its parameters now views into ZeRO's buffers; in stage 3 hooked)
    and the optimizer to use from now on (the one passed in is left unused).
    """
    config = ZeroConfig(
        stage=stage,
        optimizer=optimizer_name(optimizer),
        compression=compression,
        freeze_steps=freeze_steps,
        gather_dtype=gather_dtype,
        prefetch=prefetch,
        overlap_gather=overlap_gather,
        forward_gather_share=forward_gather_share,
        gather_lane=gather_lane,
        replicated_update=replicated_update,
        replicated_share=replicated_share,
    )
    return zero_from_config(
        model, config, optimizer, broadcast_buffers=broadcast_buffers, keep_heap=keep_heap,
        **optimizer_kwargs,
    )  # fmt: skip


def optimizer_name(optimizer: OptimizerArg) -> str:
    """The `ZeroConfig.optimizer` name of a name, optimizer or factory (for checks and the
    memory formula; a factory or another elementwise optimizer counts as "adam")."""
    if isinstance(optimizer, str):
        return optimizer  # ZeroConfig refuses an unknown name
    for name, cls in BY_NAME.items():
        if type(optimizer) is cls:
            return name
    return "adam"


def zero_from_config(
    model: nn.Module,
    config: ZeroConfig,
    optimizer: OptimizerArg | None = None,
    *,
    broadcast_buffers: bool = True,
    keep_heap: bool = True,
    **optimizer_kwargs: Any,
) -> tuple[nn.Module, ZeroOptimizer]:
    """`zero` with a ready-made `ZeroConfig` (`optimizer` None: `config.optimizer` by name)."""
    if keep_heap:
        heap.keep_heap()
    user = resolve(config.optimizer if optimizer is None else optimizer, model, optimizer_kwargs)
    world_size, rank, group, gather_group = 1, 0, None, None
    if dist.is_initialized() and dist.get_world_size() > 1:
        world_size, rank = dist.get_world_size(), dist.get_rank()
    plan = build_zero_plan(describe_model(model), config, world_size)
    if world_size > 1:
        with torch.no_grad():  # start from rank 0's weights and buffers, as DDP does
            broadcast_tensors([*model.parameters(), *model.buffers()], src=0)
        # The communication thread's own group: never interleaves with the caller's collectives.
        group = new_group_like_default()
        if plan.gather_lane:
            gather_group = new_group_like_default()
    engine: ZeroEngine
    if config.stage == 3:
        engine = Stage3Engine(model, plan, user, group, rank, broadcast_buffers=broadcast_buffers)
    else:
        engine = ZeroEngine(
            model, plan, user, group, rank, gather_group, broadcast_buffers=broadcast_buffers
        )
    model._cadence_zero_engine = engine  # type: ignore[assignment]  # lives as long as the model
    if "no_sync" not in dir(model):
        model.no_sync = engine.no_sync  # type: ignore[assignment]  # as DDP's
    # `model.zero_grad()` clears the reduced gradients the engine holds too, as the optimizer's
    # does: loops that call it instead of the optimizer's would otherwise add old ones.
    model.zero_grad = lambda set_to_none=True: engine.zero_grad()  # type: ignore[method-assign]
    install_clip()
    install_scaler()
    return model, ZeroOptimizer(engine)
