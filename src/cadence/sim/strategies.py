"""Rank every strategy cadence runs for one model, cluster size and link: `cadence plan strategies`.

All strategies are compared at the same global batch: `workers` x the profile's batch x
`SimOptions.grad_accum`. Data parallel, ZeRO and the parameter server give each worker the
profile's batch (with gradient accumulation N: N of them per step, one gradient sync); a
tensor-parallel group of t ranks computes t workers' batches split t ways; a pipeline of S
stages runs the global batch through S workers (its micro-batches are its accumulation). With
N > 1 the parameter-server row is left out (its simulator does not model accumulation) and so
is tensor parallelism (`cadence train` does not accumulate gradients under it). Data parallel
and DDP are event-simulated (`cadence.sim`), the pipelines, ZeRO and the parameter server too
(each from the plan its executor runs); tensor parallelism is an alpha-beta estimate
(`cadence.sim.estimates`). Each row says which.

Memory per worker is parameters + gradients + optimizer state by ZeRO's formulas (fp32) plus
the activations the profile saw; a row whose memory exceeds `memory_limit` is kept but marked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cadence.dp.plan import default_credit
from cadence.errors import UserError
from cadence.sim.api import DDP_BUCKET_BYTES, plan_dp, simulate_ddp, simulate_dp
from cadence.sim.command import Setup, with_setup
from cadence.sim.compute import BlockCosts, block_costs
from cadence.sim.estimates import (
    Estimate,
    bytes_on_wire,
    state_bytes,
    tp_estimate,
)
from cadence.sim.options import SimOptions
from cadence.sim.zero_graph import ZeroSimPlan, simulate_zero
from cadence.zero.codec_cost import profile_codec

DP_THRESHOLDS = (1 << 20, 4 << 20, 16 << 20)
SIMULATED = "simulated"
ALPHA_BETA = "alpha-beta"
FOLDED = "simulated, folded"
PS_FULL_WORKERS = 64
"""Up to this many workers the parameter-server row simulates every host; above, the folded
cluster standing for them (`cadence.sim.ps_adapter`, `fold`): an estimate, marked FOLDED."""


@dataclass(frozen=True)
class Candidate:
    """One strategy with its settings and what is predicted for it."""

    strategy: str
    """Name as `cadence train --strategy` spells it (plus tp / tp x dp)."""
    setting: str
    """Its settings, e.g. "stage 2, onebit"."""
    iteration_s: float
    """Predicted seconds per iteration of the global batch."""
    memory_bytes: int
    """Predicted peak bytes per worker: model state + activations."""
    wire_bytes: float
    """Bytes on one worker's link per iteration."""
    method: str
    """SIMULATED (event simulator), FOLDED (event simulator of a folded cluster standing for
    a larger one) or ALPHA_BETA (closed-form estimate)."""

    def row(self, memory_limit: int | None) -> dict[str, Any]:
        fits = memory_limit is None or self.memory_bytes <= memory_limit
        return {**dataclasses.asdict(self), "fits": fits}


def _activations(costs: BlockCosts) -> int:
    return sum(costs.activation_bytes)


def _data_parallel(setup: Setup, costs: BlockCosts, options: SimOptions) -> list[Candidate]:
    n, p = setup.world_size, sum(costs.param_bytes)
    memory = state_bytes(p, 2, "replicated", n) + _activations(costs)
    ddp = simulate_ddp(
        setup.profile, n, setup.link, DDP_BUCKET_BYTES, 3, setup.params, options,
        setup.buffer_bytes, setup.buffer_broadcasts, setup.arrival_order,
    )  # fmt: skip
    rows = [Candidate("ddp", "25 MiB buckets", ddp.iteration_s, memory, ddp.wire_bytes, SIMULATED)]
    best = None
    for threshold in DP_THRESHOLDS:
        plan = plan_dp(
            setup.profile,
            setup.params,
            threshold,
            default_credit(threshold, p),
            n,
            setup.link,
            options,
            arrival_order=setup.arrival_order,
        )
        result = simulate_dp(
            setup.profile, plan, n, setup.link, 3, options, setup.buffer_bytes,
            setup.buffer_broadcasts,
        )  # fmt: skip
        if best is None or result.iteration_s < best[0].iteration_s:
            best = (result, threshold)
    assert best is not None
    setting = f"threshold {best[1] >> 20} MiB"
    rows.append(
        Candidate("cadence-dp", setting, best[0].iteration_s, memory, best[0].wire_bytes, SIMULATED)
    )
    return rows


REPLICATED_FRONT = 0.3
"""The partial replicated update `cadence plan` ranks: the front blocks within 30% of the
parameters, whose gathers the next forward waits for first."""


def _zero(setup: Setup, costs: BlockCosts, options: SimOptions) -> list[Candidate]:
    n, p = setup.world_size, sum(costs.param_bytes)
    rows = []
    largest = max(costs.param_bytes)
    codec = profile_codec(setup.profile)
    # (stage, compression, replicated share): 0 gathers every block from its owners.
    variants = [(s, c, 0.0) for s in (1, 2, 3) for c in ("none", "onebit")]
    variants += [(s, "onebit", share) for share in (1.0, REPLICATED_FRONT) for s in (1, 2)]
    for stage, compression, share in variants:
        # A partial share pays only when each block's forward waits for its own gather.
        partial = 0 < share < 1
        knobs = ZeroSimPlan(stage=stage, compression=compression, replicated_update=share > 0,
                            replicated_share=share, overlap_gather=partial)  # fmt: skip
        plan = knobs.zero_plan(costs, n)  # what the executor would do, unit by unit
        # (the adapter prices the codec only where a plan has one: onebit)
        result = simulate_zero(
            costs, plan, n, setup.link, 3, setup.update_s_per_byte, codec, options.grad_accum,
            options.clip, setup.buffer_bytes, setup.buffer_broadcasts, options.host_cpu_share,
        )  # fmt: skip
        memory = state_bytes(p, 2, f"zero{stage}", n) + _activations(costs)
        if stage == 3:
            memory += 2 * largest  # a block gathered plus the next one prefetched
        # The replicated units' frozen Adam denominator, fp32.
        memory += sum(u.nbytes for u in plan.units if u.replicated)
        setting = f"stage {stage}, {compression}"
        if partial:
            setting += f", overlap, replicated front {share:.0%}"
        elif share:
            setting += ", replicated update"
        rows.append(
            Candidate("zero", setting, result.iteration_s, memory, result.wire_bytes, SIMULATED)
        )
    return rows


def _row(strategy: str, setting: str, est: Estimate, memory: int) -> Candidate:
    return Candidate(strategy, setting, est.iteration_s, memory, est.wire_bytes, ALPHA_BETA)


def _ps(setup: Setup, costs: BlockCosts, options: SimOptions) -> list[Candidate]:
    """One server per worker host (the same machine count as the other strategies), on the
    plan `cadence train --strategy ps --servers N` makes for the model's parameters,
    event-simulated with each host's link and processor shared by its worker and its server
    (`cadence.sim.ps_adapter`, `shared_hosts`); above `PS_FULL_WORKERS` workers, folded
    (one host per group of alike servers, at least `FOLD_HOSTS`)."""
    from cadence.ps.config import PSConfig
    from cadence.ps.serving_cost import recorded_serving
    from cadence.sim.ps_adapter import host_bytes, runtime_plan, simulate_ps

    n, p = setup.world_size, sum(costs.param_bytes)
    memory = state_bytes(p, 2, "ps-worker", n) + _activations(costs)
    runtime = PSConfig(servers=n, workers=n)
    plan = runtime_plan(costs, n, runtime.order, runtime.slice_bytes, setup.params)
    fold = n > PS_FULL_WORKERS
    result = simulate_ps(
        setup.profile, workers=n, link=setup.link, iterations=3, options=options, plan=plan,
        shared_hosts=True, fold=fold, arrival_order=setup.arrival_order,
        serving=recorded_serving(setup.profile),
    )  # fmt: skip
    wire = max(host_bytes(plan, n))  # worker 0's busier direction
    setting = f"{n} servers, one per worker host, bsp"
    method = FOLDED if fold else SIMULATED
    return [Candidate("ps", setting, result.iteration_s, memory, wire, method)]


def _tensor(setup: Setup, costs: BlockCosts, update_s: float, model_name: str) -> list[Candidate]:
    """TP over all workers, and TP=2 x DP when the count allows; gpt models only."""
    from cadence.models import get_model_spec

    spec = get_model_spec(model_name)
    if spec.task != "next_token":  # the zoo's transformers are its next-token models: no
        return []  # need to import torch and build the others to find they are not
    from cadence.tp import gpt_tp_plan, predict_comm_s
    from cadence.tp.transformer import gpt_parts

    model = spec.build()
    try:
        gpt_parts(model)
    except Exception:  # noqa: BLE001 - not a transformer: no tensor-parallel candidate
        return []
    n, p = setup.world_size, sum(costs.param_bytes)
    batch, seq = setup.profile.batch_size, setup.profile.input_shape[0]
    rows = []
    for tp in sorted({n, 2} if n >= 4 and n % 2 == 0 else {n}):
        if tp < 2:
            continue
        dp = n // tp
        comm = predict_comm_s(gpt_tp_plan(model, batch * tp, seq, tp), setup.link, tp)
        est = tp_estimate(costs, setup.link, comm, tp, dp, update_s)
        memory = state_bytes(p, 2, "sharded", tp) + _activations(costs)
        name = "tp" if dp == 1 else "tp x dp"
        rows.append(_row(name, f"tp {tp}" + (f" x dp {dp}" if dp > 1 else ""), est, memory))
    return rows


def _pipeline(
    setup: Setup, costs: BlockCosts, memory_limit: int | None, grad_accum: int = 1
) -> list[Candidate]:
    """All workers as stages, and 2 stages x data parallel over the rest, each with the
    planner's pick (schedule and micro-batches); the replicas' all-reduce of a stage's
    gradients starts once its last backward is done, so it is added whole. With gradient
    accumulation N, each worker's share of the global batch is N profile batches."""
    from cadence.pipeline.planner import plan_pipeline
    from cadence.sim.pipeline_adapter import simulate_pipeline

    n, batch = setup.world_size, setup.profile.batch_size * grad_accum
    rows = []
    for stages in sorted({n, 2} if n >= 4 and n % 2 == 0 else {n}):
        if stages > len(costs.forward_s):
            continue
        replicas = n // stages
        try:
            plan = plan_pipeline(
                setup.profile,
                stages=stages,
                batch_size=batch * stages,
                link=setup.link,
                memory_limit=memory_limit,
                update_s_per_byte=setup.update_s_per_byte,
            )
        except UserError:
            continue  # cannot be cut into this many stages, or no schedule fits the limit
        pick = plan.best
        result = simulate_pipeline(
            setup.profile,
            stages=stages,
            microbatches=pick.microbatches,
            schedule=pick.schedule,
            link=setup.link,
            batch_size=batch * stages,
            ranges=plan.ranges,
            update_s_per_byte=setup.update_s_per_byte,
        )
        stage_bytes = max(sum(costs.param_bytes[lo:hi]) for lo, hi in plan.ranges)
        sync = setup.link.time("allreduce", "ring", stage_bytes, replicas)
        # Priced on cadence's runtime, which `cadence train` runs with --schedule auto or
        # --pipeline-backend cadence (a named schedule alone may run on torch's runtime).
        setting = f"{stages} stages, {pick.schedule} x {pick.microbatches}, cadence runtime"
        name = "pipeline" if replicas == 1 else "pipeline x dp"
        if replicas > 1:
            setting += f", x dp {replicas}"
        wire = result.wire_bytes + bytes_on_wire(sync, setup.link)
        memory = max(pick.peak_bytes)
        seconds = result.iteration_s + sync
        rows.append(Candidate(name, setting, seconds, memory, wire, SIMULATED))
    return rows


def rank_strategies(
    setup: Setup,
    model_name: str,
    options: SimOptions | None = None,
    memory_limit: int | None = None,
) -> list[Candidate]:
    """Every candidate for `setup`, fastest first; `memory_limit` (bytes per worker) makes the
    pipeline planner pick the fastest schedule that fits."""
    options = with_setup(options or SimOptions(), setup)
    costs = block_costs(setup.profile, options.calibrate_compute)
    update_s = setup.update_s_per_byte * sum(costs.param_bytes)
    rows = _data_parallel(setup, costs, options)
    if setup.world_size > 1:
        rows += _zero(setup, costs, options)
        if options.grad_accum == 1:
            rows += _ps(setup, costs, options)
            rows += _tensor(setup, costs, update_s, model_name)
        rows += _pipeline(setup, costs, memory_limit, options.grad_accum)
    # Equal predicted times (all compute-bound, say): the one holding less memory first.
    return sorted(rows, key=lambda c: (round(c.iteration_s, 9), c.memory_bytes))


def best_fitting(rows: Sequence[Candidate], memory_limit: int | None) -> Candidate | None:
    """The fastest candidate within the memory limit (None if none fits)."""
    return next((c for c in rows if c.row(memory_limit)["fits"]), None)


def why(rows: Sequence[Candidate], memory_limit: int | None) -> str:
    """One sentence on the pick."""
    best = best_fitting(rows, memory_limit)
    if best is None:
        assert memory_limit is not None  # without a limit everything fits
        smallest = min(rows, key=lambda c: c.memory_bytes)
        return (
            f"nothing fits {memory_limit / 2**20:.0f} MiB per worker; the smallest is "
            f"{smallest.strategy} ({smallest.setting}) at {smallest.memory_bytes / 2**20:.0f} MiB"
        )
    ddp = next(c for c in rows if c.strategy == "ddp")
    text = f"pick {best.strategy} ({best.setting}): {best.iteration_s * 1e3:.1f} ms per iteration"
    if best is not ddp:
        text += f", {ddp.iteration_s / best.iteration_s:.2f}x ddp's speed"
        if not ddp.row(memory_limit)["fits"]:
            text += f" (ddp needs {ddp.memory_bytes / 2**20:.0f} MiB per worker, over the limit)"
    skipped = [c for c in rows if c.iteration_s < best.iteration_s]
    if skipped:
        text += f"; {len(skipped)} faster candidate(s) exceed the memory limit"
    return text
