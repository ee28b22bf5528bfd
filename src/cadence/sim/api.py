"""Public entry points: predict an iteration of cadence-dp or DDP from a profile."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from cadence.comm.cost import AlphaBeta
from cadence.dp.plan import DPPlan, ParamInfo, build_plan
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.sim.compute import (
    backward_steps,
    block_costs,
    block_params,
    link_model,
    param_blocks,
    reordered_blocks,
)
from cadence.sim.dp_adapter import build_ddp, build_dp
from cadence.sim.engine import run
from cadence.sim.metrics import SimResult, analyse
from cadence.sim.options import SimOptions

DDP_BUCKET_BYTES = 25 * 2**20


def _check(world_size: int, iterations: int) -> None:
    if world_size < 1:
        raise UserError(f"workers must be >= 1, got {world_size}")
    if iterations < 1:
        raise UserError(f"iterations must be >= 1, got {iterations}")


def simulate_dp(
    profile: Profile,
    plan: DPPlan,
    world_size: int,
    link: AlphaBeta | float,
    iterations: int = 2,
    options: SimOptions | None = None,
) -> SimResult:
    """Predict cadence-dp running `plan` on `world_size` workers joined by `link` (an
    `AlphaBeta`, or bytes/s for a latency-free link). One warm-up iteration is simulated,
    then `iterations` measured ones; `iteration_s` is their mean period."""
    _check(world_size, iterations)
    options = options or SimOptions()
    costs = block_costs(profile, options.calibrate_compute)
    built = build_dp(costs, plan, world_size, link_model(link), iterations, options)
    return analyse(built, run(built.graph), sum(costs.param_bytes))


def simulate_ddp(
    profile: Profile,
    world_size: int,
    link: AlphaBeta | float,
    bucket_bytes: int = DDP_BUCKET_BYTES,
    iterations: int = 2,
    params: Sequence[ParamInfo] | None = None,
    options: SimOptions | None = None,
) -> SimResult:
    """Predict torch DDP (ring all-reduce of reverse-order buckets, optimizer step after
    backward). `params` (e.g. `plan.params`) gives exact bucket contents; without it each
    block's parameters count as one tensor."""
    _check(world_size, iterations)
    if bucket_bytes < 1:
        raise UserError(f"bucket size must be >= 1 byte, got {bucket_bytes}")
    options = options or SimOptions()
    costs = block_costs(profile, options.calibrate_compute)
    infos = list(params) if params is not None else block_params(costs)
    built = build_ddp(costs, infos, world_size, link_model(link), bucket_bytes, iterations, options)
    return analyse(built, run(built.graph), sum(costs.param_bytes))


def plan_dp(
    profile: Profile,
    params: Sequence[ParamInfo],
    threshold_bytes: int,
    credit_bytes: int,
    world_size: int,
    link: AlphaBeta | float,
    options: SimOptions | None = None,
    reorder_k: int | None = None,
) -> DPPlan:
    """The plan the runtime would build after warm-up: gradient ready times from the profile's
    backward (reordered at `reorder_k` if given), link rate = all-reduce payload bytes per
    second on `link`."""
    if threshold_bytes < 1 or credit_bytes < 1:
        raise UserError(
            f"threshold and credit must be >= 1 byte, got {threshold_bytes}, {credit_bytes}"
        )
    options = options or SimOptions()
    costs = block_costs(profile, options.calibrate_compute)
    blocks = param_blocks(costs, params)
    num_layers = 1 + max((p.layer for p in params), default=-1)
    layer_block = [0] * num_layers
    for p in params:
        layer_block[p.layer] = blocks[p.index]
    nb = len(costs.forward_s)
    done: dict[int, float] = {}
    clock = 0.0
    for kind, b in backward_steps(nb, reordered_blocks(layer_block, nb, reorder_k)):
        clock += costs.input_grad_s[b] if kind == "I" else costs.weight_grad_s[b]
        if kind == "W":
            done[b] = clock
    ready = [0.0] * len(params)
    for p in params:
        ready[p.index] = done[blocks[p.index]]
    total = sum(p.nbytes for p in params)
    seconds = link_model(link).time("allreduce", "ring", total, world_size)
    rate = total / seconds if seconds > 0 else None
    if reorder_k is None:
        return build_plan(params, threshold_bytes, credit_bytes, ready, rate)
    if "reorder_k" not in {f.name for f in dataclasses.fields(DPPlan)}:
        raise UserError("this cadence.dp has no backward reordering (reorder_k)")
    return build_plan(  # type: ignore[call-arg,unused-ignore]
        params, threshold_bytes, credit_bytes, ready, rate, reorder_k=reorder_k
    )
