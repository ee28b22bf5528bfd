"""`cadence bench ...`: one subcommand per benchmark.

Adding a benchmark is one `_add_<name>(bsub)` function (its parser and a `func`) plus its name
in `_BENCHES`. Command functions import their module lazily so `cadence --help` stays fast.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from typing import Any


def _command_line() -> str:
    return "cadence " + shlex.join(sys.argv[1:])


def _names(text: str) -> tuple[str, ...]:
    """A comma-separated flag value as its non-empty items."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _cmd_collectives(args: argparse.Namespace) -> int:
    from cadence.bench.collectives import (
        DEFAULT_COLLECTIVES,
        CollectivesBenchConfig,
        parse_sizes,
        run_collectives_bench,
    )
    from cadence.netem import parse_bandwidth

    collectives = _names(args.collectives)
    config = CollectivesBenchConfig(
        sizes=parse_sizes(args.sizes) if args.sizes else CollectivesBenchConfig().sizes,
        collectives=collectives or DEFAULT_COLLECTIVES,
        hosts=args.hosts,
        bandwidth_bps=parse_bandwidth(args.bandwidth),
        repeats=args.repeats,
        warmup=args.warmup,
        calibration_repeats=args.calibration_repeats,
        threads=args.threads,
        out=args.out,
    )
    run_collectives_bench(config, _command_line())
    return 0


def _add_collectives(bsub: Any) -> None:
    p = bsub.add_parser(
        "collectives",
        help="time cadence's collective algorithms against gloo's in an emulated cluster, "
        "with the calibrated alpha-beta prediction next to each",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--sizes", default=None, help="comma-separated message sizes (default 1KB to 64MB, x4)"
    )
    p.add_argument(
        "--collectives",
        default="all_reduce,reduce_scatter,all_gather,broadcast",
        help="comma-separated; also all_to_all",
    )
    p.add_argument("--hosts", type=int, default=4, help="emulated hosts, one rank each")
    p.add_argument("--bandwidth", default="1gbit", help="link cap per host, e.g. 400mbit")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds (medians reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    p.add_argument("--calibration-repeats", type=int, default=3, help="alpha-beta fit rounds")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per worker")
    p.add_argument(
        "--out", default="results/bench-collectives.json", help="JSON file; PNG next to it"
    )
    p.set_defaults(func=_cmd_collectives)


def _cmd_dp(args: argparse.Namespace) -> int:
    from cadence.bench.dp import DPBenchConfig, run_dp_bench

    try:
        buckets = tuple(float(mb) for mb in _names(args.ddp_buckets_mb))
    except ValueError:
        from cadence.errors import UserError

        raise UserError(f"--ddp-buckets-mb must be numbers, got '{args.ddp_buckets_mb}'") from None
    config = DPBenchConfig(
        models=_names(args.models),
        caps=_names(args.caps),
        workers=args.workers,
        batch_size=args.batch_size,
        steps=args.steps,
        repeats=args.repeats,
        ddp_buckets_mb=buckets,
        threshold_mb=args.threshold_mb,
        reorder_k=args.reorder_k,
        autotune=args.autotune,
        out=args.out,
    )
    run_dp_bench(config, _command_line())
    return 0


def _add_dp(bsub: Any) -> None:
    p = bsub.add_parser(
        "dp",
        help="cadence-dp vs torch DDP (default and tuned buckets) against the bound "
        "max(compute, wire), per model and link cap",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--models", default="vgg16,resnet32,cnn_lstm,gpt_mini")
    p.add_argument("--caps", default="none,1gbit,400mbit", help="link caps; none = loopback")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="global batch")
    p.add_argument("--steps", type=int, default=12, help="steps per run (first excluded)")
    p.add_argument("--repeats", type=int, default=2, help="runs per variant, alternating")
    p.add_argument("--ddp-buckets-mb", default="5,100", help="buckets tried for DDP tuned")
    p.add_argument("--threshold-mb", type=float, default=4.0, help="cadence-dp threshold")
    p.add_argument("--reorder-k", type=int, default=None, help="cadence-dp reorder point")
    p.add_argument("--autotune", default="off", help="cadence-dp: off, exhaustive or guided")
    p.add_argument("--out", default="results/bench-dp.json", help="JSON; PNG next to it")
    p.set_defaults(func=_cmd_dp)


def _cmd_zero(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cadence.zero.bench import run_bench

    run_bench(
        args.model, args.bandwidth, args.steps, args.freeze_steps, args.workers, Path(args.out)
    )
    return 0


def _add_zero(bsub: Any) -> None:
    p = bsub.add_parser(
        "zero",
        help="ZeRO stages 1/2/3 with and without 1-bit Adam against DDP + Adam in an "
        "emulated cluster (iteration time and bytes per step)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", default="gpt_mini")
    p.add_argument("--bandwidth", default="200mbit", help="link cap")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--freeze-steps", type=int, default=10, help="1-bit Adam warm-up steps")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="results/zero-bench", help="directory for summary.json")
    p.set_defaults(func=_cmd_zero)


_BENCHES: tuple[Callable[[Any], None], ...] = (_add_collectives, _add_dp, _add_zero)


def add_bench(sub: Any) -> Any:
    """Register `cadence bench` and its benchmarks; returns the benchmarks' subparsers."""
    p = sub.add_parser("bench", help="benchmarks against the usual tools: JSON + table + PNG")
    bsub = p.add_subparsers(dest="bench_cmd", metavar="BENCHMARK", required=True)
    for add in _BENCHES:
        add(bsub)
    return bsub
