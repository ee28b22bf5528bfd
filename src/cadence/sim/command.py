"""`cadence simulate` and `cadence plan dp`: predictions for a zoo model from a profile."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cadence.comm.cost import AlphaBeta
from cadence.command_options import SIM_STRATEGIES
from cadence.dp.config import mb_to_bytes
from cadence.dp.plan import (
    DEFAULT_ONE_CHUNK_WIRE_SHARE,
    DPPlan,
    ParamInfo,
    default_credit,
    default_threshold,
    one_chunk_suffices,
)
from cadence.errors import UserError
from cadence.models import get_model_spec
from cadence.profile import Profile
from cadence.profile.facts import zoo_facts
from cadence.sim.api import DDP_BUCKET_BYTES, plan_dp, simulate_ddp, simulate_dp
from cadence.sim.compute import block_costs
from cadence.sim.host_cpu import compute_share, describe
from cadence.sim.metrics import SimResult
from cadence.sim.options import SimOptions, ddp_bucket_caps
from cadence.sim.stepcost import (
    TCP_PAYLOAD_FRACTION,
    check_step,
    chosen_step_s,
    step_s_per_byte,
)
from cadence.sim.zero_graph import ZeroSimPlan, codec_lines, simulate_zero
from cadence.sizes import parse_size
from cadence.zero.codec_cost import profile_codec

STRATEGIES = SIM_STRATEGIES


@dataclass(frozen=True, kw_only=True)
class Setup:
    """A model, its profile and parameters, and the cluster to predict for."""

    profile: Profile
    """Per-block costs."""
    params: tuple[ParamInfo, ...]
    """The model's parameters as the data-parallel runtime sees them."""
    world_size: int
    """Workers."""
    link: AlphaBeta
    """Network model of each worker's link."""
    description: str
    """One line naming model, workers and link, for headers."""
    update_s_per_byte: float = 0.0
    """Optimizer-step seconds per parameter byte."""
    buffer_bytes: int = 0
    """Bytes of the model's buffers (BatchNorm's running statistics and counters), which DDP
    broadcasts from rank 0 before every forward; 0: none."""
    buffer_broadcasts: int = 1
    """Broadcast calls DDP makes for those buffers: one per dtype (`zoo_buffer_broadcasts`)."""
    arrival_order: tuple[int, ...] | None = None
    """Indices of `params` in the order one backward pass accumulates their gradients
    (`zoo_arrival_order`): how the runtime fuses one block's gradients into chunks and DDP
    fills its buckets. None: the expected order (reverse registration)."""
    assumed: str = ""
    """What the prediction assumed of the links and where the compute times came from, for
    the user (`assumptions`)."""


def zoo_buffer_broadcasts(model: str) -> int:
    """How many broadcasts DDP makes for zoo `model`'s buffers before each forward: torch
    buckets them by dtype, one call each (BatchNorm: float statistics and an int64 counter);
    1 for a model without buffers (nothing is sent then)."""
    return zoo_facts(model).buffer_broadcasts


def zoo_arrival_order(model: str) -> tuple[int, ...]:
    """The order zoo `model`'s gradients arrive in one backward pass (`gradient_arrival_order`
    on a batch of two synthetic samples): the same on every batch, since it follows the graph."""
    return zoo_facts(model).arrival_order


def model_params(model: str) -> tuple[ParamInfo, ...]:
    """Zoo `model`'s parameters as cadence.dp lays them out (what its plans index)."""
    return zoo_facts(model).params


def zoo_layout(model: str) -> tuple[tuple[ParamInfo, ...], int]:
    """Zoo `model`'s parameters as cadence.dp lays them out (what its plans index), and the
    bytes of its buffers (what DDP broadcasts before each forward)."""
    facts = zoo_facts(model)
    return facts.params, facts.buffer_bytes


def make_setup(
    *,
    model: str,
    workers: int,
    bandwidth: str,
    latency_s: float = 0.0,
    payload_fraction: float = TCP_PAYLOAD_FRACTION,
    optimizer: str = "adam",
    optimizer_step_s: float | None = None,
    calibration: str | None = None,
    calibration_latency: str = "by-size",
    profile_path: str | None = None,
    batch_size: int = 32,
    profile_iterations: int = 5,
    echo: Callable[[str], None] = print,
    threads: int | None = None,
) -> Setup:
    """Check the arguments (one-line UserErrors), then load or measure the profile (measured
    now at `threads` intra-op threads, each training worker's; None: 1)."""
    from cadence.netem import format_bandwidth, parse_bandwidth

    if workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    if not (math.isfinite(latency_s) and latency_s >= 0):
        raise UserError(f"--latency must be >= 0 seconds, got {latency_s}")
    if not 0 < payload_fraction <= 1:
        raise UserError(f"--payload-fraction must be in (0, 1], got {payload_fraction}")
    bps = parse_bandwidth(bandwidth)
    check_step(optimizer, optimizer_step_s)  # before any profiling
    get_model_spec(model)  # unknown names: a UserError listing the zoo
    if calibration is not None:
        from cadence.comm.calibration import calibrated_link

        link = calibrated_link(calibration, calibration_latency)
        own = "".join(f", {c} alpha {a * 1e6:.0f} us" for c, a in link.collective_alphas)
        own += "".join(f", cadence {c} alpha {a * 1e6:.0f} us" for c, a in link.p2p_alphas)
        sized = ", all-reduce latency by size" if link.allreduce_alphas else ""
        net = f"calibrated link ({calibration}{own}{sized})"
    else:
        link = AlphaBeta.from_bandwidth(bps * payload_fraction, alpha_s=latency_s)
        net = f"{format_bandwidth(bps)} links" + (
            f", {latency_s * 1e6:g} us latency" * (latency_s > 0)
        )
    if profile_path is not None:
        profile = Profile.load(profile_path, expected_model=model)
    else:
        from cadence.profile import profile_command

        echo(
            f"profiling {model} (batch {batch_size}, {profile_iterations} iterations); "
            "save it with `cadence profile --out FILE` and pass --profile to skip this"
        )
        profile = profile_command(
            model, batch_size=batch_size, iterations=profile_iterations, echo=lambda _: None,
            threads=threads or 1,
        )  # fmt: skip
    # Saved with the profile where it was made (no model to build then), else found now.
    facts = profile.model_facts or zoo_facts(model)
    params = facts.params
    # The step as it ran where the profile was made (a GPU's, not this machine's CPU's).
    optimizer_step_s = chosen_step_s(optimizer, optimizer_step_s, profile.optimizer_step_s)
    update = step_cost(model, optimizer, optimizer_step_s, params)
    description = (
        f"{model}, batch {profile.batch_size} per worker, {workers} workers, {net}, "
        f"{optimizer} step {update * sum(p.nbytes for p in params) * 1e3:.3g} ms"
    )
    if calibration is None:
        net = (
            f"alpha-beta: {format_bandwidth(bps)} x payload fraction {payload_fraction:.3f}, "
            + (f"{latency_s * 1e6:g} us per message" if latency_s > 0 else "no per-message latency")
            + " (to measure your links: `cadence calibrate --out links.json` under torchrun on "
            "your hosts, then --calibration links.json)"
        )
    else:
        net = f"measured by `cadence calibrate` ({calibration})"
    return Setup(
        profile=profile,
        params=params,
        world_size=workers,
        link=link,
        assumed=f"{assumptions(net, profile, profile_path, threads)}; {describe(profile, link)}",
        description=description,
        update_s_per_byte=update,
        buffer_bytes=facts.buffer_bytes,
        buffer_broadcasts=facts.buffer_broadcasts,
        arrival_order=facts.arrival_order,
    )


def assumptions(link: str, profile: Profile, path: str | None, threads: int | None) -> str:
    """One line: the link model, and where the compute times came from, in what conditions
    (threads, batch), and whether they are the training's (`threads`: each worker's intra-op
    threads, None: not given)."""
    where = f"{profile.threads} thread(s), batch {profile.batch_size} per worker"
    if profile.neighbours:
        where += f", beside {profile.neighbours} training process(es)"
        if profile.pace_factor != 1:
            where += f", times x{profile.pace_factor:.2f} to steps started together"
    if path is None:
        compute = f"profiled now on this machine ({profile.device}) at {where}"
    else:
        import os
        import time

        made = time.strftime("%Y-%m-%d %H:%M", time.localtime(os.path.getmtime(path)))
        compute = f"from {path} (saved {made}, {profile.device}, {where})"
    if threads is None:
        compute += "; training's threads per worker not given (--threads): assumed the same"
    elif threads != profile.threads:
        compute += (
            f"; NOT the training's conditions: its workers run {threads} thread(s) "
            f"(profile again with `cadence profile --threads {threads}`)"
        )
    return f"link {link}; compute: {compute}"


def step_cost(
    model: str, optimizer: str, step_s: float | None, params: Sequence[ParamInfo]
) -> float:
    """Seconds per parameter byte: from a given whole-model step time, or measured now."""
    check_step(optimizer, step_s)
    if step_s is None:
        return step_s_per_byte(model, optimizer)
    return step_s / max(1, sum(p.nbytes for p in params))


DEFAULT_PLANS = ("choose", "one chunk", "chunked")
"""How `run_strategy` settles cadence-dp's default plan (see there)."""


def with_setup(options: SimOptions, setup: Setup) -> SimOptions:
    """`options` with what the setup decides: the optimizer step's cost, and the share of
    communication's processor time the compute pays on the profiled host
    (`cadence.sim.host_cpu.compute_share`)."""
    return dataclasses.replace(
        options,
        update_s_per_byte=setup.update_s_per_byte,
        host_cpu_share=compute_share(setup.profile),
    )


def run_strategy(
    setup: Setup,
    strategy: str,
    threshold_bytes: int | None,
    credit_bytes: int | None,
    bucket_bytes: int,
    options: SimOptions,
    iterations: int = 3,
    reorder_k: int | None = None,
    zero: ZeroSimPlan | None = None,
    dp_plan: DPPlan | None = None,
    default_plan: str = "choose",
) -> tuple[SimResult, DPPlan | None]:
    """Simulate one strategy; cadence-dp runs `dp_plan` (a plan a run recorded) or else is
    planned the way the runtime replans after warm-up, at `threshold_bytes` (None: the
    runtime's default for the model); zero runs `zero` (default: stage 2, no compression).
    `default_plan` (no threshold or K given): "choose" one chunk or chunks as the runtime does
    after its one-chunk iterations, or take a run's recorded choice, "one chunk" or "chunked"."""
    if default_plan not in DEFAULT_PLANS:
        raise ValueError(f"default_plan must be one of {DEFAULT_PLANS}, got {default_plan!r}")
    options = with_setup(options, setup)
    if strategy == "zero":
        zero = zero or ZeroSimPlan(stage=2)
        zero_result = simulate_zero(
            block_costs(setup.profile, options.calibrate_compute),
            zero,
            setup.world_size,
            setup.link,
            iterations,
            setup.update_s_per_byte,
            profile_codec(setup.profile) if zero.compression == "onebit" else None,
            options.grad_accum,
            options.clip,
            setup.buffer_bytes,
            setup.buffer_broadcasts,
            options.host_cpu_share,
        )
        return zero_result, None
    if strategy == "ddp":
        result = simulate_ddp(
            setup.profile,
            setup.world_size,
            setup.link,
            bucket_bytes,
            iterations,
            setup.params,
            options,
            setup.buffer_bytes,
            setup.buffer_broadcasts,
            setup.arrival_order,
        )
        return result, None
    if strategy != "cadence-dp":
        raise UserError(f"unknown strategy {strategy!r}; accepted: {', '.join(STRATEGIES)}")
    if dp_plan is not None:
        return _simulate_dp(setup, dp_plan, iterations, options), dp_plan
    gradient_bytes = sum(p.nbytes for p in setup.params)
    # The runtime's own default plan is chosen after timed one-chunk iterations.
    default = threshold_bytes is None and reorder_k is None
    if default and default_plan == "one chunk":  # the recorded choice: no chunked plan needed
        return _one_chunk(setup, gradient_bytes, iterations, options)
    if threshold_bytes is None:
        threshold_bytes = default_threshold(gradient_bytes)
    if credit_bytes is None:
        credit_bytes = default_credit(threshold_bytes, gradient_bytes)
    plan = plan_dp(
        setup.profile,
        setup.params,
        threshold_bytes,
        credit_bytes,
        setup.world_size,
        setup.link,
        options,
        reorder_k,
        one_chunk_warmup=default,
        arrival_order=setup.arrival_order,
    )
    if default and default_plan == "choose":
        result, one = _one_chunk(setup, gradient_bytes, iterations, options)
        reduce_s = last_allreduce_s(result)
        share = DEFAULT_ONE_CHUNK_WIRE_SHARE
        if one_chunk_suffices(reduce_s, result.iteration_s, len(plan.chunks), share):
            return result, one
    return _simulate_dp(setup, plan, iterations, options), plan


def _one_chunk(
    setup: Setup, gradient_bytes: int, iterations: int, options: SimOptions
) -> tuple[SimResult, DPPlan]:
    """cadence-dp's default plan when the runtime keeps one chunk: every gradient in one
    all-reduce, and the simulation of it."""
    whole = max(1, gradient_bytes)
    one = plan_dp(setup.profile, setup.params, whole, whole, setup.world_size, setup.link, options)
    return _simulate_dp(setup, one, iterations, options), one


def _simulate_dp(setup: Setup, plan: DPPlan, iterations: int, options: SimOptions) -> SimResult:
    """cadence-dp running `plan` on `setup`'s cluster, its model's buffers broadcast per forward."""
    return simulate_dp(
        setup.profile, plan, setup.world_size, setup.link, iterations, options,
        setup.buffer_bytes, setup.buffer_broadcasts,
    )  # fmt: skip


def last_allreduce_s(result: SimResult) -> float:
    """How long the last simulated iteration's (one) all-reduce took: what the runtime times
    in its one-chunk iterations."""
    schedule = result.schedule
    reduce = max(
        (t for t in schedule.graph.tasks if t.kind == "allreduce"),
        key=lambda t: (t.iteration, schedule.end_s[t.id]),
    )
    return schedule.end_s[reduce.id] - schedule.start_s[reduce.id]


def result_lines(result: SimResult) -> list[str]:
    ms = 1e3
    return [
        f"predicted iteration {result.iteration_s * ms:.1f} ms  "
        f"(compute {result.compute_s * ms:.1f} ms, optimizer {result.update_s * ms:.1f} ms, "
        f"wire {result.wire_s * ms:.1f} ms, "
        f"bound {result.bound_s * ms:.1f} ms, "
        f"ratio {result.iteration_s / max(result.bound_s, 1e-30):.3f})",
        f"overlap {result.overlap_ratio:.2f}, efficiency E {result.efficiency:.2f}, "
        f"peak memory {result.peak_memory_bytes / 1e6:.1f} MB per worker, "
        f"{result.wire_bytes / 1e6:.1f} MB on each NIC per iteration",
        *codec_lines(result),
    ]


def rank_dp(
    setup: Setup,
    thresholds: Sequence[int],
    options: SimOptions,
    bucket_bytes: int = DDP_BUCKET_BYTES,
    reorder_ks: Sequence[int | None] = (None,),
) -> list[dict[str, Any]]:
    """DDP, and cadence-dp at each threshold and reordering point, fastest first (ties: in
    the order tried)."""
    rows: list[dict[str, Any]] = []
    ddp, _ = run_strategy(setup, "ddp", 0, None, bucket_bytes, options)
    rows.append({"strategy": "ddp", "setting": f"bucket {_fmt(bucket_bytes)}", **ddp.summary()})
    for k in reorder_ks:
        for threshold in thresholds:
            result, plan = run_strategy(
                setup, "cadence-dp", threshold, None, bucket_bytes, options, reorder_k=k
            )
            assert plan is not None
            setting = f"threshold {_fmt(threshold)}, credit {_fmt(plan.credit_bytes)}"
            rows.append(
                {
                    "strategy": "cadence-dp",
                    "setting": setting + ("" if k is None else f", K {k}"),
                    "threshold_bytes": threshold,
                    "reorder_k": k,
                    "chunks": len(plan.chunks),
                    **result.summary(),
                }
            )
    rows.sort(key=lambda r: round(r["iteration_time_s"], 6))  # a tie keeps the order tried
    return rows


def parse_reorder_ks(text: str) -> list[int | None]:
    """`none,1,8` -> [None, 1, 8]; K must be a positive layer number."""
    out: list[int | None] = []
    for item in (t.strip().lower() for t in text.split(",")):
        if item == "none":
            out.append(None)
        elif item.isdigit() and int(item) >= 1:
            out.append(int(item))
        elif item:
            raise UserError(f"bad reordering point {item!r}: use 'none' or a layer number >= 1")
    return out or [None]


def why(rows: Sequence[dict[str, Any]]) -> str:
    """One sentence on the winner against DDP."""
    best = rows[0]
    ddp = next(r for r in rows if r["strategy"] == "ddp")
    if best is ddp:
        return (
            f"ddp is fastest: nothing left to overlap (ratio to bound {ddp['ratio_to_bound']:.3f})"
        )
    gain = 1 - best["iteration_time_s"] / ddp["iteration_time_s"]
    return (
        f"best: {best['strategy']} ({best['setting']}), {gain * 100:.1f}% faster than ddp: "
        f"it overlaps {best['overlap_ratio'] * 100:.0f}% of the wire time with compute "
        f"(ddp {ddp['overlap_ratio'] * 100:.0f}%), {best['ratio_to_bound']:.3f}x the bound "
        f"(its busiest resource: compute + optimizer, or wire) vs {ddp['ratio_to_bound']:.3f}x"
    )


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [f"{'strategy':<11}{'setting':<32}{'iter ms':>9}{'x bound':>9}{'overlap':>9}{'E':>7}"]
    for r in rows:
        lines.append(
            f"{r['strategy']:<11}{r['setting']:<32}{r['iteration_time_s'] * 1e3:>9.1f}"
            f"{r['ratio_to_bound']:>9.3f}{r['overlap_ratio']:>9.2f}{r['efficiency']:>7.2f}"
        )
    return lines


def _fmt(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g}{unit}"
    return f"{nbytes}B"


def setup_from(args: Any, workers: int | None = None, bandwidth: str | None = None) -> Setup:
    """The Setup the simulator commands' shared flags describe (`workers`/`bandwidth` override
    theirs, e.g. for one cell of `cadence plan map`)."""
    model = args.model
    if args.profile is not None and "model" not in getattr(args, "_given", {"model"}):
        from cadence.profile import Profile

        model = args.model = Profile.load(args.profile).model  # no --model: the profile's
    return make_setup(
        model=model,
        workers=args.workers if workers is None else workers,
        bandwidth=args.bandwidth if bandwidth is None else bandwidth,
        latency_s=args.latency,
        payload_fraction=args.payload_fraction,
        optimizer=args.optimizer,
        optimizer_step_s=args.optimizer_step,
        calibration=args.calibration,
        calibration_latency=args.calibration_latency,
        profile_path=args.profile,
        batch_size=args.micro_batch_size,
        profile_iterations=args.profile_iterations,
        threads=getattr(args, "threads", None),
    )


def sim_options(args: Any) -> SimOptions:
    """The `SimOptions` the simulator commands' shared flags set."""
    _, first_bucket = ddp_bucket_caps(getattr(args, "bucket_mb", None))
    return SimOptions(
        replicas=args.replicas,
        grad_accum=args.grad_accum,
        clip=args.clip,
        dp_compression=getattr(args, "dp_compression", "none"),  # `simulate` has the flag
        ddp_first_bucket_bytes=first_bucket,
    )


def accumulation_note(options: SimOptions) -> str:
    """For a setup's header line: the micro-batches per step, when there are several."""
    n = options.grad_accum
    return f", {n} micro-batches per step (gradient accumulation)" if n > 1 else ""


def simulate_command(args: Any) -> int:
    """`cadence simulate`: predict one strategy, print it, write the requested files."""
    threshold = mb_to_bytes(args.threshold_mb)
    credit = mb_to_bytes(args.credit_mb)
    bucket, _ = ddp_bucket_caps(args.bucket_mb)
    options = sim_options(args)
    setup = setup_from(args)
    reorder_k = args.reorder_k
    zero = ZeroSimPlan(stage=args.zero_stage, compression=args.compression)
    result, plan = run_strategy(
        setup, args.strategy, threshold, credit, bucket, options, args.iterations, reorder_k, zero
    )
    shown = args.strategy
    if args.strategy == "zero":
        shown += f" stage {zero.stage}, {zero.compression}"
    print(f"{shown}: {setup.description}{accumulation_note(options)}")
    print(f"assumed: {setup.assumed}")
    if plan is not None:
        n = len(plan.chunks)
        print(
            f"plan: {n} chunk{'s' if n != 1 else ''}, threshold {_fmt(plan.threshold_bytes)}, "
            f"credit {_fmt(plan.credit_bytes)}, reordering K {reorder_k or 'none'}"
        )
        if n == 1 and threshold is None and reorder_k is None:
            print(
                f"  (the default plan stays one chunk: its chunks could hide less than "
                f"{DEFAULT_ONE_CHUNK_WIRE_SHARE:.0%} of an iteration)"
            )
    for line in result_lines(result):
        print(line)
    if args.trace:
        result.write_trace(args.trace)
        print(f"trace: {args.trace} (open in https://ui.perfetto.dev)")
    if args.png:
        result.write_png(args.png)
        print(f"timeline: {args.png}")
    if args.json:
        result.write_json(args.json, {"model": args.model, "setup": setup.description})
    return 0


def plan_command(args: Any) -> int:
    """`cadence plan dp`: rank DDP and cadence-dp thresholds by predicted iteration time."""
    thresholds = [parse_size(t, "--thresholds") for t in args.thresholds.split(",") if t.strip()]
    if not thresholds:
        raise UserError("--thresholds needs at least one size, e.g. 1mib,4mib")
    options = sim_options(args)
    setup = setup_from(args)
    ks = parse_reorder_ks(args.reorder_ks)
    bucket, _ = ddp_bucket_caps(args.bucket_mb)
    rows = rank_dp(setup, thresholds, options, bucket, ks)
    print(setup.description + accumulation_note(options))
    for line in table_lines(rows):
        print(line)
    print(why(rows))
    if args.json:
        from cadence.sim.metrics import write_text

        data = {
            "model": args.model,
            "setup": setup.description,
            "best": rows[0],
            "rows": rows,
            "why": why(rows),
        }
        write_text(args.json, json.dumps(data, indent=2) + "\n")
    return 0
