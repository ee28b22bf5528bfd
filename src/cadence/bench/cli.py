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


def _cmd_collectives(args: argparse.Namespace) -> int:
    from cadence.bench.collectives import (
        DEFAULT_COLLECTIVES,
        CollectivesBenchConfig,
        parse_sizes,
        run_collectives_bench,
    )
    from cadence.netem import parse_bandwidth

    collectives = tuple(c.strip() for c in args.collectives.split(",") if c.strip())
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


_BENCHES: tuple[Callable[[Any], None], ...] = (_add_collectives,)


def add_bench(sub: Any) -> Any:
    """Register `cadence bench` and its benchmarks; returns the benchmarks' subparsers."""
    p = sub.add_parser("bench", help="benchmarks against the usual tools: JSON + table + PNG")
    bsub = p.add_subparsers(dest="bench_cmd", metavar="BENCHMARK", required=True)
    for add in _BENCHES:
        add(bsub)
    return bsub
