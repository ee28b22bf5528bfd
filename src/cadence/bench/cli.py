"""`cadence bench ...`: one subcommand per benchmark.

Adding a benchmark is one `_add_<name>(bsub)` function (its parser and a `func`) plus its name
in `_BENCHES` (`dp`'s parser lives in `cadence.bench.cli_dp`, `sim`'s in `cadence.sim.cli`).
Command functions import their module lazily so `cadence --help` stays fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from cadence.bench.cli_args import add_common as _add_common
from cadence.bench.cli_args import command_line as _command_line
from cadence.bench.cli_args import names as _names
from cadence.bench.cli_args import one as _one
from cadence.bench.cli_dp import add_dp as _add_dp
from cadence.bench.cli_soak import add_soak as _add_soak
from cadence.bench.cli_tta import add_tta as _add_tta


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
        hosts=args.workers,
        bandwidth_bps=parse_bandwidth(_one(args.caps, "--caps")),
        repeats=args.repeats,
        warmup=args.warmup,
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
    )
    _add_common(
        p, models=None, caps="1gbit", workers=4, batch_size=None, steps=None, repeats=5,
        out="bench-out/bench-collectives.json", options=("warmup", "sizes", "collectives"),
        defaults={"warmup": 1, "threads": 1}, tables=[("cluster", ("threads",))],
    )  # fmt: skip
    p.set_defaults(func=_cmd_collectives)


def _cmd_zero(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cadence.zero.bench import run_bench

    run_bench(
        _one(args.models, "--models"), _one(args.caps, "--caps"), args.steps, args.freeze_steps,
        args.workers, Path(args.out), jobs=_names(args.jobs), batch_size=args.batch_size,
        repeats=args.repeats, command=_command_line(),
    )  # fmt: skip
    return 0


def _add_zero(bsub: Any) -> None:
    p = bsub.add_parser(
        "zero",
        help="ZeRO stages 1/2/3 with and without 1-bit Adam against DDP + Adam, FSDP2 and "
        "DeepSpeed ZeRO-2 in an emulated cluster (iteration time, bytes at the interface)",
    )
    _add_common(
        p, models="gpt_mini", caps="200mbit", steps=30, repeats=1, out="bench-out/bench-zero.json",
        options=("jobs",), defaults={"freeze_steps": 8}, tables=[("zero", ("freeze_steps",))],
    )  # fmt: skip
    p.set_defaults(func=_cmd_zero)


def _cmd_pipeline(args: argparse.Namespace) -> int:
    from cadence.bench.pipeline import PipelineBenchConfig, run_pipeline_bench

    config = PipelineBenchConfig(
        models=_names(args.models),
        cap=_one(args.caps, "--caps"),
        contention=(False, True) if args.contention == "both" else (args.contention == "on",),
        batch_size=args.batch_size,
        microbatches=args.microbatches,
        memory_limit=args.memory_limit,
        warmup=args.warmup,
        rounds=args.steps,
        out=args.out,
    )
    run_pipeline_bench(config, _command_line())
    return 0


def _add_pipeline(bsub: Any) -> None:
    p = bsub.add_parser(
        "pipeline",
        help="GPipe, 1F1B, kFkB and torch's pipeline schedules on 2 emulated hosts, without and "
        "with contention, against the planner's predictions and pick",
    )
    _add_common(
        p, models="gpt_mini,vgg16", caps="200mbit", workers=None, batch_size=16, steps=12,
        repeats=None, out="bench-out/bench-pipeline.json", options=("warmup", "contention"),
        defaults={"microbatches": 8},
        tables=[("pipeline", ("microbatches", "memory_limit"))],
    )  # fmt: skip
    p.set_defaults(func=_cmd_pipeline)


def _cmd_ps(args: argparse.Namespace) -> int:
    from cadence.bench.ps import PSBenchConfig, run_ps_bench

    config = PSBenchConfig(
        models=_names(args.models),
        cap=_one(args.caps, "--caps"),
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
    )
    _add_common(
        p, models="vgg16,resnet32,cnn_lstm", caps="balanced", batch_size=32, repeats=2,
        out="bench-out/bench-ps.json", options=("orders", "straggler_model"),
    )  # fmt: skip
    p.set_defaults(func=_cmd_ps)


_BENCHES: tuple[Callable[[Any], None], ...] = (
    _add_collectives,
    _add_dp,
    _add_pipeline,
    _add_zero,
    _add_ps,
    _add_soak,
    _add_tta,
)


def add_bench(sub: Any) -> Any:
    """Register `cadence bench` and its benchmarks; returns the benchmarks' subparsers."""
    p = sub.add_parser("bench", help="benchmarks against the usual tools: JSON + table + PNG")
    bsub = p.add_subparsers(dest="bench_cmd", metavar="BENCHMARK", required=True)
    for add in _BENCHES:
        add(bsub)
    return bsub
