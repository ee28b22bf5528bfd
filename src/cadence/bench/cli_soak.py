"""`cadence bench soak`'s parser. Its command function imports the benchmark lazily so
`cadence --help` stays fast."""

from __future__ import annotations

import argparse
from typing import Any

from cadence.bench.cli_args import add_common, command_line, names


def _cmd_soak(args: argparse.Namespace) -> int:
    from cadence.bench.cli_args import one
    from cadence.bench.soak import SoakBenchConfig, run_soak_bench
    from cadence.errors import UserError

    if args.contention == "both":
        raise UserError("bench soak runs one setting: --contention on or --contention off")
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
        out="bench-out/bench-soak.json",
        options=("strategies", "contention", "start_step", "every", "time_limit"),
        defaults={"strategies": "cadence-dp,zero,ps", "contention": "on"},
    )  # fmt: skip
    p.set_defaults(func=_cmd_soak)
