"""`cadence bench heap-cost`: how much slower DDP trains where glibc's heap is left dynamic.

glibc moves its malloc trim and mmap thresholds with the sizes it sees freed, and on some
models that makes every step fault part of its memory back in (`cadence.dp.heap`). cadence-dp
fixes the thresholds in its processes; DDP users' processes leave them dynamic, and
`cadence bench runtime-cost` times DDP in processes that cadence-dp's setting reached, so
DDP's own runs carry a cost that no other charge prices (cnn_lstm's DDP ran 1.10x as long as
the same DDP with the thresholds fixed, `cadence bench dp --ddp-fixed-heap`, 2026-11-27).

For each model and link cap, `repeats` rounds on the emulated cluster: in each, DDP (25 MB
buckets) trains `steps` steps on `workers` hosts in processes of its own, once as users run
it and once with the thresholds fixed through the environment (`FIXED_HEAP_ENV`), in
alternating order. After its steps each run times compute alone in its own processes
(`TrainConfig.compute_probe_steps`). The factor is 1 + the median over rounds of the dynamic
run's extra iteration time, over the fixed runs' median compute. One factor per cap: in
`bench dp --ddp-fixed-heap`'s runs cnn_lstm's DDP lost a median 2-9 ms an iteration at 1gbit
and 13-17 ms at 400mbit (matrices q, s, t; 2026-11-27/28). The cost also moves between
sessions (2-13 ms at 1gbit), so a factor measured once over- or under-charges runs of other
days. `cadence bench sim` multiplies the compute of the DDP runs whose processes left the
thresholds dynamic by the factor of the measured cap nearest theirs (`--heap-cost FILE`, or
the `heap-cost.json` of a `--costs` folder).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cadence.errors import UserError

DEFAULT_MODELS: tuple[str, ...] = ("cnn_lstm", "resnet32", "gpt_mini", "vgg16")
"""The models of the data-parallel benchmark."""


@dataclass(frozen=True)
class HeapCostConfig:
    """What `cadence bench heap-cost` measures."""

    models: tuple[str, ...] = DEFAULT_MODELS
    """Model zoo names."""
    caps: tuple[str, ...] = ("1gbit", "400mbit")
    """Emulated link caps, each measured on its own (the runs priced take the nearest)."""
    workers: int = 2
    """Emulated hosts of each run, as in the runs the factor is for."""
    batch_size: int = 64
    """Global batch of those runs."""
    steps: int = 20
    """Steps per run; the first is excluded from the run's median iteration."""
    repeats: int = 3
    """Rounds of one dynamic and one fixed run each, in alternating order."""
    probe_steps: int = 10
    """Steps of compute alone each run times after its own steps: the yardstick."""
    out: str = "results/heap-cost.json"
    """Where the JSON goes."""
    run_root: str = "/tmp/cadence-bench-heap-cost"
    """Where the training runs keep their outputs."""

    def __post_init__(self) -> None:
        if not self.models:
            raise UserError("--models needs at least one model")
        from cadence.models import get_model_spec

        for model in self.models:
            get_model_spec(model)  # an unknown name is a one-line UserError
        from cadence.netem import parse_bandwidth

        if not self.caps:
            raise UserError("--caps needs at least one cap")
        for cap in self.caps:
            if parse_bandwidth(cap) == float("inf"):
                raise UserError(f"--caps takes link caps such as 400mbit, got {cap!r}")
        if self.workers < 2:
            raise UserError(f"--workers must be at least 2, got {self.workers}")
        if self.batch_size % self.workers:
            raise UserError(f"--batch-size {self.batch_size} must divide by --workers")
        if self.steps < 11:
            raise UserError(f"--steps must be at least 11 (10 timed), got {self.steps}")
        if self.repeats < 1:
            raise UserError(f"--repeats must be at least 1, got {self.repeats}")
        if self.probe_steps < 3:
            raise UserError(f"--probe-steps must be at least 3, got {self.probe_steps}")


def round_factor(dynamic_s: float, fixed_s: float, compute_s: float) -> float:
    """One round's factor: DDP's extra time with the heap dynamic, over the compute."""
    return 1.0 + (dynamic_s - fixed_s) / compute_s


def summarise(model: str, cap: str, runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """One (model, cap)'s row from its runs (`dynamic` / `fixed` -> each round's iteration
    and compute): 1 + the median extra time over the fixed runs' median compute (a 10-step
    probe is noisier than the difference), and each round's factor beside it."""
    compute = statistics.median(r["compute_s"] for r in runs["fixed"])
    pairs = list(zip(runs["dynamic"], runs["fixed"], strict=True))
    extra = [d["iteration_s"] - f["iteration_s"] for d, f in pairs]
    return {
        "model": model,
        "cap": cap,
        "factor": 1.0 + statistics.median(extra) / compute,
        "round_factors": [
            round_factor(d["iteration_s"], f["iteration_s"], f["compute_s"]) for d, f in pairs
        ],
        "dynamic_s": [r["iteration_s"] for r in runs["dynamic"]],
        "fixed_s": [r["iteration_s"] for r in runs["fixed"]],
        "compute_s": [r["compute_s"] for r in runs["fixed"]],
        "dynamic_compute_s": [r["compute_s"] for r in runs["dynamic"]],
    }


def _run(config: HeapCostConfig, model: str, cap: str, heap: str) -> dict[str, float]:
    from cadence.bench.dp import DDP_FIXED_HEAP, DPBenchConfig, Variant, train_variant, variants

    bench = DPBenchConfig(
        models=(model,), caps=(cap,), workers=config.workers, batch_size=config.batch_size,
        steps=config.steps, ddp_buckets_mb=(25.0,), ddp_fixed_heap=True, run_root=config.run_root,
    )  # fmt: skip
    name = DDP_FIXED_HEAP if heap == "fixed" else "ddp"
    variant: Variant = next(v for v in variants(bench) if v.name == name)
    metrics = train_variant(model, cap, variant, config.workers, bench, config.probe_steps)
    return {
        "iteration_s": float(metrics["median_iteration_s"]),
        "compute_s": float(metrics["compute_probe"]["lockstep_median_s"]),
    }


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| model | cap | DDP, heap dynamic | DDP, heap fixed | compute | factor (rounds) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        rounds = " ".join(f"{f:.3f}" for f in r["round_factors"])
        lines.append(
            f"| {r['model']} | {r['cap']} | {statistics.median(r['dynamic_s']):.3f} s | "
            f"{statistics.median(r['fixed_s']):.3f} s | {statistics.median(r['compute_s']):.3f} s "
            f"| {r['factor']:.3f} ({rounds}) |"
        )
    return lines


def run_heap_cost_bench(config: HeapCostConfig, command: str, echo: Any = print) -> dict:
    from cadence.bench.collectives import _check_writable
    from cadence.netem import check_netem_available

    check_netem_available()  # the runs are on the emulated cluster
    out = Path(config.out)
    _check_writable(out)  # fail before minutes of training, not after
    started = time.time()
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "benchmark": "heap-cost",
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "config": asdict(config),
        "rows": rows,
    }
    cases = [(model, cap) for model in config.models for cap in config.caps]
    for number, (model, cap) in enumerate(cases, 1):
        runs: dict[str, list[dict[str, float]]] = {"dynamic": [], "fixed": []}
        for repeat in range(config.repeats):
            order = ("dynamic", "fixed") if repeat % 2 == 0 else ("fixed", "dynamic")
            for heap in order:
                echo(
                    f"[{number}/{len(cases)}] {model} @ {cap}: DDP, heap {heap} "
                    f"(round {repeat + 1}/{config.repeats})"
                )
                runs[heap].append(_run(config, model, cap, heap))
        rows.append(summarise(model, cap, runs))
        report["seconds"] = time.time() - started
        out.write_text(json.dumps(report, indent=2) + "\n")  # kept if a later case fails
    for line in table_lines(rows):
        echo(line)
    echo(f"wrote {out} ({report['seconds']:.0f} s)")
    return report


def read_heap_factors(path: str) -> dict[str, dict[float, float]]:
    """model -> link cap in bit/s -> factor from a `cadence bench heap-cost` file, or a
    one-line UserError."""
    from cadence.netem import parse_bandwidth

    try:
        data = json.loads(Path(path).read_text())
        if data.get("benchmark") != "heap-cost":
            raise ValueError("not a heap-cost file")
        factors: dict[str, dict[float, float]] = {}
        for row in data["rows"]:
            bps = parse_bandwidth(str(row["cap"]))
            factors.setdefault(row["model"], {})[bps] = float(row["factor"])
        return factors
    except (OSError, ValueError, KeyError, TypeError, AttributeError, UserError) as exc:
        raise UserError(
            f"cannot read {path}: not a `cadence bench heap-cost` file ({exc})"
        ) from None


def factor_at(by_cap: dict[float, float], bps: float) -> float:
    """The factor measured at the cap nearest `bps` (by ratio; the fastest for no cap)."""
    return by_cap[min(by_cap, key=lambda cap: abs(math.log(min(bps, 1e15) / cap)))]


def add_parser(bsub: Any) -> None:
    """`cadence bench heap-cost` on the `cadence bench` subparsers."""

    def command(args: argparse.Namespace) -> int:
        config = HeapCostConfig(
            models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
            caps=tuple(c.strip() for c in args.caps.split(",") if c.strip()),
            workers=args.workers,
            batch_size=args.batch_size,
            steps=args.steps,
            repeats=args.repeats,
            probe_steps=args.probe_steps,
            out=args.out,
        )
        run_heap_cost_bench(config, shlex.join(["cadence", *sys.argv[1:]]))
        return 0

    p = bsub.add_parser(
        "heap-cost",
        help="how much slower DDP trains with glibc's heap thresholds dynamic (as users run "
        "it) than fixed as cadence-dp fixes them, per link cap (root; the simulator's "
        "--heap-cost)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated models")
    p.add_argument("--caps", default="1gbit,400mbit", help="comma-separated link caps")
    p.add_argument("--workers", type=int, default=2, help="emulated hosts per run")
    p.add_argument("--batch-size", type=int, default=64, help="global batch")
    p.add_argument("--steps", type=int, default=20, help="steps per run")
    p.add_argument("--repeats", type=int, default=3, help="rounds of a dynamic and a fixed run")
    p.add_argument("--probe-steps", type=int, default=10, help="compute-alone steps per run")
    p.add_argument("--out", default="results/heap-cost.json", help="JSON file")
    p.set_defaults(func=command)
