"""Public entry points: predict an iteration of cadence-dp or DDP from a profile."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from cadence.comm.cost import AlphaBeta
from cadence.dp.plan import DPPlan, ParamInfo, build_plan
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.sim.compute import (
    block_costs,
    block_params,
    link_model,
    param_blocks,
)
from cadence.sim.dp_adapter import build_ddp, build_dp
from cadence.sim.engine import run
from cadence.sim.grad_ready import point_of, ready_points
from cadence.sim.metrics import SimResult, analyse
from cadence.sim.options import DDP_BUCKET_BYTES, SimOptions


def _check(world_size: int, iterations: int) -> None:
    if world_size < 1:
        raise UserError(f"workers must be >= 1, got {world_size}")
    if iterations < 1:
        raise UserError(f"iterations must be >= 1, got {iterations}")


def _check_buffers(buffer_bytes: int, buffer_broadcasts: int) -> None:
    if buffer_bytes < 0:
        raise UserError(f"buffer bytes must be >= 0, got {buffer_bytes}")
    if buffer_broadcasts < 1:
        raise UserError(f"buffer broadcasts must be >= 1, got {buffer_broadcasts}")


def simulate_dp(
    profile: Profile,
    plan: DPPlan,
    world_size: int,
    link: AlphaBeta | float,
    iterations: int = 2,
    options: SimOptions | None = None,
    buffer_bytes: int = 0,
    buffer_broadcasts: int = 1,
) -> SimResult:
    """Predict cadence-dp running `plan` on `world_size` workers joined by `link` (an
    `AlphaBeta`, or bytes/s for a latency-free link). One warm-up iteration is simulated,
    then `iterations` measured ones; `iteration_s` is their mean period. `buffer_bytes`,
    `buffer_broadcasts`: the model's buffers, broadcast before every forward as under DDP
    (`simulate_ddp`)."""
    _check(world_size, iterations)
    _check_buffers(buffer_bytes, buffer_broadcasts)
    options = options or SimOptions()
    costs = block_costs(profile, options.calibrate_compute)
    built = build_dp(
        costs, plan, world_size, link_model(link), iterations, options, buffer_bytes,
        buffer_broadcasts,
    )  # fmt: skip
    return analyse(built, run(built.graph), sum(costs.param_bytes))


def simulate_ddp(
    profile: Profile,
    world_size: int,
    link: AlphaBeta | float,
    bucket_bytes: int = DDP_BUCKET_BYTES,
    iterations: int = 2,
    params: Sequence[ParamInfo] | None = None,
    options: SimOptions | None = None,
    buffer_bytes: int = 0,
    buffer_broadcasts: int = 1,
    arrival_order: Sequence[int] | None = None,
) -> SimResult:
    """Predict torch DDP (ring all-reduce of buckets, optimizer step after backward).
    `params` (e.g. `plan.params`) gives exact bucket contents; without it each block's
    parameters count as one tensor. `buffer_bytes`: the model's buffers (e.g. BatchNorm's
    running statistics), which DDP broadcasts from rank 0 before every forward, in
    `buffer_broadcasts` calls (one per dtype). `arrival_order` (with `params`; see
    `gradient_arrival_order`): the order DDP rebuilds its buckets in after the first
    iteration; None: reverse registration order."""
    _check(world_size, iterations)
    if bucket_bytes < 1:
        raise UserError(f"bucket size must be >= 1 byte, got {bucket_bytes}")
    _check_buffers(buffer_bytes, buffer_broadcasts)
    options = options or SimOptions()
    costs = block_costs(profile, options.calibrate_compute)
    infos = list(params) if params is not None else block_params(costs)
    built = build_ddp(
        costs, infos, world_size, link_model(link), bucket_bytes, iterations, options,
        buffer_bytes, buffer_broadcasts, arrival_order if params is not None else None,
    )  # fmt: skip
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
    one_chunk_warmup: bool = False,
    arrival_order: Sequence[int] | None = None,
) -> DPPlan:
    """The plan the runtime builds after its warm-up iteration, which it runs with the initial
    plan (expected order, no rates) while timing gradient ready times and the link: the
    warm-up is simulated and the same figures are read off it (ready times from backward
    start; link rate = chunk bytes / time from the first gradient until every chunk and the
    used flags are reduced). With `one_chunk_warmup` (the runtime's default plan), the warm-up
    is one chunk instead and the rate its all-reduce's bytes / duration. `arrival_order`
    (`gradient_arrival_order`): the order one block's gradients reach the runtime's hooks,
    which the simulator times alike."""
    if threshold_bytes < 1 or credit_bytes < 1:
        raise UserError(
            f"threshold and credit must be >= 1 byte, got {threshold_bytes}, {credit_bytes}"
        )
    options = options or SimOptions()
    costs = block_costs(profile, options.calibrate_compute)
    blocks = param_blocks(costs, params)
    whole = max(1, sum(p.nbytes for p in params))
    initial = (
        build_plan(params, whole, whole)
        if one_chunk_warmup
        else build_plan(params, threshold_bytes, credit_bytes, reorder_k=reorder_k)
    )
    # Ready times count from the backward's start: the one backward with gradient hooks.
    one = dataclasses.replace(options, replicas=1, warmup_iterations=0, grad_accum=1)
    warm = simulate_dp(profile, initial, world_size, link, iterations=1, options=one)
    graph, schedule = warm.schedule.graph, warm.schedule
    backward_start = min(
        schedule.start_s[t.id] for t in graph.tasks if t.kind in ("input_grad", "weight_grad")
    )
    points = ready_points(params, blocks, len(costs.forward_s))
    # Pieces that end at no gradient point (input-gradient pieces between points) are left out.
    ends = (
        (point_of(t.name, points.shares), schedule.end_s[t.id] - backward_start)
        for t in graph.tasks
        if t.kind in ("input_grad", "weight_grad") and t.iteration == 0
    )
    grads_done = {point: end for point, end in ends if point is not None}
    ready = [0.0] * len(params)
    for p in params:
        ready[p.index] = grads_done[blocks[p.index], points.point[p.index]]
    first = backward_start + min(ready, default=0.0)  # the first gradient wakes the thread
    # Until every chunk and the used flags are reduced (the updates wait for step()).
    last = max(
        (schedule.end_s[t.id] for t in graph.tasks if t.kind == "complete"), default=first
    )
    if one_chunk_warmup:
        (reduce,) = (t for t in graph.tasks if t.kind == "allreduce" and t.iteration == 0)
        first, last = schedule.start_s[reduce.id], schedule.end_s[reduce.id]
    rate = sum(c.nbytes for c in initial.chunks) / max(last - first, 1e-6)
    return build_plan(
        params, threshold_bytes, credit_bytes, ready, rate, reorder_k, arrival_order
    )
