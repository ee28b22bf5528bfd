"""`cadence plan pipeline`: print the candidate table and the pick for a zoo model.

The parser is built at every `cadence` start, so torch and the simulator load only when the
command runs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from cadence.errors import UserError

if TYPE_CHECKING:
    import argparse

    from cadence.comm.cost import AlphaBeta
    from cadence.pipeline.planner import PipelinePlan
    from cadence.profile import Profile


def parse_counts(text: str | None) -> list[int] | None:
    """`"2,4,8"` -> [2, 4, 8]; None or empty -> None (every divisor of the batch)."""
    if not text:
        return None
    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item.isdigit() or int(item) < 1:
            raise UserError(f"bad micro-batch count {item!r}: use positive integers, e.g. 2,4,8")
        out.append(int(item))
    return out


def profiles_for(
    model: str, batch_size: int, smallest_microbatch: int, iterations: int = 3
) -> list[Profile]:
    """Profiles of zoo `model` at the full batch and at the smallest micro-batch (one thread,
    as a rank trains): two sizes give each stage a fixed + per-sample cost."""
    from cadence.pipeline.stages import PIPELINE_BLOCK_TIMING
    from cadence.profile import profile_command

    sizes = sorted({smallest_microbatch, batch_size})
    return [
        profile_command(
            model, batch_size=b, iterations=iterations, echo=lambda _: None,
            block_timing=PIPELINE_BLOCK_TIMING,
        )
        for b in sizes
    ]


def link_from(bandwidth: str, latency_s: float, payload_fraction: float) -> AlphaBeta:
    """The stage-to-stage link of a tc-style `bandwidth` (e.g. 400mbit) and a latency."""
    from cadence.comm.cost import AlphaBeta
    from cadence.netem import parse_bandwidth

    if not (math.isfinite(latency_s) and latency_s >= 0):
        raise UserError(f"--latency must be >= 0 seconds, got {latency_s}")
    if not 0 < payload_fraction <= 1:
        raise UserError(f"--payload-fraction must be in (0, 1], got {payload_fraction}")
    bps = parse_bandwidth(bandwidth)
    beta = 0.0 if math.isinf(bps) else 8.0 / (bps * payload_fraction)
    return AlphaBeta(alpha_s=latency_s, beta_s_per_byte=beta)


def plan_pipeline_command(args: Any) -> int:
    """Plan, print the table and the pick (and write `--json`)."""
    from cadence.pipeline.planner import MAX_MICROBATCHES, plan_pipeline
    from cadence.profile import Profile
    limit = args.memory_limit
    counts = parse_counts(args.microbatches)
    link = link_from(args.bandwidth, args.latency, args.payload_fraction)
    if args.profile:
        profiles = [Profile.load(p, expected_model=args.model) for p in args.profile]
    else:
        largest = max(counts) if counts else min(MAX_MICROBATCHES, args.batch_size)
        smallest = max(1, args.batch_size // largest)
        print(
            f"profiling {args.model} at batch {smallest} and {args.batch_size} (one thread); "
            "pass --profile FILE (repeatable, from `cadence profile --out`) to skip this"
        )
        profiles = profiles_for(args.model, args.batch_size, smallest)
    plan = plan_pipeline(
        profiles,
        stages=args.stages,
        batch_size=args.batch_size,
        link=link,
        memory_limit=limit,
        microbatches=counts,
        recompute=args.recompute,
        optimizer=args.optimizer,
    )
    print(describe(args.model, plan))
    for line in plan.table_lines():
        print(line)
    print(plan.why())
    if args.json:
        from cadence.sim.metrics import write_text

        write_text(args.json, plan.dumps())
    return 0


def describe(model: str, plan: PipelinePlan) -> str:
    rate = plan.bandwidth_bytes_per_s
    net = "free link" if math.isinf(rate) else f"{rate * 8 / 1e6:.0f} Mbit/s payload"
    return (
        f"{model}, batch {plan.batch_size}, {len(plan.ranges)} stages (blocks "
        f"{', '.join(f'{a}..{b - 1}' for a, b in plan.ranges)}), {net}, "
        f"{plan.latency_s * 1e3:g} ms per message"
    )


def add_plan_pipeline(psub: Any) -> None:
    """The `cadence plan pipeline` parser (called from `sim.cli.add_plan`); its flags are
    `cadence train`'s where they mean the same (`--batch-size` is one pipeline's batch: the
    global batch when the pipeline is not replicated)."""
    from cadence.command_options import NetworkModel, PlanOptions, SimulateOptions
    from cadence.config import DataSection, ModelSection, OptimSection, PipelineSection
    from cadence.config_flags import FlagSet, add_flags

    p = psub.add_parser(
        "pipeline", help="pipeline schedules and micro-batch splits within a memory limit"
    )
    add_flags(
        p,
        [
            FlagSet("model", ModelSection, only=("name",), defaults={"name": "gpt_mini"}),
            FlagSet("data", DataSection, only=("batch_size",), defaults={"batch_size": 32}),
            FlagSet("optim", OptimSection, only=("name",)),
            FlagSet("pipeline", PipelineSection, only=("stages", "memory_limit", "recompute")),
            FlagSet(
                "network",
                NetworkModel,
                only=("bandwidth", "latency", "payload_fraction"),
                defaults={"bandwidth": "1gbit"},
            ),
            FlagSet("plan", PlanOptions, only=("microbatch_counts", "profiles")),
            FlagSet("simulate", SimulateOptions, only=("json",)),
        ],
    )

    def run(args: argparse.Namespace) -> int:
        return plan_pipeline_command(args)

    p.set_defaults(func=run)

