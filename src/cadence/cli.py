"""The `cadence` command. Bad input ends with one line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from cadence.errors import UserError, WorkerFailed
from cadence.profile.record import DEFAULT_BLOCK_TIMING


def _write_json(path: str | None, data: Any) -> None:
    if path is None:
        return
    try:
        Path(path).write_text(json.dumps(data, indent=2) + "\n")
    except OSError as exc:
        raise UserError(f"cannot write --json file '{path}': {exc.strerror or exc}") from None


def _cmd_train(args: argparse.Namespace) -> int:
    from cadence.config_flags import config_from_args

    config = config_from_args(args)  # a bad file or value is refused before torch loads
    from cadence.train.run import summary_lines, train

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
            args.hosts, netem.parse_bandwidth(args.emulate_bandwidth),
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
        rate = args.emulate_bandwidth
        bandwidth = netem.parse_bandwidth(rate) if rate else None
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
        batch_size=args.micro_batch_size,
        iterations=args.profile_iterations,
        out=args.out,
        threads=args.threads,
        device=args.device,
        block_timing=args.block_timing,
        neighbours=args.workers_per_host - 1,
    )
    _write_json(args.json, profile.to_dict())
    return 0


def _add_profile(sub: Any) -> None:
    from cadence.command_options import ProfileOptions, SimulateOptions
    from cadence.config import ClusterSection, ModelSection
    from cadence.config_flags import FlagSet, add_flags
    from cadence.sim.cli import refuse_global_batch

    p = sub.add_parser(
        "profile",
        help="time every block (forward, input-grad, weight-grad) and record sizes and memory",
    )
    profile = ("micro_batch_size", "profile_iterations", "block_timing", "out", "workers_per_host")
    add_flags(
        p,
        [
            FlagSet("model", ModelSection, only=("name",), defaults={"name": "vgg16"}),
            FlagSet("cluster", ClusterSection, only=("threads", "device"),
                    defaults={"threads": 1}),
            FlagSet("profile", ProfileOptions, only=profile,
                    defaults={"block_timing": DEFAULT_BLOCK_TIMING, "profile_iterations": 10}),
            FlagSet("simulate", SimulateOptions, only=("json",)),
        ],
    )  # fmt: skip
    refuse_global_batch(p)
    p.set_defaults(func=_cmd_profile)


def _add_train(sub: Any) -> None:
    from cadence.command_options import SimulateOptions
    from cadence.config import SECTIONS
    from cadence.config_flags import FlagSet, add_flags

    p = sub.add_parser(
        "train",
        help="train a model on local workers, under torchrun, or in an emulated cluster",
        usage="%(prog)s [--config FILE] [--json FILE] [--FLAG VALUE ...]",
        description="Train a model. Every setting is a field of cadence.TrainConfig, grouped "
        "in sections below; --config FILE reads them from a TOML file ([section] tables of "
        "field = value, e.g. [data] batch_size = 64) and the flags given override the file.",
    )
    sections = [FlagSet(name, cls) for name, cls in SECTIONS.items()]
    add_flags(p, [*sections, FlagSet("simulate", SimulateOptions, only=("json",))])
    p.set_defaults(func=_cmd_train)


def _add_netem(sub: Any) -> None:
    from cadence.command_options import NetemOptions, SimulateOptions
    from cadence.config import ClusterSection
    from cadence.config_flags import FlagSet, add_flags

    def netem(*only: str, **defaults: object) -> FlagSet:
        return FlagSet("netem", NetemOptions, only=only, defaults=defaults)

    output = FlagSet("simulate", SimulateOptions, only=("json",))
    # The cap means what `cadence train --emulate-bandwidth` means: one field, one flag.
    cap = FlagSet("cluster", ClusterSection, only=("emulate_bandwidth",))

    p = sub.add_parser("netem", help="emulated cluster: network namespaces with capped links")
    nsub = p.add_subparsers(dest="netem_cmd", required=True)
    link = ("priority_classes", "congestion_control", "port_queue", "slow_start_after_idle")
    up = nsub.add_parser("up", help="create a persistent emulated cluster")
    up_cap = dataclasses.replace(cap, defaults={"emulate_bandwidth": "1gbit"})
    add_flags(up, [netem("hosts", *link), up_cap, output])
    down = nsub.add_parser("down", help="remove an emulated cluster")
    down.add_argument("cluster", nargs="?", default=None, help="cluster id (see status)")
    add_flags(down, [netem("remove_all")])
    status = nsub.add_parser("status", help="list emulated clusters")
    add_flags(status, [output])
    probe = nsub.add_parser("probe", help="measure bandwidth between two hosts")
    probe.add_argument(
        "cluster", nargs="?", default=None,
        help="cluster id; default: a temporary 2-host cluster at --emulate-bandwidth (none: "
        "1gbit)",
    )  # fmt: skip
    add_flags(probe, [netem("src", "dst", "seconds"), cap, output])
    load = nsub.add_parser("load", help="background TCP traffic over one link (contention)")
    load.add_argument("cluster", nargs="?", default=None, help="cluster id (default: the only one)")
    add_flags(load, [netem("src", "dst", "seconds", seconds=0.0)])
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
    from cadence.command_options import SimulateOptions
    from cadence.config_flags import FlagSet, add_flags

    add_flags(models, [FlagSet("simulate", SimulateOptions, only=("json",))])
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
        if hasattr(args, "_flag_sets"):  # defaults < --config FILE < flags, each value checked
            from cadence.config_flags import resolve_flags

            resolve_flags(args)
        return func(args)
    except (UserError, WorkerFailed) as exc:
        print(f"cadence: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UserError) else 1
    except KeyboardInterrupt:
        print("cadence: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
