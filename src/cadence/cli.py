"""The `cadence` command. Bad input ends with one line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from cadence.errors import UserError, WorkerFailed
from cadence.profile.record import DEFAULT_BLOCK_TIMING
from cadence.sizes import parse_memory_limit


def _write_json(path: str | None, data: Any) -> None:
    if path is None:
        return
    try:
        Path(path).write_text(json.dumps(data, indent=2) + "\n")
    except OSError as exc:
        raise UserError(f"cannot write --json file '{path}': {exc.strerror or exc}") from None


def _cmd_train(args: argparse.Namespace) -> int:
    from cadence.config import TrainConfig
    from cadence.train.run import summary_lines, train

    config = TrainConfig(
        model=args.model,
        dataset=args.dataset,
        loss=args.loss,
        workers=args.workers,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        epochs=args.epochs,
        steps=args.steps,
        lr=args.lr,
        optimizer=args.optimizer,
        momentum=args.momentum,
        strategy=args.strategy,
        seed=args.seed,
        out=args.out,
        name=args.name,
        threads=args.threads,
        device=args.device,
        emulate_bandwidth=args.emulate_bandwidth,
        master_port=args.master_port,
        ddp_bucket_mb=args.bucket_mb,
        dp_threshold_mb=args.threshold_mb,
        reorder_k=args.reorder_k,
        autotune=args.autotune,
        autotune_file=args.autotune_file,
        autotune_trials=args.autotune_trials,
        zero_stage=args.zero_stage,
        compression=args.compression,
        freeze_steps=args.freeze_steps,
        replicated_update=args.replicated_update,
        replicated_share=args.replicated_share,
        gather_dtype=args.gather_dtype,
        overlap_gather=args.overlap_gather,
        stages=args.stages,
        microbatches=args.microbatches,
        schedule=args.schedule,
        recompute=args.recompute,
        pipeline_backend=args.pipeline_backend,
        memory_limit=parse_memory_limit(args.memory_limit),
        replan_every=args.replan_every,
        replan_file=args.replan_file,
        servers=args.servers,
        consistency=args.consistency,
        ps_checkpoint_dir=args.ps_checkpoint_dir,
        ps_checkpoint_every=args.ps_checkpoint_every,
        ps_dead_after_s=args.ps_dead_after,
        ps_priority=args.ps_priority,
        straggler=args.straggler,
    )
    metrics, run_dir = train(config)
    if run_dir is not None:
        for line in summary_lines(metrics, run_dir):
            print(line)
        _write_json(args.json, metrics)
    return 0


def _cmd_models(args: argparse.Namespace) -> int:
    from cadence.models import get_model_spec, model_names

    rows = []
    for name in model_names():
        spec = get_model_spec(name)
        params = sum(p.numel() for p in spec.build().parameters())
        rows.append(
            {
                "name": name,
                "parameters": params,
                "datasets": list(spec.datasets),
                "description": spec.description,
            }
        )
        print(
            f"{name:<10} {params / 1e6:7.2f}M  datasets: {', '.join(spec.datasets):<28} "
            f"{spec.description}"
        )
    _write_json(args.json, rows)
    return 0


def _cmd_netem(args: argparse.Namespace) -> int:
    from cadence import netem

    data: Any
    if args.netem_cmd == "up":
        data = netem.netem_up(
            args.hosts, netem.parse_bandwidth(args.bandwidth),
            priority_classes=args.priority_classes,
            congestion_control=args.congestion_control,
            port_queue=args.port_queue,
            slow_start_after_idle=args.slow_start_after_idle,
        ).to_json()  # fmt: skip
    elif args.netem_cmd == "down":
        netem.netem_down(args.cluster, all=args.all)
        return 0
    elif args.netem_cmd == "status":
        data = [info.to_json() for info in netem.netem_status()]
    elif args.netem_cmd == "load":
        _netem_load(args.cluster, args.src, args.dst, args.seconds)
        return 0
    else:
        bandwidth = netem.parse_bandwidth(args.bandwidth) if args.bandwidth else None
        if bandwidth is None and args.cluster is None:
            bandwidth = netem.parse_bandwidth("1gbit")
        data = netem.netem_probe(
            args.cluster, bandwidth, args.src, args.dst, args.seconds
        ).to_json()
    _write_json(args.json, data)
    return 0


def _netem_load(cluster_id: str | None, src: int, dst: int, seconds: float) -> None:
    """`cadence netem load`: TCP bulk traffic src -> dst in a running cluster, as a shared
    cluster's other jobs would make, for `seconds` (0: until Ctrl-C)."""
    import time

    from cadence import netem

    netem.check_netem_available()
    if seconds < 0:
        raise UserError(f"--seconds must be 0 (until Ctrl-C) or more (got {seconds})")
    infos = [i for i in netem.list_clusters() if cluster_id in (None, i.cluster_id)]
    if len(infos) != 1:
        found = ", ".join(i.cluster_id for i in netem.list_clusters()) or "none"
        what = f"no emulated cluster with id {cluster_id!r}" if cluster_id else "say which cluster"
        raise UserError(f"{what} (found: {found}); start one with `cadence netem up`")
    with netem.start_background_load(netem.EmulatedCluster.attach(infos[0]), src, dst):
        until = "Ctrl-C" if seconds == 0 else f"{seconds:g} s"
        print(f"loading h{src} -> h{dst} of cluster {infos[0].cluster_id} for {until}", flush=True)
        deadline = time.monotonic() + (seconds or float("inf"))
        while time.monotonic() < deadline:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def _cmd_profile(args: argparse.Namespace) -> int:
    from cadence.profile import profile_command

    profile = profile_command(
        args.model,
        batch_size=args.batch_size,
        iterations=args.iterations,
        out=args.out,
        threads=args.threads,
        device=args.device,
        block_timing=args.block_timing,
    )
    _write_json(args.json, profile.to_dict())
    return 0


def _add_profile(sub: Any) -> None:
    p = sub.add_parser(
        "profile",
        help="time every block (forward, input-grad, weight-grad) and record sizes and memory",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", default="vgg16", help="model zoo name")
    p.add_argument("--batch-size", type=int, default=32, help="per-worker batch")
    p.add_argument("--iterations", type=int, default=10, help="timed iterations (median)")
    p.add_argument("--threads", type=int, default=1, help="intra-op CPU threads")
    p.add_argument("--device", default="auto", help="cpu, cuda, or auto (cuda where there is one)")
    p.add_argument(
        "--block-timing",
        default=DEFAULT_BLOCK_TIMING,
        help="in-iteration (each block's share of whole iterations), separate (each block's "
        "forward and gradients in calls of their own), or auto (in-iteration on CUDA, separate "
        "on the CPU, as the pipeline planners profile)",
    )
    p.add_argument("--out", default=None, help="save the profile JSON here")
    p.add_argument("--json", default=None, metavar="FILE", help="same as --out")
    p.set_defaults(func=_cmd_profile)


def _add_train(sub: Any) -> None:
    p = sub.add_parser(
        "train",
        help="train a model on local workers, under torchrun, or in an emulated cluster",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--model",
        default="cnn",
        help="model zoo name (see `cadence models`), or pkg.module:factory: factory() returns "
        "your nn.Module (docs/your-model.md)",
    )
    p.add_argument(
        "--dataset",
        default=None,
        help="digits, stdlib-text or synthetic (default: the zoo model's own), or "
        "pkg.module:factory: factory() returns (train, test) of (input, target) samples",
    )
    p.add_argument(
        "--loss",
        default=None,
        metavar="PKG.MODULE:FN",
        help="fn(output, target) -> mean loss (default: cross entropy over the last dimension)",
    )
    p.add_argument("--workers", type=int, default=2, help="local worker processes")
    p.add_argument("--batch-size", type=int, default=64, help="global batch per step")
    p.add_argument(
        "--grad-accum",
        type=int,
        default=1,
        metavar="N",
        help="N micro-batches of --batch-size/N per optimizer step, gradients synced once "
        "(pipeline: N x --microbatches in one step)",
    )
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--steps", type=int, default=None, help="run exactly this many steps instead")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--optimizer", default="adam", help="adam, adamw or sgd")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--strategy", default="ddp", help="distribution strategy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs", help="runs directory")
    p.add_argument("--name", default=None, help="run name (default: model-strategy-time)")
    p.add_argument(
        "--threads", type=int, default=None, help="threads per worker (default: cores / workers)"
    )
    p.add_argument(
        "--device",
        default="auto",
        help="auto (a GPU per worker where there are enough, else the CPU), cpu, or cuda "
        "(fewer GPUs than workers: shared over gloo)",
    )
    p.add_argument(
        "--emulate-bandwidth",
        default=None,
        metavar="RATE",
        help="run workers as hosts of an emulated cluster capped at RATE, e.g. 400mbit",
    )
    p.add_argument("--master-port", type=int, default=None, help="rendezvous port (default: free)")
    p.add_argument(
        "--bucket-mb", type=float, default=25.0, help="ddp: gradient bucket size in MB"
    )
    p.add_argument(
        "--threshold-mb",
        type=float,
        default=None,
        help="cadence-dp: split/fuse threshold in MB, where autotuning starts (default: a "
        "quarter of the model's gradients, within 1-4 MB)",
    )
    p.add_argument(
        "--reorder-k",
        type=int,
        default=None,
        help="cadence-dp: backward reordering point K (default: autograd's order)",
    )
    p.add_argument(
        "--autotune",
        default="off",
        help="cadence-dp: tune threshold and K in warm-up: off, exhaustive or guided",
    )
    p.add_argument(
        "--autotune-file",
        default=None,
        metavar="FILE",
        help="cadence-dp: save the tuned setting here; reuse it when the file exists",
    )
    p.add_argument(
        "--autotune-trials",
        type=int,
        default=100,
        help="cadence-dp exhaustive tuning: thresholds tried, each 10%% above the last",
    )
    # --strategy zero (cadence.zero)
    p.add_argument("--zero-stage", type=int, default=2, help="ZeRO stage 1, 2 or 3")
    p.add_argument(
        "--compression", default="none", help="ZeRO traffic: none, fp16 or onebit (1-bit Adam)"
    )
    p.add_argument(
        "--freeze-steps", type=int, default=100, help="1-bit Adam warm-up steps (plain Adam)"
    )
    p.add_argument(
        "--replicated-update",
        action="store_true",
        help="ZeRO 1-2 with onebit: every rank updates every piece after warm-up, so no "
        "parameters are all-gathered (4 more bytes per parameter per rank)",
    )
    p.add_argument(
        "--replicated-share",
        type=float,
        default=1.0,
        metavar="S",
        help="with --replicated-update: only the front blocks within this share of the "
        "parameters are updated on every rank, the rest gathered (default 1: all)",
    )
    p.add_argument(
        "--gather-dtype",
        default="fp32",
        help="ZeRO parameter all-gather: fp32 or bf16 (half the bytes, bf16-rounded parameters)",
    )
    p.add_argument(
        "--overlap-gather",
        action="store_true",
        help="ZeRO 1-2: each block waits for its own parameter gather just before its forward",
    )
    # --strategy pipeline (cadence.pipeline)
    p.add_argument(
        "--stages", type=int, default=2, help="pipeline stages; --workers/--stages replicas"
    )
    p.add_argument("--microbatches", type=int, default=4, help="pipeline micro-batches per step")
    p.add_argument(
        "--schedule",
        default="1f1b",
        help="pipeline schedule: gpipe, 1f1b, kfkb:K, or auto (simulate every schedule and "
        "micro-batch split at start under the probed link and --memory-limit; pick the fastest)",
    )
    p.add_argument(
        "--memory-limit", default=None, help="pipeline --schedule auto: bytes per stage, e.g. 2GiB"
    )
    p.add_argument(
        "--recompute", action="store_true", help="pipeline: recompute activations in backward"
    )
    p.add_argument(
        "--replan-every", type=int, default=0, metavar="N",
        help="pipeline --schedule auto: every N steps re-probe the link and re-plan (0: never)",
    )  # fmt: skip
    p.add_argument(
        "--replan-file", default=None, metavar="PATH",
        help="pipeline --schedule auto: re-plan before the next step when PATH appears "
        "(`touch PATH`; rank 0 deletes it)",
    )  # fmt: skip
    p.add_argument(
        "--pipeline-backend",
        default="auto",
        help="pipeline runtime: auto, cadence, torch (torch's runtime on our action lists) "
        "or torch-builtin (torch's ScheduleGPipe/Schedule1F1B)",
    )
    # --strategy ps (cadence.ps)
    p.add_argument("--servers", type=int, default=1, help="ps: parameter server processes")
    p.add_argument(
        "--consistency", default="bsp", help="ps: bsp, asp, ssp:S (staleness) or backup:K"
    )
    p.add_argument(
        "--ps-priority",
        default="graph",
        help="ps: transfer order fifo, layer or graph; ORDER+net (e.g. graph+net) also "
        "installs priority classes on the emulated switch ports (needs --emulate-bandwidth)",
    )
    p.add_argument(
        "--straggler",
        default=None,
        metavar="RANK:DELAY",
        help="ps: that worker sleeps DELAY seconds every step",
    )
    p.add_argument(
        "--ps-checkpoint-dir",
        default=None,
        metavar="DIR",
        help="ps: servers save shards + optimizer state here at the end (and every "
        "--ps-checkpoint-every steps) and restore them on start when present",
    )
    p.add_argument(
        "--ps-checkpoint-every", type=int, default=0, metavar="N", help="ps: checkpoint period"
    )
    p.add_argument(
        "--ps-dead-after",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="ps: a worker silent this long is declared dead (asp/ssp/backup train on "
        "without it, bsp stops naming it)",
    )
    p.add_argument("--json", default=None, metavar="FILE", help="also write the metrics here")
    p.set_defaults(func=_cmd_train)


def _add_netem(sub: Any) -> None:
    p = sub.add_parser("netem", help="emulated cluster: network namespaces with capped links")
    nsub = p.add_subparsers(dest="netem_cmd", required=True)
    up = nsub.add_parser("up", help="create a persistent emulated cluster")
    up.add_argument("--hosts", type=int, default=2)
    up.add_argument("--bandwidth", default="1gbit", help="link cap, e.g. 400mbit")
    up.add_argument(
        "--priority-classes", type=int, default=0, metavar="N",
        help="N (2-4) htb priority classes on every port, by the TOS byte the parameter "
        "server's channels mark (default 0: one tbf per port)",
    )  # fmt: skip
    up.add_argument(
        "--congestion-control", default=None, metavar="NAME",
        help="TCP congestion control of every host (default cubic, or "
        "$CADENCE_NETEM_CONGESTION_CONTROL; e.g. bbr or reno)",
    )  # fmt: skip
    up.add_argument(
        "--port-queue", default=None, choices=("fifo", "per-peer"),
        help="how every capped port queues: one FIFO (tbf), or an even share for each other "
        "host (htb), as a real host's fair queues give (default per-peer, or "
        "$CADENCE_NETEM_PORT_QUEUE; fifo under priority classes)",
    )  # fmt: skip
    up.add_argument(
        "--slow-start-after-idle", default=None, action=argparse.BooleanOptionalAction,
        help="whether hosts start an idle TCP connection's window again, as Linux does by "
        "default (net.ipv4.tcp_slow_start_after_idle; default off, or "
        "$CADENCE_NETEM_SLOW_START_AFTER_IDLE=1|0)",
    )  # fmt: skip
    up.add_argument("--json", default=None, metavar="FILE")
    down = nsub.add_parser("down", help="remove an emulated cluster")
    down.add_argument("cluster", nargs="?", default=None, help="cluster id (see status)")
    down.add_argument("--all", action="store_true", help="remove every cadence cluster")
    status = nsub.add_parser("status", help="list emulated clusters")
    status.add_argument("--json", default=None, metavar="FILE")
    probe = nsub.add_parser("probe", help="measure bandwidth between two hosts")
    probe.add_argument(
        "cluster",
        nargs="?",
        default=None,
        help="cluster id; default: a temporary 2-host cluster at --bandwidth",
    )
    probe.add_argument(
        "--bandwidth", default=None, help="cap of the temporary cluster (default 1gbit)"
    )
    probe.add_argument("--src", type=int, default=0)
    probe.add_argument("--dst", type=int, default=1)
    probe.add_argument("--seconds", type=float, default=2.0)
    probe.add_argument("--json", default=None, metavar="FILE")
    load = nsub.add_parser("load", help="background TCP traffic over one link (contention)")
    load.add_argument("cluster", nargs="?", default=None, help="cluster id (default: the only one)")
    load.add_argument("--src", type=int, default=0, help="sending host")
    load.add_argument("--dst", type=int, default=1, help="receiving host")
    load.add_argument("--seconds", type=float, default=0.0, help="duration; 0: until Ctrl-C")
    p.set_defaults(func=_cmd_netem)


class _OneLineParser(argparse.ArgumentParser):
    """Bad flags are one line naming the flag (argparse prints the whole usage block first);
    subcommands' parsers are of this class too (argparse makes them from the parent's)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} -h')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="cadence",
        description="Faster distributed PyTorch training by scheduling computation and "
        "communication.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_train(sub)
    _add_netem(sub)
    _add_profile(sub)
    from cadence.bench.cli import add_bench  # `cadence bench ...` lives in cadence.bench
    from cadence.sim.cli import add_bench_sim, add_calibrate, add_plan, add_simulate

    add_simulate(sub)
    add_plan(sub)
    add_calibrate(sub)
    add_bench_sim(add_bench(sub))
    models = sub.add_parser("models", help="list the model zoo")
    models.add_argument("--json", default=None, metavar="FILE")
    models.set_defaults(func=_cmd_models)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list:
        args_list = ["train"]  # the embedded default job
    bare_plan = args_list[0] == "plan" and (len(args_list) == 1 or args_list[1][:1] == "-")
    if bare_plan and args_list[1:2] not in (["-h"], ["--help"]):
        args_list.insert(1, "strategies")  # `cadence plan --model ...` ranks everything
    parser = build_parser()
    args = parser.parse_args(args_list)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except (UserError, WorkerFailed) as exc:
        print(f"cadence: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UserError) else 1
    except KeyboardInterrupt:
        print("cadence: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
