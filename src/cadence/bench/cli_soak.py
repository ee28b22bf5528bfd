"""`cadence bench soak`'s parser. Its command function imports the benchmark lazily so
`cadence --help` stays fast."""

from __future__ import annotations

import argparse
from typing import Any

from cadence.bench.cli_args import add_common, command_line, names


def _cmd_soak(args: argparse.Namespace) -> int:
    from cadence.bench.cli_args import one
    from cadence.bench.soak import SoakBenchConfig, run_soak_bench

    config = SoakBenchConfig(
        strategies=names(args.strategies),
        model=one(args.models, "--models"),
        cap=one(args.caps, "--caps"),
        contention=args.contention == "on",
        workers=args.workers,
        batch_size=args.batch_size,
        steps=args.steps,
        start_step=args.start_step,
        every=args.every,
        time_limit_s=args.time_limit,
        out=args.out,
    )
    run_soak_bench(config, command_line())
    return 0


def add_soak(bsub: Any) -> None:
    p = bsub.add_parser(
        "soak",
        help="long runs stay flat: resident memory, threads, descriptors and sockets of every "
        "rank (and parameter server) at the start and end of thousands of steps",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_common(
        p, models="cnn", caps="1gbit", batch_size=32, steps=2000, repeats=None,
        out="bench-out/bench-soak.json", steps_help="steps per strategy",
        caps_help="; one cap; none = loopback, no competing traffic",
    )  # fmt: skip
    p.add_argument("--strategies", default="cadence-dp,zero,ps", help="comma-separated")
    p.add_argument(
        "--contention", default="on", choices=("on", "off"),
        help="competing bulk TCP traffic both ways between hosts 0 and 1",
    )  # fmt: skip
    p.add_argument(
        "--start-step", type=int, default=100,
        help="step of the start sample (one-off allocations come before it)",
    )  # fmt: skip
    p.add_argument("--every", type=int, default=20, help="steps between samples (the PNG)")
    p.add_argument(
        "--time-limit", type=float, default=900.0,
        help="seconds per strategy; a run still going is stopped and reported as far as it got",
    )  # fmt: skip
    p.set_defaults(func=_cmd_soak)
