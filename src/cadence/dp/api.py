"""`data_parallel`: hook a model and its optimizer into scheduled gradient sync."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import nn

if TYPE_CHECKING:
    from cadence.profile import Profile

from cadence.comm import ops as comm
from cadence.comm.process_group import new_group_like_default
from cadence.dp.autotune import load_result
from cadence.dp.config import DPConfig
from cadence.dp.layers import model_layout
from cadence.dp.optimizer import ScheduledOptimizer
from cadence.dp.runtime import SyncEngine
from cadence.dp.tuning import attach_tuner
from cadence.errors import UserError
from cadence.heap import keep_heap


def data_parallel(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    config: DPConfig | None = None,
    profile: Profile | None = None,
) -> tuple[nn.Module, ScheduledOptimizer]:
    """Make `model` and `optimizer` train data-parallel with scheduled gradient sync.

    The process group must already be initialised (like DDP); without one this is a world of
    one. Returns the same model (now hooked, with DDP's `no_sync()`) and an optimizer whose
    `step()` returns at once: each layer is updated as soon as its gradients are reduced, while
    the next forward runs, and each parameter's first use there waits for its update. Call
    `optimizer.flush()` to wait for all of them; evaluation forwards, `model.state_dict()` and
    `optimizer.state_dict()` flush by themselves. Clip with `optimizer.clip_grad_norm_` (or
    torch's, which waits for the reductions while a cadence-dp model exists).
    `profile` (from `cadence.profile.profile_model`) is needed by `autotune="guided"` only.
    """
    config = config or DPConfig()
    _check_supported(model, optimizer)
    if config.compression != "none" and config.autotune != "off":
        raise UserError(
            f"cadence-dp compression ({config.compression}) times differently from what tuning"
            " measures: use autotune='off' with compression, or compression='none' to tune"
        )
    if config.keep_heap:
        keep_heap()
    if config.autotune == "guided" and profile is None and not _loadable(config):
        raise ValueError("autotune='guided' needs a profile of the model (cadence.profile)")
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    group = None
    if world_size > 1:
        with torch.no_grad():  # start from rank 0's weights and buffers, as DDP does
            comm.broadcast_tensors([*model.parameters(), *model.buffers()], src=0)
        # A group of its own: the communication thread never interleaves with the main thread.
        group = new_group_like_default()
    engine = SyncEngine(model_layout(model), optimizer, config, group, world_size, root=model)
    attach_tuner(engine, config, profile, world_size)
    engine.forward_side.handles.append(
        model.register_state_dict_pre_hook(lambda *_args, **_kwargs: engine.flush())
    )
    model._cadence_dp_engine = engine  # type: ignore[assignment]  # keeps it alive with the model
    model.no_sync = engine.forward_side.no_sync  # type: ignore[assignment]  # as DDP's
    # `model.zero_grad()` (Hugging Face's Trainer and many loops call it instead of the
    # optimizer's) must not clear gradients the communication thread is still reducing.
    model.zero_grad = engine.zero_grad  # type: ignore[method-assign]
    return model, ScheduledOptimizer(optimizer, engine)


def _check_supported(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Refuse, in one line each, what the scheduled updates cannot carry out like DDP would."""
    for name, module in model.named_modules():
        if getattr(module, "sparse", False) is True:
            raise UserError(
                f"cadence.data_parallel reduces dense gradients only: build {name or 'the model'}"
                " with sparse=False, or use torch DDP for sparse embedding gradients"
            )
    # Frozen parameters may sit in the optimizer, as torch allows: they get no gradient, so
    # torch's step skips them and so does cadence-dp.
    own = {id(p) for p in model.parameters()}
    foreign = [p for group in optimizer.param_groups for p in group["params"] if id(p) not in own]
    if foreign:
        raise UserError(
            f"the optimizer holds {len(foreign)} parameter(s) that are not parameters of the"
            " model: cadence.data_parallel updates the model's own; build the optimizer over"
            " model.parameters()"
        )


def _loadable(config: DPConfig) -> bool:
    return config.autotune_file is not None and load_result(config.autotune_file) is not None
