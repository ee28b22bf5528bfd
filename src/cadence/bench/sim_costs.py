"""`cadence bench costs`: measure this machine's charges for `cadence bench sim`, in one go.

The simulator's closest predictions of emulated-cluster runs charge three costs that depend on
the machine and its links, not on the run: the processor time communication takes from
compute (`cadence bench contention`), each message's latency per collective (`cadence
calibrate` on the emulated links) and the processor time DDP's and cadence-dp's own machinery
takes (`cadence bench runtime-cost`, per model), and since 2026-11-28 the time DDP loses where
its processes leave glibc's heap thresholds dynamic (`cadence bench heap-cost`, per model).
This command runs them one after the other into one folder that `cadence bench sim --costs
DIR` reads. Each file is the usual output of its command, written as soon as its part ends,
so a failure keeps the parts done. Folders made before heap-cost existed lack its file; they
are read without it (no heap charge).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cadence.errors import UserError

if TYPE_CHECKING:
    from cadence.comm.calibrate import Calibration

PARTS: tuple[str, ...] = ("contention", "calibration", "runtime-cost", "heap-cost")
"""What the command measures, in the order it measures them."""

OPTIONAL_PARTS: tuple[str, ...] = ("heap-cost",)
"""Parts a folder may lack (made before they existed): read as no charge."""

FILE_OF: dict[str, str] = {part: f"{part}.json" for part in PARTS}
"""Each part's file inside the folder."""

DEFAULT_MODELS: tuple[str, ...] = ("cnn_lstm", "resnet32", "gpt_mini", "vgg16")
"""The models of the data-parallel benchmark."""


@dataclass(frozen=True)
class CostsConfig:
    """What `cadence bench costs` measures and where it writes."""

    out_dir: str = "results/costs"
    """Folder for contention.json, calibration.json, runtime-cost.json and heap-cost.json."""
    bandwidth: str = "400mbit"
    """Emulated link cap for the contention and calibration parts (the latencies it fits
    are per message, so one cap serves the runs at every cap)."""
    hosts: int = 2
    """Emulated hosts and processes computing at once, as in the runs to predict."""
    models: tuple[str, ...] = DEFAULT_MODELS
    """Zoo models whose runtime and heap costs are measured (a prediction needs its model's)."""
    batch_size: int = 64
    """Global batch of the runs to predict (the runtime-cost part computes each host's share)."""
    parts: tuple[str, ...] = PARTS
    """Which parts to measure; the others' files are left as they are."""

    def __post_init__(self) -> None:
        unknown = [p for p in self.parts if p not in PARTS]
        if unknown or not self.parts:
            raise UserError(
                f"unknown part {unknown[0] if unknown else '(none)'!r}: choose from "
                f"{', '.join(PARTS)}"
            )
        if self.hosts < 2:
            raise UserError(f"--hosts must be at least 2, got {self.hosts}")
        if not self.models:
            raise UserError("--models needs at least one model")
        from cadence.models import get_model_spec
        from cadence.netem import parse_bandwidth

        for model in self.models:
            get_model_spec(model)  # an unknown name is a one-line UserError
        if parse_bandwidth(self.bandwidth) == float("inf"):
            raise UserError("--bandwidth must be a cap, e.g. 400mbit (the parts run on it)")

    def path(self, part: str) -> Path:
        """Where `part`'s file goes."""
        return Path(self.out_dir) / FILE_OF[part]


def costs_files(folder: str) -> dict[str, str | None]:
    """part -> file of a `cadence bench costs` folder (None: an `OPTIONAL_PARTS` file it
    lacks); a missing folder or other file is a one-line UserError that says how to make it."""
    root = Path(folder)
    if not root.is_dir():
        raise UserError(f"--costs {folder}: no such folder (make it with `cadence bench costs`)")
    files = {part: root / name for part, name in FILE_OF.items()}
    missing = [
        str(path)
        for part, path in files.items()
        if not path.is_file() and part not in OPTIONAL_PARTS
    ]
    if missing:
        raise UserError(
            f"--costs {folder}: missing {', '.join(missing)} "
            f"(`cadence bench costs --out-dir {folder}` measures it)"
        )
    return {part: str(path) if path.is_file() else None for part, path in files.items()}


def _contention(config: CostsConfig, command: str) -> None:
    from cadence.bench.contention import ContentionConfig, run_contention_bench

    # The settings of the fit the simulator was validated with (2026-11-26): gpt_mini's
    # training as the compute, short windows, five rounds per size.
    part = ContentionConfig(
        bandwidth=config.bandwidth,
        hosts=config.hosts,
        model="gpt_mini",
        batch_size=32,
        iterations=4,
        rounds=5,
        out=str(config.path("contention")),
    )
    run_contention_bench(part, command)


SMALL_BYTES = 16 << 10
"""All-reduces up to this size are latency-bound on the emulated links: alpha comes from them."""

UNSTEADY_SPREAD = 2.0
"""Slowest over fastest small all-reduce per call above which the alpha is flagged."""


def latency_warning(calibration: Calibration) -> str | None:
    """A line saying the calibration's alpha is unsteady, where its small all-reduces took
    times more than `UNSTEADY_SPREAD` apart (on shared cores gloo's polling I/O thread makes
    some sizes several times slower than others), else None."""
    rows = calibration.rows
    small = [r for r in rows if r.collective == "all_reduce" and r.nbytes <= SMALL_BYTES]
    if len(small) < 2:
        return None
    fastest, slowest = min(r.measured_s for r in small), max(r.measured_s for r in small)
    if slowest <= UNSTEADY_SPREAD * fastest:
        return None
    return (
        f"note: all-reduces of {SMALL_BYTES >> 10} KB and less took {fastest * 1e3:.2f}-"
        f"{slowest * 1e3:.2f} ms a call ({slowest / fastest:.1f}x apart), so this alpha "
        f"({calibration.model.alpha_s * 1e6:.0f} us) is unsteady here and another calibration "
        "may differ; `bench sim` prices each all-reduce at its own size's latency unless "
        "given --calibration-latency fitted"
    )


def _calibration(config: CostsConfig, command: str) -> None:
    from cadence.comm.calibrate import Calibration
    from cadence.comm.calibrate_command import CalibrateConfig, run_calibration

    del command  # a calibration file records its table, not its command line
    part = CalibrateConfig(
        out=str(config.path("calibration")), workers=config.hosts, bandwidth=config.bandwidth
    )
    run_calibration(part, Path(part.out))
    warning = latency_warning(Calibration.load(part.out))
    if warning:
        print(warning)


UNSTEADY_COMPUTE = 1.15
"""Slowest over fastest block of compute alone, within one model's runtime-cost rounds, above
which its runtime cost is flagged."""


def runtime_cost_warning(path: str | Path) -> str | None:
    """A line naming the models whose compute alone, the yardstick of their runtime cost,
    took blocks more than `UNSTEADY_COMPUTE` apart while the cost was measured, else None.
    The costs are a few percent, so a machine that drifts by more cannot measure them: one
    folder here measured resnet32's DDP at 1.078 where the one before had 1.022."""
    import json

    unsteady = []
    for row in json.loads(Path(path).read_text())["rows"]:
        blocks = [s for rounds in row.get("rounds_s", []) for s in rounds.get("compute", [])]
        if blocks and max(blocks) > UNSTEADY_COMPUTE * min(blocks):
            unsteady.append(f"{row['model']} {max(blocks) / min(blocks):.2f}x")
    if not unsteady:
        return None
    return (
        f"note: compute alone moved between blocks while the runtime cost was measured "
        f"({', '.join(unsteady)} slowest over fastest), so those costs may be off by as "
        "much; rerun `cadence bench costs --parts runtime-cost` on a quieter machine"
    )


def _runtime_cost(config: CostsConfig, command: str) -> None:
    from cadence.bench.runtime_cost import RuntimeCostConfig, run_runtime_cost_bench

    part = RuntimeCostConfig(
        models=config.models,
        procs=config.hosts,
        batch_size=config.batch_size,
        out=str(config.path("runtime-cost")),
    )
    run_runtime_cost_bench(part, command)
    warning = runtime_cost_warning(part.out)
    if warning:
        print(warning)


def _heap_cost(config: CostsConfig, command: str) -> None:
    from cadence.bench.heap_cost import HeapCostConfig, run_heap_cost_bench

    part = HeapCostConfig(
        models=config.models,
        workers=config.hosts,
        batch_size=config.batch_size,
        out=str(config.path("heap-cost")),
    )
    run_heap_cost_bench(part, command)


_RUNNERS = {
    "contention": _contention,
    "calibration": _calibration,
    "runtime-cost": _runtime_cost,
    "heap-cost": _heap_cost,
}


def run_costs(config: CostsConfig, command: str, echo: Any = print) -> dict[str, float]:
    """Measure each part of `config.parts` in order; returns part -> seconds it took."""
    from cadence.bench.collectives import _check_writable
    from cadence.netem import check_netem_available

    if set(config.parts) - {"runtime-cost"}:
        check_netem_available()  # every part but runtime-cost runs on the emulated cluster
    for part in config.parts:
        _check_writable(config.path(part))  # fail before minutes of measuring, not after
    seconds: dict[str, float] = {}
    for number, part in enumerate(config.parts, 1):
        echo(f"== [{number}/{len(config.parts)}] {part} -> {config.path(part)}")
        started = time.monotonic()
        try:
            _RUNNERS[part](config, command)
        except UserError as exc:
            done = ", ".join(str(config.path(p)) for p in seconds) or "nothing"
            raise UserError(f"{part} failed ({exc}); kept: {done}") from None
        seconds[part] = time.monotonic() - started
    total = sum(seconds.values())
    echo(
        f"measured {', '.join(f'{p} in {s:.0f} s' for p, s in seconds.items())} "
        f"({total:.0f} s); use: cadence bench sim --costs {config.out_dir} ..."
    )
    return seconds


def add_parser(bsub: Any) -> None:
    """`cadence bench costs` on the `cadence bench` subparsers."""

    def command(args: argparse.Namespace) -> int:
        config = CostsConfig(
            out_dir=args.out_dir,
            bandwidth=args.bandwidth,
            hosts=args.hosts,
            models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
            batch_size=args.batch_size,
            parts=tuple(p.strip() for p in args.parts.split(",") if p.strip()),
        )
        run_costs(config, shlex.join(["cadence", *sys.argv[1:]]))
        return 0

    p = bsub.add_parser(
        "costs",
        help="measure this machine's contention, link latencies, runtime and heap costs into "
        "one folder for `cadence bench sim --costs DIR` (root; ~35 minutes for the four models)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--out-dir", default="results/costs", help="folder for the four files")
    p.add_argument("--bandwidth", default="400mbit", help="emulated link cap to measure on")
    p.add_argument("--hosts", type=int, default=2, help="emulated hosts (workers of the runs)")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help="models to measure")
    p.add_argument("--batch-size", type=int, default=64, help="global batch of the runs")
    p.add_argument("--parts", default=",".join(PARTS), help="which parts to measure")
    p.set_defaults(func=command)
