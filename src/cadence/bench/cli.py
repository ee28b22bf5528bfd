"""`cadence bench ...`: one subcommand per benchmark.

Adding a benchmark is one `_add_<name>(bsub)` function (its parser and a `func`) plus its name
in `_BENCHES` (`dp`'s parser lives in `cadence.bench.cli_dp`, `sim`'s in `cadence.sim.cli`).
Command functions import their module lazily so `cadence --help` stays fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from cadence.bench.cli_args import add_host_cpus
from cadence.bench.cli_args import command_line as _command_line
from cadence.bench.cli_args import names as _names
from cadence.bench.cli_dp import add_dp as _add_dp


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
        threads=args.threads,
        frame_bucket=args.link_bucket == "frames",
        yield_io_thread=args.gloo_io_thread == "idle",
        pin_hosts=args.host_cpus == "pinned",
        drain_bucket=args.drain_bucket == "yes",
        alpha_per_collective=args.alpha == "per-collective",
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
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per worker")
    p.add_argument(
        "--link-bucket",
        choices=("5ms", "frames"),
        default="5ms",
        help="token bucket of each capped link: 5ms (the other benchmarks' bucket, which "
        "passes smaller transfers at once) or frames (two frames, GSO off: every byte "
        "serialised at the cap, at a processor cost per frame)",
    )
    p.add_argument(
        "--alpha",
        choices=("per-collective", "all-reduce"),
        default="per-collective",
        help="latency of gloo's all-gather and broadcast: per-collective (each fitted on "
        "calls of its own at 2 KB and 8 KB, sizes the default rows leave out) or all-reduce "
        "(every collective priced with the all-reduce fit's alpha)",
    )
    p.add_argument(
        "--gloo-io-thread",
        choices=("idle", "normal"),
        default="idle",
        help="scheduling of gloo's polling I/O thread while timing: idle (SCHED_IDLE, so "
        "small collectives do not wait out its time slice) or normal (left as is)",
    )
    add_host_cpus(p, default="pinned")
    p.add_argument(
        "--drain-bucket",
        choices=("yes", "no"),
        default="yes",
        help="before each timed block, an untimed all-reduce of twice the links' token "
        "bucket, so no block rides tokens saved up during the small ones before it",
    )
    p.add_argument(
        "--out", default="bench-out/bench-collectives.json", help="JSON file; PNG next to it"
    )
    p.set_defaults(func=_cmd_collectives)


def _cmd_zero(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cadence.zero.bench import run_bench

    run_bench(
        args.model, args.bandwidth, args.steps, args.freeze_steps, args.workers, Path(args.out),
        jobs=_names(args.jobs), batch_size=args.batch_size, repeats=args.repeats,
        command=_command_line(),
    )  # fmt: skip
    return 0


def _add_zero(bsub: Any) -> None:
    p = bsub.add_parser(
        "zero",
        help="ZeRO stages 1/2/3 with and without 1-bit Adam against DDP + Adam, FSDP2 and "
        "DeepSpeed ZeRO-2 in an emulated cluster (iteration time, bytes at the interface)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", default="gpt_mini")
    p.add_argument("--bandwidth", default="200mbit", help="link cap")
    p.add_argument("--steps", type=int, default=30, help="timed: the last steps-freeze-2")
    p.add_argument("--freeze-steps", type=int, default=8, help="1-bit Adam warm-up steps")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="global batch, every job")
    p.add_argument(
        "--jobs",
        default="",
        help="comma-separated (default: all): ddp, fsdp2, deepspeed-zero2, "
        "zero<1|2|3>-<none|fp16|onebit>[-bf16][-overlap][-backorder|-fwdorder][-onelane]",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds of every job, in alternating order; each job's figure is the median "
        "over rounds of its per-round median step",
    )
    p.add_argument("--out", default="bench-out/zero-bench", help="summary.json and PNGs here")
    p.set_defaults(func=_cmd_zero)


def _cmd_pipeline(args: argparse.Namespace) -> int:
    from cadence.bench.pipeline import PipelineBenchConfig, run_pipeline_bench
    from cadence.sizes import parse_memory_limit

    config = PipelineBenchConfig(
        models=_names(args.models),
        cap=args.cap,
        contention=(False, True) if args.contention == "both" else (args.contention == "on",),
        batch_size=args.batch_size,
        microbatches=args.microbatches,
        memory_limit=parse_memory_limit(args.memory_limit),
        warmup=args.warmup,
        rounds=args.rounds,
        out=args.out,
    )
    run_pipeline_bench(config, _command_line())
    return 0


def _add_pipeline(bsub: Any) -> None:
    p = bsub.add_parser(
        "pipeline",
        help="GPipe, 1F1B, kFkB and torch's pipeline schedules on 2 emulated hosts, without and "
        "with contention, against the planner's predictions and pick",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--models", default="gpt_mini,vgg16", help="comma-separated zoo models")
    p.add_argument("--cap", default="200mbit", help="link cap between the hosts")
    p.add_argument("--contention", default="both", choices=("off", "on", "both"))
    p.add_argument("--batch-size", type=int, default=16, help="samples per step")
    p.add_argument("--microbatches", type=int, default=8, help="M at which schedules are timed")
    p.add_argument(
        "--memory-limit",
        default=None,
        help="bytes per stage (default: halfway between the "
        "smallest and largest simulated peak at M)",
    )
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per candidate")
    p.add_argument("--rounds", type=int, default=12, help="timed steps per candidate")
    p.add_argument("--out", default="bench-out/bench-pipeline.json", help="JSON; PNG next to it")
    p.set_defaults(func=_cmd_pipeline)


def _cmd_ps(args: argparse.Namespace) -> int:
    from cadence.bench.ps import PSBenchConfig, run_ps_bench

    config = PSBenchConfig(
        models=_names(args.models),
        cap=args.cap,
        workers=args.workers,
        batch_size=args.batch_size,
        steps=args.steps,
        repeats=args.repeats,
        orders=_names(args.orders),
        straggler_model=args.straggler_model,
        out=args.out,
    )
    run_ps_bench(config, _command_line())
    return 0


def _add_ps(bsub: Any) -> None:
    p = bsub.add_parser(
        "ps",
        help="parameter server in an emulated cluster: FIFO, layer, graph and graph + network "
        "priority classes vs the published ratios; backup workers with a straggler; ASP",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--models", default="vgg16,resnet32,cnn_lstm", help="comma-separated")
    p.add_argument(
        "--cap", default="balanced", help="link cap; balanced = per model, wire time = compute"
    )
    p.add_argument("--workers", type=int, default=2, help="workers (one server, beside rank 0)")
    p.add_argument("--batch-size", type=int, default=32, help="global batch")
    p.add_argument("--steps", type=int, default=12, help="steps per run (first excluded)")
    p.add_argument("--repeats", type=int, default=2, help="rounds over the orders, alternating")
    p.add_argument("--orders", default="fifo,layer,graph,graph+net", help="--ps-priority values")
    p.add_argument(
        "--straggler-model", default="resnet32", help="backup/ASP runs on this model ('' skips)"
    )
    p.add_argument("--out", default="bench-out/bench-ps.json", help="JSON; PNG next to it")
    p.set_defaults(func=_cmd_ps)


_BENCHES: tuple[Callable[[Any], None], ...] = (
    _add_collectives,
    _add_dp,
    _add_pipeline,
    _add_zero,
    _add_ps,
)


def add_bench(sub: Any) -> Any:
    """Register `cadence bench` and its benchmarks; returns the benchmarks' subparsers."""
    p = sub.add_parser("bench", help="benchmarks against the usual tools: JSON + table + PNG")
    bsub = p.add_subparsers(dest="bench_cmd", metavar="BENCHMARK", required=True)
    for add in _BENCHES:
        add(bsub)
    return bsub
