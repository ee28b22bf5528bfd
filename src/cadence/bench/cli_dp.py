"""`cadence bench dp`, `dp-paired`, `dp-timeline` and `dp-autotune`: the data-parallel
benchmarks' parsers. Command functions import their module lazily so `cadence --help` stays
fast."""

from __future__ import annotations

import argparse
from typing import Any

from cadence.bench.cli_args import (
    add_host_cpus,
    add_reorder_k,
    add_threshold,
    add_world,
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
        probe_steps=args.probe_steps,
        interleaved_probe_every=args.interleaved_probe_every,
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
    p.add_argument("--models", default="vgg16,resnet32,cnn_lstm,gpt_mini")
    p.add_argument(
        "--caps",
        default="none,1gbit,400mbit",
        help="link caps; none = loopback; balanced = the cap where wire time = compute time",
    )
    add_world(p)
    p.add_argument("--steps", type=int, default=12, help="steps per run (first excluded)")
    p.add_argument(
        "--repeats", type=int, default=3, help="runs per variant, alternating (odd: a median)"
    )
    p.add_argument("--ddp-buckets-mb", default="5,100", help="buckets tried for DDP tuned")
    add_threshold(p)
    add_reorder_k(p)
    p.add_argument("--autotune", default="off", help="cadence-dp: off, exhaustive or guided")
    p.add_argument(
        "--probe-steps",
        type=int,
        default=10,
        help="steps of compute alone each DDP / cadence-dp run times after its own (0: none)",
    )
    p.add_argument(
        "--interleaved-probe-every",
        type=int,
        default=0,
        help="each cadence-dp run (and ddp-heap's) also times two steps of compute alone "
        "after every N of its steps, the same moments as the steps (0: none)",
    )
    p.add_argument(
        "--ddp-fixed-heap",
        action="store_true",
        help="also run DDP with glibc's heap thresholds fixed as cadence-dp fixes them "
        "(variant ddp-heap): how much of cadence-dp's lead is that setting",
    )
    p.add_argument("--out", default="results/bench-dp.json", help="JSON; PNG next to it")
    p.set_defaults(func=_cmd_dp)


def _cmd_dp_paired(args: argparse.Namespace) -> int:
    from cadence.bench.dp_paired import PairedDPConfig, run_paired_bench

    buckets = numbers(args.ddp_buckets_mb, "--ddp-buckets-mb")
    thresholds = numbers(args.cadence_thresholds_mb, "--cadence-thresholds-mb")
    config = PairedDPConfig(
        models=names(args.models),
        caps=names(args.caps),
        workers=args.workers,
        batch_size=args.batch_size,
        block_steps=args.block_steps,
        block_seconds=args.block_seconds,
        rounds=args.rounds,
        ddp_buckets_mb=buckets,
        threshold_mb=args.threshold_mb,
        cadence_thresholds_mb=thresholds,
        cadence_variants=tuple(v.strip() for v in args.cadence_variants.split(";") if v.strip()),
        reorder_k=args.reorder_k,
        autotune=args.autotune,
        twins=args.twins,
        aligned_compute=args.aligned_compute,
        keep_subnormals=args.keep_subnormals,
        pin_hosts=args.host_cpus == "pinned",
        out=args.out,
    )
    run_paired_bench(config, command_line())
    return 0


def add_dp_paired(bsub: Any) -> None:
    p = bsub.add_parser(
        "dp-paired",
        help="cadence-dp vs DDP in one pair of processes, taking turns in blocks of steps: "
        "ratios within each round, robust to the machine's drift",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--models", default="vgg16")
    p.add_argument("--caps", default="400mbit", help="link caps; none = loopback")
    add_world(p)
    p.add_argument(
        "--block-steps",
        type=int,
        default=8,
        help="steps per turn, at least (first and last not timed)",
    )
    p.add_argument(
        "--block-seconds",
        type=float,
        default=3.0,
        help="timed seconds per turn, at least (more steps for fast models)",
    )
    p.add_argument("--rounds", type=int, default=3, help="timed rounds after a warm-up round")
    p.add_argument("--ddp-buckets-mb", default="5", help="DDP buckets besides 25 MB")
    add_threshold(p)
    p.add_argument(
        "--cadence-thresholds-mb",
        default="",
        help="further cadence-dp variants, one per threshold, compared with the main one",
    )
    p.add_argument(
        "--cadence-variants",
        default="",
        help="further cadence-dp variants separated by ';', each KEY=VALUE[,KEY=VALUE] over "
        "threshold_mb, credit_mb, reorder_k, warmup_iterations (e.g. 'reorder_k=1;credit_mb=12')",
    )
    add_reorder_k(p)
    p.add_argument(
        "--autotune", default="off", help="cadence-dp: off, exhaustive or guided (warm-up round)"
    )
    p.add_argument(
        "--twins",
        action="store_true",
        help="also time an identical copy of DDP and of cadence-dp in the same rounds (A/A: "
        "how far the benchmark's own medians move between identical variants)",
    )
    p.add_argument(
        "--aligned-compute",
        action="store_true",
        help="also time compute alone with every rank starting each forward pass and optimizer "
        "step together, as synchronous strategies do (for bench sim --paired-compute aligned)",
    )
    p.add_argument(
        "--keep-subnormals",
        action="store_true",
        help="leave subnormal floats as they are (default: flush them to zero; memorising the "
        "synthetic set drives cnn_lstm's gradients subnormal, slowing its step 1.3-1.4x)",
    )
    add_host_cpus(p, default="shared")
    p.add_argument("--out", default="results/bench-dp-paired.json", help="JSON; PNG next to it")
    p.set_defaults(func=_cmd_dp_paired)


def _cmd_dp_timeline(args: argparse.Namespace) -> int:
    from cadence.bench.dp_timeline import DPTimelineConfig, run_dp_timeline

    config = DPTimelineConfig(
        model=args.model,
        cap=args.cap,
        workers=args.workers,
        batch_size=args.batch_size,
        steps=args.steps,
        record_step=args.record_step,
        threshold_mb=args.threshold_mb,
        reorder_k=args.reorder_k,
        ddp_bucket_mb=args.ddp_bucket_mb,
        compute_alone=args.compute_alone,
        out=args.out,
    )
    run_dp_timeline(config, command_line())
    return 0


def add_dp_timeline(bsub: Any) -> None:
    p = bsub.add_parser(
        "dp-timeline",
        help="picture of one measured iteration, DDP above cadence-dp on one time axis "
        "(compute, all-reduce and update rows)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", default="vgg16")
    p.add_argument("--cap", default="400mbit", help="link cap; none = loopback")
    add_world(p)
    p.add_argument("--steps", type=int, default=10, help="steps per run")
    p.add_argument(
        "--record-step",
        type=int,
        default=6,
        help="0-based step pictured; the one before and two after are traced too (from 6 on, "
        "after cadence-dp's one-chunk steps and its first chunked one)",
    )
    add_threshold(p)
    add_reorder_k(p)
    p.add_argument("--ddp-bucket-mb", type=float, default=25.0, help="DDP bucket size")
    p.add_argument(
        "--compute-alone",
        action="store_true",
        help="also trace the same steps with no synchronisation (every rank training alone, "
        "all at once) and say how much each strategy slowed its forward and backward passes",
    )
    p.add_argument("--out", default="results/dp-timeline.png", help="PNG; JSON events next to it")
    p.set_defaults(func=_cmd_dp_timeline)


def _cmd_dp_autotune(args: argparse.Namespace) -> int:
    from cadence.bench.dp_autotune import DPAutotuneBenchConfig, run_dp_autotune_bench

    config = DPAutotuneBenchConfig(
        model=args.model,
        cap=args.cap,
        workers=args.workers,
        batch_size=args.batch_size,
        threshold_mb=args.threshold_mb,
        trials=args.trials,
        steps=args.steps,
        repeats=args.repeats,
        out=args.out,
    )
    run_dp_autotune_bench(config, command_line())
    return 0


def add_dp_autotune(bsub: Any) -> None:
    p = bsub.add_parser(
        "dp-autotune",
        help="cadence-dp warm-up tuning, guided vs exhaustive: iterations spent and the "
        "measured iteration time of each one's choice",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", default="vgg16")
    p.add_argument("--cap", default="400mbit", help="link cap of the emulated cluster")
    add_world(p)
    p.add_argument("--threshold-mb", type=float, default=4.0, help="threshold tuning starts at")
    p.add_argument("--trials", type=int, default=100, help="exhaustive: thresholds, +10%% each")
    p.add_argument("--steps", type=int, default=12, help="steps per comparison run")
    p.add_argument("--repeats", type=int, default=2, help="comparison runs per choice")
    p.add_argument("--out", default="results/dp-autotune.json", help="JSON; PNG next to it")
    p.set_defaults(func=_cmd_dp_autotune)
