"""`cadence calibrate`: time collectives on real or emulated links and save the fitted
alpha-beta model that `cadence simulate --calibration FILE` and `cadence plan` read.

Three ways to run it:
- under torchrun on a real cluster (RANK and WORLD_SIZE set): every rank runs in-process and
  rank 0 writes the file;
- with `--emulate-bandwidth` a cap: `--workers` hosts of an emulated cluster (network namespaces,
  root), each rank's timed blocks started with the links' token bucket drained;
- without it (the default): `--workers` processes on this machine's loopback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from cadence.comm.calibrate_plan import (
    DEFAULT_SIZES,
    MODEL_OF,
    P2P_MODEL_OF,
    calls_per_round,
    sizes_for,
)
from cadence.errors import UserError

DEFAULT_COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "broadcast", *P2P_MODEL_OF)


@dataclass(frozen=True)
class CalibrateConfig:
    """What `cadence calibrate` times and where it writes the result."""

    out: str = "calibration.json"
    """The calibration JSON (`cadence.comm.calibration.Calibration`), written by rank 0."""
    workers: int = 2
    """Ranks on this machine (loopback or emulated hosts); under torchrun, its world size."""
    bandwidth: str = "none"
    """Emulated link cap (e.g. 400mbit, needs root); "none": this machine's loopback."""
    collectives: tuple[str, ...] = DEFAULT_COLLECTIVES
    """Collectives to time (`calibrate_plan.MODEL_OF`): gloo's all_reduce, all_gather and
    broadcast, and cadence's own ring_all_reduce, ring_reduce_scatter and ring_all_gather that
    the ZeRO executor runs. All-reduce is always timed (beta and the base alpha are fitted to
    it) and every other one gets an alpha of its own."""
    sizes: tuple[int, ...] = DEFAULT_SIZES
    """Message sizes in bytes (at least two: one latency-bound, one bandwidth-bound)."""
    repeats: int = 5
    """Timed rounds per size after warm-up; the slowest rank's median is kept."""
    warmup: int = 2
    """Untimed rounds before them."""

    def __post_init__(self) -> None:
        unknown = [c for c in self.collectives if c not in MODEL_OF]
        if unknown:
            raise UserError(
                f"unknown collective {unknown[0]!r}: choose from {', '.join(MODEL_OF)}"
            )
        if self.workers < 2:
            raise UserError(f"--workers must be at least 2, got {self.workers}")
        if len(self.sizes) < 2 or min(self.sizes) < 4:
            raise UserError("--sizes needs at least two sizes of 4 bytes or more")
        if self.repeats < 1 or self.warmup < 0:
            raise UserError("--repeats must be >= 1 and --warmup >= 0")
        self.bandwidth_bps  # noqa: B018 - a bad cap is a one-line error before anything runs

    @property
    def bandwidth_bps(self) -> float | None:
        """The emulated cap in bit/s, None on the loopback."""
        from cadence.netem import parse_bandwidth

        bps = parse_bandwidth(self.bandwidth)
        return None if math.isinf(bps) else bps

    def drain_bytes(self) -> int:
        """Twice the token bucket the emulated cluster gives its links (0 on the loopback or a
        real cluster): every timed block then starts at the link's steady rate."""
        from cadence.netem._bandwidth import link_bucket_bytes

        bps = self.bandwidth_bps
        return 0 if bps is None else 2 * link_bucket_bytes(bps, False)

    def link_seconds(self) -> float:
        """A floor on the time the links are busy: every call's bytes at the cap, as the cost
        model counts them for `workers` ranks (0 on the loopback)."""
        from cadence.comm.cost import AlphaBeta

        bps = self.bandwidth_bps
        if bps is None:
            return 0.0
        wire = AlphaBeta.from_bandwidth(bps)
        per_round = sum(
            calls_per_round(n) * wire.time(*MODEL_OF[c], n, self.workers)
            for c in self.collectives
            for n in sizes_for(c, self.sizes)
        )
        return per_round * (self.warmup + self.repeats)


def calibrate_command(args: argparse.Namespace) -> int:
    """Parse, run on the chosen links, print the table and write `--out`."""
    from cadence.bench.collectives import _check_writable, parse_sizes
    from cadence.launch import torchrun_env_present

    collectives = tuple(c.strip() for c in args.collectives.split(",") if c.strip())
    config = CalibrateConfig(
        out=args.out,
        workers=args.workers,
        bandwidth=args.emulate_bandwidth or "none",
        collectives=("all_reduce", *(c for c in collectives if c != "all_reduce")),
        sizes=parse_sizes(args.sizes),
        repeats=args.repeats,
        warmup=args.warmup,
    )
    out = Path(config.out)
    if torchrun_env_present():
        if config.bandwidth_bps is not None:
            raise UserError(
                "under torchrun the links are the cluster's own: drop --emulate-bandwidth"
            )
        from cadence.comm._calibrate_worker import run

        if os.environ.get("RANK") == "0":  # the one rank that writes, and speaks
            _check_writable(out)
            print(f"timing {', '.join(config.collectives)} at {len(config.sizes)} sizes on "
                  f"the cluster's links ({config.warmup} warm-up and {config.repeats} timed "
                  "rounds)", flush=True)  # fmt: skip
        text = run(config)
        if text is not None:
            print(text)
            print(f"wrote {out}")
        return 0
    _check_writable(out)
    return run_calibration(config, out)


def run_calibration(config: CalibrateConfig, out: Path) -> int:
    """Time the collectives on the loopback or emulated links (not under torchrun), print
    the table and write `out`."""
    from cadence.bench._launch import run_workers_on_link
    from cadence.comm.calibrate import Calibration
    from cadence.netem import check_netem_available, format_bandwidth
    from cadence.netem._congestion import default_congestion_control
    from cadence.netem.fair import default_port_queue

    bps = config.bandwidth_bps
    if bps is not None:
        check_netem_available()
    where = "this machine's loopback" if bps is None else (
        f"{config.workers} emulated hosts at {format_bandwidth(bps)} (TCP "
        f"{default_congestion_control()}, {default_port_queue()} port queues)"
    )  # fmt: skip
    link_s = config.link_seconds()
    print(
        f"timing {', '.join(config.collectives)} at {len(config.sizes)} sizes on {where} "
        f"({config.warmup} warm-up and {config.repeats} timed rounds)"
        + (f": at least ~{link_s:.0f} s on the links" if link_s else ""),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="cadence-calibrate-") as tmp:
        run_dir = Path(tmp)
        # Rank 0 writes --out itself (through a temporary file); the path is absolute because
        # the workers need not share this process's working directory.
        worker_config = {**asdict(config), "out": str(out.resolve())}
        (run_dir / "config.json").write_text(json.dumps(worker_config))
        # Only a hung run reaches this: the links' floor, many times over, plus start-up.
        timeout_s = 300 + 20 * link_s
        run_workers_on_link(bps, config.workers, "cadence.comm._calibrate_worker",
                            [str(run_dir / "config.json")], run_dir, 1, timeout_s)  # fmt: skip
    print(Calibration.load(out).table())
    print(f"wrote {out}")
    return 0


CLUSTER_SIZES = (1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
"""Message sizes `calibrate_cluster` times: from a latency-bound all-reduce to past the largest
gradient bucket or outer sync of the bundled models."""


def calibrate_cluster(cap: str, hosts: int, path: Path) -> Path:
    """`cadence calibrate` on the links a benchmark's job runs on (`hosts` emulated at `cap`,
    or the loopback for "none"), as a user calibrates theirs before planning: every default
    collective, 3 timed rounds. A calibration already at `path` is kept."""
    if path.exists():
        return path
    config = CalibrateConfig(
        out=str(path), workers=hosts, bandwidth=cap, sizes=CLUSTER_SIZES, repeats=3, warmup=1
    )
    run_calibration(config, path)
    return path
