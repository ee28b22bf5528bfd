"""The simulator's commands: `cadence simulate`, `cadence plan dp`, `cadence bench sim` and
`cadence calibrate` (the measured link model `simulate --calibration` reads).

Parsers only, their flags derived from `TrainConfig`'s sections (an option that means what a
`cadence train` flag means is that flag) and from `cadence.command_options`' tables; the work
is imported lazily so `cadence --help` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any

from cadence.command_options import (
    SIM_OPTIMIZERS,
    SIM_STRATEGIES,
    NetworkModel,
    PlanOptions,
    ProfileOptions,
    SimulateOptions,
)
from cadence.config import (
    ClusterSection,
    DataSection,
    DPSection,
    JobSection,
    LocalSGDSection,
    ModelSection,
    OptimSection,
    ZeroSection,
)
from cadence.config_flags import FlagSet, add_flags

STRATEGIES = SIM_STRATEGIES


def _cmd_simulate(args: argparse.Namespace) -> int:
    from cadence.sim.command import simulate_command

    return simulate_command(args)


def _cmd_plan(args: argparse.Namespace) -> int:
    from cadence.sim.command import plan_command

    return plan_command(args)


def _sets(
    *,
    job: tuple[str, ...] = (),
    dp: tuple[str, ...] = (),
    simulate: tuple[str, ...] = ("optimizer_step", "replicas", "clip", "json"),
    plan: tuple[str, ...] = (),
    workers: bool = True,
    threads: bool = False,
) -> list[FlagSet]:
    """The flag tables of a simulator command: model, cluster, network and profile as every
    one takes them, plus the strategy settings and own options it names."""
    sets = [
        FlagSet("job", JobSection, only=job, defaults={"strategy": "cadence-dp"},
                choices={"strategy": STRATEGIES}),
        FlagSet("model", ModelSection, only=("name",), defaults={"name": "vgg16"}),
        FlagSet("data", DataSection, only=("grad_accum",)),
        FlagSet("optim", OptimSection, only=("name",), choices={"name": SIM_OPTIMIZERS}),
        FlagSet("cluster", ClusterSection,
                only=("workers",) * workers + ("threads",) * threads, defaults={"workers": 64}),
        FlagSet("dp", DPSection, only=("bucket_mb", *dp)),
        FlagSet("zero", ZeroSection, only=("stage", "compression") if "strategy" in job else ()),
        FlagSet("network", NetworkModel),
        FlagSet("profile", ProfileOptions, only=("file", "micro_batch_size", "profile_iterations")),
        FlagSet("simulate", SimulateOptions, only=simulate),
        FlagSet("plan", PlanOptions, only=plan),
    ]  # fmt: skip
    return [s for s in sets if s.only != ()]


def _add_flags(p: Any, sets: list[FlagSet]) -> None:
    add_flags(p, sets)
    refuse_global_batch(p)


class _GlobalBatchHere(argparse.Action):
    """`--batch-size` where a command takes the per-worker `--micro-batch-size`: refused with
    a line naming the right flag (in `cadence train` --batch-size is the global batch)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        parser.error(
            "--batch-size is the global batch (cadence train, bench, plan pipeline); this "
            "command takes --micro-batch-size: samples one worker runs per forward/backward"
        )


def refuse_global_batch(p: Any) -> None:
    """A hidden `--batch-size` for commands that take the per-worker `--micro-batch-size`:
    given, it is refused with a line naming the right flag."""
    p.add_argument("--batch-size", action=_GlobalBatchHere, help=argparse.SUPPRESS)


def add_simulate(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="predict iteration time, overlap and memory of a strategy from a profile",
    )
    sets = _sets(
        threads=True,  # the profile is taken at, or compared with, the training's threads
        job=("strategy",),
        dp=("threshold_mb", "reorder_k", "compression"),
        simulate=("optimizer_step", "replicas", "clip", "iterations", "credit_mb", "trace",
                  "png", "json"),
    )  # fmt: skip
    _add_flags(p, sets)
    p.set_defaults(func=_cmd_simulate)


def add_plan(sub: Any) -> None:
    p = sub.add_parser("plan", help="rank strategies and settings by predicted iteration time")
    psub = p.add_subparsers(dest="plan_cmd", required=True)
    dp = psub.add_parser("dp", help="DDP vs cadence-dp over thresholds")
    _add_flags(dp, _sets(plan=("thresholds", "reorder_ks")))
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
    p = psub.add_parser(
        "strategies",
        help="rank every strategy (data parallel, ZeRO, tensor, pipeline, parameter server)",
    )
    _add_flags(p, _sets(plan=("worker_memory",)))
    p.set_defaults(func=_cmd_plan_strategies)
    m = psub.add_parser(
        "map",
        help="the best strategy over cluster sizes and bandwidths, as a table and a picture",
    )
    simulate = ("optimizer_step", "replicas", "clip", "png", "json")
    plan = ("worker_counts", "bandwidths", "worker_memory")
    _add_flags(m, _sets(simulate=simulate, plan=plan, workers=False))
    m.set_defaults(func=_cmd_plan_map)
    _add_plan_tta(psub)


def _cmd_plan_tta(args: argparse.Namespace) -> int:
    from cadence.sim.tta_command import plan_tta_command

    return plan_tta_command(args)


def _add_plan_tta(psub: Any) -> None:
    p = psub.add_parser(
        "tta",
        help="rank ddp, its comm hooks, cadence-dp's compressions, local SGD / DiLoCo and ZeRO "
        "+ 1-bit Adam by predicted time to a target loss (steps from a pilot or the user)",
    )
    sets = _sets(
        dp=("powersgd_rank", "powersgd_start_step"),
        simulate=("optimizer_step", "replicas", "clip", "json"),
        plan=("methods", "target_loss", "target_steps", "pilot", "steps_to_target", "loop_costs"),
    )
    sets.insert(-2, FlagSet("zero", ZeroSection, only=("freeze_steps",)))
    sets.insert(-2, FlagSet("localsgd", LocalSGDSection, only=("overlap_steps", "outer_dtype")))
    _add_flags(p, sets)
    p.set_defaults(func=_cmd_plan_tta)


def _cmd_bench_sim(args: argparse.Namespace) -> int:
    from cadence.sim.bench import bench_sim_command

    return bench_sim_command(args)


def add_bench_sim(bsub: Any) -> None:
    p = bsub.add_parser(
        "sim", help="predicted vs measured iteration time of emulated-cluster training runs"
    )
    p.add_argument("runs", nargs="*", help="`cadence train --json` files to predict")
    from cadence.bench.cli_args import add_common

    network = ("payload_fraction", "calibration", "calibration_latency")
    add_common(
        p, models="vgg16", caps="400mbit", steps=10, repeats=3, out="bench-out/bench-sim.json",
        options=("run", "strategies", "from_bench_dp", "profiles", "held_out", "measured"),
        tables=[("network", network), ("simulate", ("optimizer_step",))],
    )  # fmt: skip
    p.set_defaults(func=_cmd_bench_sim)


def add_calibrate(sub: Any) -> None:
    """Register `cadence calibrate`."""
    p = sub.add_parser(
        "calibrate",
        help="time collectives on real or emulated links; save alpha-beta for simulate",
        description="Time gloo's collectives at message sizes from 1 KB to 64 MB, and cadence's "
        "own ring collectives (ring_*, which ZeRO runs) at the small ones, and fit the "
        "alpha-beta model and each call's processor time (`cadence simulate --calibration "
        "FILE`). Under torchrun it times the "
        "cluster's own links; otherwise --workers processes on the loopback, or on emulated "
        "hosts with --emulate-bandwidth (needs root).",
    )
    from cadence.bench.cli_args import add_common

    add_common(
        p, models=None, caps=None, batch_size=None, steps=None, repeats=5,
        out="calibration.json", options=("warmup", "sizes", "collectives"),
        defaults={"sizes": "1KB,4KB,16KB,64KB,256KB,1MB,4MB,16MB,64MB",
                  "collectives": "all_reduce,all_gather,broadcast,ring_all_reduce,"
                                 "ring_reduce_scatter,ring_all_gather"},
        tables=[("cluster", ("emulate_bandwidth",))],
    )  # fmt: skip
    p.set_defaults(func=_cmd_calibrate)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from cadence.comm.calibrate_command import calibrate_command

    return calibrate_command(args)
