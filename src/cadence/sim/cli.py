"""The simulator's commands: `cadence simulate`, `cadence plan dp`, `cadence bench sim` and
`cadence calibrate` (the measured link model `simulate --calibration` reads).

Parsers only; the work is imported lazily so `cadence --help` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any


def _cmd_simulate(args: argparse.Namespace) -> int:
    from cadence.sim.command import simulate_command

    return simulate_command(args)


def _cmd_plan(args: argparse.Namespace) -> int:
    from cadence.sim.command import plan_command

    return plan_command(args)


def _sim_arguments(p: Any, worker_list: bool = False) -> None:
    p.add_argument("--model", default="vgg16", help="model zoo name")
    if worker_list:
        p.add_argument("--workers", default="2,8,64", help="worker counts, comma-separated")
    else:
        p.add_argument("--workers", type=int, default=64, help="data-parallel workers")
    p.add_argument("--bandwidth", default="10gbit", help="per-worker link, e.g. 400mbit")
    p.add_argument("--latency", type=float, default=0.0, help="seconds per message (alpha)")
    p.add_argument(
        "--payload-fraction",
        type=float,
        default=1448 / 1514,
        help="share of --bandwidth that carries data (TCP over Ethernet, MTU 1500)",
    )
    p.add_argument(
        "--optimizer", default="adam", help="adam, adamw, sgd or none: its step time is measured"
    )
    p.add_argument(
        "--optimizer-step",
        type=float,
        default=None,
        metavar="SECONDS",
        help="one optimizer step over the whole model; default: as the profile timed it where "
        "it was made, else timed now on this CPU",
    )
    p.add_argument(
        "--calibration",
        default=None,
        metavar="FILE",
        help="`cadence calibrate` JSON: the links' measured alpha-beta, each collective's own "
        "alpha included (replaces --bandwidth, --latency and --payload-fraction)",
    )
    add_calibration_latency(p)
    p.add_argument(
        "--profile",
        default=None,
        metavar="FILE",
        help="saved `cadence profile` JSON; default: profile the model now",
    )
    add_micro_batch_size(p, "when profiling now")
    p.add_argument(
        "--grad-accum",
        type=int,
        default=1,
        metavar="N",
        help="gradient accumulation: N micro-batches (--micro-batch-size each) per step, one "
        "gradient sync overlapping only the last backward",
    )
    p.add_argument("--profile-iterations", type=int, default=5, help="when profiling now")
    p.add_argument("--bucket", default="25mib", help="DDP bucket size")
    p.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="workers simulated one by one (the others behave alike)",
    )
    p.add_argument(
        "--clip", action="store_true", help="the loop clips gradients by global norm before step"
    )
    p.add_argument("--json", default=None, metavar="FILE", help="write the figures here")


class _GlobalBatchHere(argparse.Action):
    """`--batch-size` where a command takes the per-worker `--micro-batch-size`: refused with
    a line naming the right flag (in `cadence train` --batch-size is the global batch)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        parser.error(
            "--batch-size is the global batch (cadence train, bench, plan pipeline); this "
            "command takes --micro-batch-size: samples one worker runs per forward/backward"
        )


def add_micro_batch_size(p: Any, when: str, default: int = 32) -> None:
    """`--micro-batch-size`: samples per worker in one forward/backward, the batch a profile
    times; `--batch-size` (the global batch elsewhere) is refused with a hint."""
    p.add_argument(
        "--micro-batch-size",
        type=int,
        default=default,
        metavar="N",
        help=f"samples per worker in one forward/backward, {when} (--batch-size is the "
        "global batch of cadence train)",
    )
    p.add_argument("--batch-size", action=_GlobalBatchHere, help=argparse.SUPPRESS)


def add_calibration_latency(p: Any) -> None:
    """`--calibration-latency`, for the commands that take `--calibration`."""
    p.add_argument(
        "--calibration-latency",
        choices=("by-size", "fitted"),
        default="by-size",
        help="--calibration: price each all-reduce's per-message latency as measured at its "
        "own size (by-size) or with the calibration's one fitted alpha (fitted)",
    )


def add_simulate(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="predict iteration time, overlap and memory of a strategy from a profile",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _sim_arguments(p)
    p.add_argument("--strategy", default="cadence-dp", help="cadence-dp, ddp or zero")
    p.add_argument("--zero-stage", type=int, default=2, help="zero: stage 1, 2 or 3")
    p.add_argument(
        "--compression", default="none", help="zero: none, fp16 or onebit (after its warm-up)"
    )
    p.add_argument(
        "--threshold",
        default=None,
        help="cadence-dp split/fuse threshold (default: cadence-dp's, a quarter of the "
        "gradients within 1-4 MiB)",
    )
    p.add_argument(
        "--credit",
        default=None,
        help="cadence-dp bytes in flight (2 x threshold; 4 x for at least 8 chunks of gradients)",
    )
    p.add_argument("--iterations", type=int, default=3, help="measured iterations")
    p.add_argument(
        "--reorder-k", default="none", help="cadence-dp backward reordering point K, or none"
    )
    p.add_argument("--trace", default=None, metavar="FILE", help="Chrome-trace JSON (Perfetto)")
    p.add_argument("--png", default=None, metavar="FILE", help="timeline PNG")
    p.set_defaults(func=_cmd_simulate)


def add_plan(sub: Any) -> None:
    p = sub.add_parser("plan", help="rank strategies and settings by predicted iteration time")
    psub = p.add_subparsers(dest="plan_cmd", required=True)
    dp = psub.add_parser(
        "dp",
        help="DDP vs cadence-dp over thresholds",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _sim_arguments(dp)
    dp.add_argument(
        "--thresholds",
        default="256kib,1mib,4mib,16mib",
        help="cadence-dp thresholds to try, comma-separated",
    )
    dp.add_argument(
        "--reorder-ks", default="none", help="reordering points K to try, e.g. none,1,8"
    )
    dp.set_defaults(func=_cmd_plan)
    from cadence.pipeline.plan_command import add_plan_pipeline

    add_plan_pipeline(psub)
    _add_strategy_plans(psub)


def _cmd_plan_strategies(args: argparse.Namespace) -> int:
    from cadence.sim.strategy_command import plan_strategies_command

    return plan_strategies_command(args)


def _cmd_plan_map(args: argparse.Namespace) -> int:
    from cadence.sim.strategy_command import plan_map_command

    return plan_map_command(args)


def _add_strategy_plans(psub: Any) -> None:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    p = psub.add_parser(
        "strategies",
        help="rank every strategy (data parallel, ZeRO, tensor, pipeline, parameter server)",
        formatter_class=fmt,
    )
    _sim_arguments(p)
    p.add_argument("--memory-limit", default=None, help="bytes per worker, e.g. 2gib")
    p.set_defaults(func=_cmd_plan_strategies)
    m = psub.add_parser(
        "map",
        help="the best strategy over cluster sizes and bandwidths, as a table and a picture",
        formatter_class=fmt,
    )
    _sim_arguments(m, worker_list=True)
    m.add_argument("--bandwidths", default="100mbit,1gbit,10gbit,100gbit", help="comma-separated")
    m.add_argument("--memory-limit", default=None, help="bytes per worker, e.g. 2gib")
    m.add_argument("--png", default=None, metavar="FILE", help="draw the map here")
    m.set_defaults(func=_cmd_plan_map)


def _cmd_bench_sim(args: argparse.Namespace) -> int:
    from cadence.sim.bench import bench_sim_command

    return bench_sim_command(args)


def add_bench_sim(bsub: Any) -> None:
    p = bsub.add_parser(
        "sim",
        help="predicted vs measured iteration time of emulated-cluster training runs",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("runs", nargs="*", help="`cadence train --json` files to predict")
    p.add_argument(
        "--from-bench-dp",
        nargs="+",
        default=[],
        metavar="FILE",
        help="also predict the DDP and cadence-dp rows of `cadence bench dp` result files",
    )
    p.add_argument(
        "--profile",
        action="extend",
        nargs="+",
        metavar="FILE",
        help="saved profiles, one per model (several after one --profile, or --profile "
        "repeated); default: profile now",
    )
    p.add_argument(
        "--run",
        action="store_true",
        help="first train --models at --caps in the emulated cluster (run JSONs next to --out)",
    )
    from cadence.bench.cli_args import add_common

    add_common(
        p, models="vgg16", caps="400mbit", steps=10, repeats=None, out="bench-out/bench-sim.json",
        steps_help="with --run: steps per run",
    )  # fmt: skip
    p.add_argument("--strategies", default="ddp,cadence-dp", help="with --run: strategies")
    p.add_argument(
        "--payload-fraction",
        type=float,
        default=1448 / 1514,
        help="share of the cap that carries data",
    )
    p.add_argument(
        "--optimizer-step",
        type=float,
        default=None,
        metavar="SECONDS",
        help="one optimizer step over the whole model; default: the profile's, else timed now",
    )
    p.add_argument(
        "--calibration",
        default=None,
        metavar="FILE",
        help="`cadence calibrate` JSON of the cluster's links: price each message with its "
        "alphas (beta still from each run's cap; default: no per-message latency)",
    )
    add_calibration_latency(p)
    p.set_defaults(func=_cmd_bench_sim)


def add_calibrate(sub: Any) -> None:
    """Register `cadence calibrate`."""
    p = sub.add_parser(
        "calibrate",
        help="time gloo collectives on real or emulated links; save alpha-beta for simulate",
        description="Time gloo's collectives at message sizes from 1 KB to 64 MB and fit the "
        "alpha-beta model (`cadence simulate --calibration FILE`). Under torchrun it times the "
        "cluster's own links; otherwise --workers processes on the loopback, or on emulated "
        "hosts with --bandwidth (needs root).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--out", default="calibration.json", help="calibration JSON to write")
    p.add_argument("--workers", type=int, default=2, help="ranks (not under torchrun)")
    p.add_argument(
        "--bandwidth", default="none", help="emulated link cap, e.g. 400mbit; none: loopback"
    )
    p.add_argument(
        "--collectives", default="all_reduce,all_gather,broadcast",
        help="comma-separated, from all_reduce, all_gather, broadcast (all-reduce always)",
    )  # fmt: skip
    p.add_argument(
        "--sizes", default="1KB,4KB,16KB,64KB,256KB,1MB,4MB,16MB,64MB",
        help="comma-separated message sizes",
    )  # fmt: skip
    p.add_argument("--repeats", type=int, default=5, help="timed rounds per size")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    p.set_defaults(func=_cmd_calibrate)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from cadence.comm.calibrate_command import calibrate_command

    return calibrate_command(args)
