"""ZeRO stages 1-3 with optional fp16 or 1-bit (1-bit Adam) compression, on any backend.

    model, optimizer = cadence.zero(model, stage=3, optimizer=torch.optim.AdamW(model.parameters()))
    for x, y in data:
        optimizer.zero_grad(); loss_fn(model(x), y).backward()
        optimizer.clip_grad_norm_(1.0); optimizer.step()

    model, optimizer = cadence.zero(model, stage=2, compression="onebit", freeze_steps=100, lr=1e-3)

`layout.py` is the shard plan (pure), `engine.py` carries it out, `params3.py` adds stage 3's
gather/release hooks, `onebit.py`/`compress.py` the 1-bit collectives, `checkpoint.py` sharded
save/load.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from cadence.amp import install as install_scaler
from cadence.comm.process_group import group_timeout
from cadence.zero.checkpoint import load, save
from cadence.zero.config import DEFAULT_FORWARD_GATHER_SHARE, ZeroConfig
from cadence.zero.engine import ZeroEngine
from cadence.zero.grad_norm import install as install_clip
from cadence.zero.layout import ZeroLayout, build_layout, comm_bytes_per_step, state_bytes
from cadence.zero.optim import ZeroOptimizer
from cadence.zero.params3 import Stage3Engine
from cadence.zero.shard_optim import BY_NAME, OptimizerArg, resolve

__all__ = [
    "ZeroConfig",
    "ZeroLayout",
    "ZeroOptimizer",
    "build_layout",
    "comm_bytes_per_step",
    "load",
    "save",
    "state_bytes",
    "zero",
    "zero_from_config",
]


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
    **optimizer_kwargs: Any,
) -> tuple[nn.Module, ZeroOptimizer]:
    """Shard `model`'s training state over the current process group (a world of one without).

    `optimizer` is the user's torch optimizer built over `model.parameters()` (its param
    groups are kept), a factory `params -> optimizer`, or a name ("adam", "adamw", "sgd") with
    `optimizer_kwargs` (lr, betas, momentum, weight_decay, ...). Only optimizers whose update is
    element by element can be sharded exactly (`shard_optim.ELEMENTWISE`); others are refused.
    `broadcast_buffers`: rank 0's buffers go to every rank before each forward that records
    gradients, as under DDP.
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
        model, config, optimizer, broadcast_buffers=broadcast_buffers, **optimizer_kwargs
    )


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
    **optimizer_kwargs: Any,
) -> tuple[nn.Module, ZeroOptimizer]:
    """`zero` with a ready-made `ZeroConfig` (`optimizer` None: `config.optimizer` by name)."""
    user = resolve(config.optimizer if optimizer is None else optimizer, model, optimizer_kwargs)
    world_size, rank, group, gather_group = 1, 0, None, None
    if dist.is_initialized() and dist.get_world_size() > 1:
        world_size, rank = dist.get_world_size(), dist.get_rank()
        with torch.no_grad():  # start from rank 0's weights and buffers, as DDP does
            for t in [*model.parameters(), *model.buffers()]:
                dist.broadcast(t, src=0)
        # The communication thread's own group: never interleaves with the caller's collectives.
        group = dist.new_group(backend=dist.get_backend(), timeout=group_timeout())
        if config.updates_early and config.gather_lane and not config.replicates_everything:
            gather_group = dist.new_group(backend=dist.get_backend(), timeout=group_timeout())
    engine: ZeroEngine
    if config.stage == 3:
        engine = Stage3Engine(
            model, config, user, group, world_size, rank, broadcast_buffers=broadcast_buffers
        )
    else:
        engine = ZeroEngine(
            model, config, user, group, world_size, rank, gather_group,
            broadcast_buffers=broadcast_buffers,
        )  # fmt: skip
    model._cadence_zero_engine = engine  # type: ignore[assignment]  # lives as long as the model
    if "no_sync" not in dir(model):
        model.no_sync = engine.no_sync  # type: ignore[assignment]  # as DDP's
    # `model.zero_grad()` clears the reduced gradients the engine holds too, as the optimizer's
    # does: loops that call it instead of the optimizer's would otherwise add old ones.
    model.zero_grad = lambda set_to_none=True: engine.zero_grad()  # type: ignore[method-assign]
    install_clip()
    install_scaler()
    return model, ZeroOptimizer(engine)


class _CallableModule(types.ModuleType):
    """`cadence.zero` is both this package and the function: importing any submodule binds the
    package as the attribute `cadence.zero`, so the package itself must be callable."""

    def __call__(
        self, model: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[nn.Module, ZeroOptimizer]:
        return zero(model, *args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
