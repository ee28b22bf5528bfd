"""`cadence bench dp`'s parser. Its command function imports the benchmark lazily so
`cadence --help` stays fast."""

from __future__ import annotations

import argparse
from typing import Any

from cadence.bench.cli_args import add_common, command_line, names, numbers


def _cmd_dp(args: argparse.Namespace) -> int:
    from cadence.bench.dp import DPBenchConfig, run_dp_bench

    buckets = numbers(args.ddp_buckets_mb, "--ddp-buckets-mb")
    config = DPBenchConfig(
        models=names(args.models),
        caps=names(args.caps),
        workers=args.workers,
        batch_size=args.batch_size,
        steps=args.steps,
        repeats=args.repeats,
        ddp_buckets_mb=buckets,
        threshold_mb=args.threshold_mb,
        reorder_k=args.reorder_k,
        autotune=args.autotune,
        ddp_fixed_heap=args.ddp_fixed_heap,
        out=args.out,
    )
    run_dp_bench(config, command_line())
    return 0


def add_dp(bsub: Any) -> None:
    p = bsub.add_parser(
        "dp",
        help="cadence-dp vs torch DDP (default and tuned buckets) against the bound "
        "max(compute, wire), per model and link cap",
    )
    add_common(
        p,
        models="vgg16,resnet32,cnn_lstm,gpt_mini",
        caps="none,1gbit,400mbit",
        out="bench-out/bench-dp.json",
        options=("ddp_buckets_mb", "ddp_fixed_heap"),
        tables=[("dp", ("threshold_mb", "reorder_k", "autotune"))],
    )
    p.set_defaults(func=_cmd_dp)
