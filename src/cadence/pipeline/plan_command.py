"""`cadence plan pipeline`: print the candidate table and the pick for a zoo model.

The parser is built at every `cadence` start, so torch and the simulator load only when the
command runs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from cadence.errors import UserError

if TYPE_CHECKING:
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
    from cadence.sizes import parse_memory_limit

    limit = parse_memory_limit(args.memory_limit)
    counts = parse_counts(args.microbatches)
    link = link_from(args.bandwidth, args.latency, args.payload_fraction)
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1 (got {args.batch_size})")
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
    """The `cadence plan pipeline` parser (called from `sim.cli.add_plan`)."""
    import argparse

    p = psub.add_parser(
        "pipeline",
        help="pipeline schedules and micro-batch splits within a memory limit",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", default="gpt_mini", help="model zoo name")
    p.add_argument("--stages", type=int, default=2, help="pipeline stages")
    p.add_argument("--batch-size", type=int, default=32, help="samples per step (one pipeline)")
    p.add_argument("--bandwidth", default="1gbit", help="link between stages, e.g. 400mbit")
    p.add_argument("--latency", type=float, default=0.0, help="seconds per message (alpha)")
    p.add_argument(
        "--payload-fraction",
        type=float,
        default=1448 / 1514,
        help="share of --bandwidth that carries data (TCP over Ethernet, MTU 1500)",
    )
    p.add_argument("--memory-limit", default=None, help="bytes per stage, e.g. 2GiB")
    p.add_argument(
        "--microbatches", default=None, help="counts to try, e.g. 4,8 (default: every divisor)"
    )
    p.add_argument("--recompute", action="store_true", help="recompute activations in backward")
    p.add_argument("--optimizer", default="adam", help="adam, adamw or sgd (its state's memory)")
    p.add_argument(
        "--profile",
        action="append",
        metavar="FILE",
        help="saved `cadence profile` JSON (repeat for several batch sizes); default: now",
    )
    p.add_argument("--json", default=None, metavar="FILE", help="write the table here")

    def run(args: argparse.Namespace) -> int:
        return plan_pipeline_command(args)

    p.set_defaults(func=run)
