"""`cadence bench dp`'s parser. Its command function imports the benchmark lazily so
`cadence --help` stays fast."""

from __future__ import annotations

import argparse
from typing import Any

from cadence.bench.cli_args import (
    add_common,
    add_reorder_k,
    add_threshold,
    command_line,
    names,
    numbers,
)


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
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_common(
        p,
        models="vgg16,resnet32,cnn_lstm,gpt_mini",
        caps="none,1gbit,400mbit",
        caps_help="; none = loopback; balanced = the cap where wire time = compute time",
        out="bench-out/bench-dp.json",
    )
    p.add_argument("--ddp-buckets-mb", default="5,100", help="buckets tried for DDP tuned")
    add_threshold(p)
    add_reorder_k(p)
    p.add_argument("--autotune", default="off", help="cadence-dp: off, exhaustive or guided")
    p.add_argument(
        "--ddp-fixed-heap",
        action="store_true",
        help="also run DDP with glibc's heap thresholds fixed as cadence-dp fixes them "
        "(variant ddp-heap): how much of cadence-dp's lead is that setting",
    )
    p.set_defaults(func=_cmd_dp)
