"""`cadence bench tta`'s parser. Its command function imports the benchmark lazily so
`cadence --help` stays fast."""

from __future__ import annotations

import argparse
from typing import Any

from cadence.bench.cli_args import add_common, command_line, names


def _cmd_tta(args: argparse.Namespace) -> int:
    from cadence.bench.tta import (
        BENCH_METHODS,
        TTABenchConfig,
        read_reports,
        rescore_config,
        run_tta_bench,
    )
    from cadence.errors import UserError
    from cadence.sim.methods import parse_methods

    methods = parse_methods(args.methods) if args.methods else None
    if args.eval_every_steps is None:
        raise UserError("bench tta evaluates every N steps: give --eval-every-steps N")
    try:
        hosts = tuple(int(h) for h in names(args.workers))
    except ValueError:
        raise UserError(f"--workers takes comma-separated counts, got '{args.workers}'") from None
    config = TTABenchConfig(
        models=names(args.models),
        caps=names(args.caps),
        hosts=hosts,
        methods=tuple(m.name for m in methods) if methods else BENCH_METHODS,
        batch_size=args.batch_size,
        steps=args.steps,
        eval_every=args.eval_every_steps,
        pilot_steps=args.pilot_steps,
        pilot_only=args.pilot_only,
        out=args.out,
    )
    measured = None
    if args.rescore:
        measured = read_reports(names(args.rescore))
        config = rescore_config(measured["config"], config)
    run_tta_bench(config, command_line(), measured=measured)
    return 0


def add_tta(bsub: Any) -> None:
    p = bsub.add_parser(
        "tta",
        help="time to a target test loss (ddp's final) of ddp, torch's fp16 and PowerSGD hooks, "
        "cadence-dp's compressions, local SGD / DiLoCo (and torchft's, torchft-diloco:H16) and "
        "ZeRO + 1-bit Adam in an emulated cluster: ratios to ddp, final accuracy, bytes sent, "
        "loss-vs-wall-clock PNG",
    )
    add_common(
        p, models="gpt_mini,cnn", caps="20mbit,100mbit,400mbit", workers=None, batch_size=64,
        steps=400, repeats=None, out="bench-out/bench-tta.json",
        defaults={"eval_every_steps": 20, "worker_counts": "2,4"},
        options=("pilot_steps", "pilot_only", "rescore"),
        tables=[("job", ("eval_every_steps",)), ("plan", ("methods", "worker_counts"))],
    )  # fmt: skip
    p.set_defaults(func=_cmd_tta)
