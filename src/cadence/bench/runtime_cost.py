"""`cadence bench runtime-cost`: how much each data-parallel runtime slows compute by itself.

DDP's reducer and cadence-dp's hooks, communication thread and per-layer updates take
processor time and scheduling turns of their own. On a host whose cores are all computing
(2 workers on this 2-core machine) that comes out of the compute, with no network involved:
this probe measures it without one. `--procs` processes start at once on this machine, each
in a world of its own (a gloo group of one: DDP's reducer and cadence-dp's engine run, nothing
is sent), and each runs `cadence bench dp-paired`'s worker: compute alone, DDP and cadence-dp
take turns in blocks, round after round, every process starting each turn at once (so each
variant is timed while the other processes run the same). A runtime's slowdown is the median,
over processes and rounds, of its time over the same round's compute alone.

The simulator charges it with `cadence bench sim --runtime-cost FILE`: the compute of a
strategy's prediction is multiplied by that strategy's slowdown for the model.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cadence.errors import UserError

# dp-paired worker variant -> simulated strategy
STRATEGIES = {"ddp": "ddp", "cadence": "cadence-dp"}


@dataclass(frozen=True)
class RuntimeCostConfig:
    """What `cadence bench runtime-cost` measures."""

    models: tuple[str, ...] = ("gpt_mini",)
    """Model zoo names."""
    procs: int = 2
    """Processes computing at once on this machine, as workers of the run the slowdown is for
    (2: the emulated 2-host cluster on these 2 cores)."""
    batch_size: int = 64
    """Global batch of that run; each process computes its share, batch_size // procs."""
    block_steps: int = 8
    """Steps per turn of a variant, at least."""
    block_seconds: float = 3.0
    """Timed seconds per turn, at least."""
    rounds: int = 5
    """Timed rounds after one untimed warm-up round."""
    threads: int = 1
    """Intra-op threads per process, as in the benchmarks."""
    out: str = "results/runtime-cost.json"
    """Where the JSON goes."""

    def __post_init__(self) -> None:
        if not self.models:
            raise UserError("--models needs at least one model")
        from cadence.models import get_model_spec

        for model in self.models:
            get_model_spec(model)  # an unknown name is a one-line UserError
        if self.procs < 1:
            raise UserError(f"--procs must be at least 1, got {self.procs}")
        if self.batch_size < self.procs:
            raise UserError(f"--batch-size must be at least --procs ({self.procs})")
        if self.rounds < 1:
            raise UserError(f"--rounds must be at least 1, got {self.rounds}")
        if self.block_steps < 3:
            raise UserError(f"--block-steps must be at least 3, got {self.block_steps}")
        if not self.block_seconds >= 0:
            raise UserError(f"--block-seconds must be >= 0, got {self.block_seconds}")


def summarise(model: str, per_process: list[dict[str, list[float]]]) -> dict[str, Any]:
    """One model's row from every process's `rounds_s`: each runtime's time over the same
    round's compute alone, and the median of those ratios over processes and rounds."""
    ratios = {
        variant: [
            [t / c for t, c in zip(rounds[variant], rounds["compute"], strict=True)]
            for rounds in per_process
        ]
        for variant in STRATEGIES
    }
    return {
        "model": model,
        "compute_s": statistics.median(c for r in per_process for c in r["compute"]),
        "slowdown": {
            STRATEGIES[v]: statistics.median(x for proc in each for x in proc)
            for v, each in ratios.items()
        },
        "slowdown_rounds": {STRATEGIES[v]: each for v, each in ratios.items()},
        "rounds_s": per_process,
    }


def _run_model(config: RuntimeCostConfig, model: str, run_dir: Path) -> dict[str, Any]:
    from cadence.bench._launch import Loopback, run_workers
    from cadence.bench.dp_paired import PairedCase
    from cadence.launch.local import free_port

    case_dir = run_dir / model
    case_dir.mkdir(parents=True)
    case = PairedCase(
        model=model,
        batch_size=config.batch_size // config.procs,  # a world of one computes it all
        block_steps=config.block_steps,
        block_seconds=config.block_seconds,
        rounds=config.rounds,
        ddp_buckets_mb=(),  # DDP at its default buckets only; cadence-dp at its defaults
        threads=config.threads,
        measure_wire=False,
        master_port=free_port(),  # the processes' turn barrier
    )
    (case_dir / "case.json").write_text(json.dumps(asdict(case)))
    prefix = case_dir / "result"
    run_workers(
        Loopback.of(config.procs), "cadence.bench._runtime_cost_worker",
        [str(case_dir / "case.json"), str(prefix)], case_dir, config.threads, 3600.0,
    )  # fmt: skip
    per_process = [
        json.loads(Path(f"{prefix}.{p}.json").read_text())["rounds_s"] for p in range(config.procs)
    ]
    return summarise(model, per_process)


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| model | compute alone | DDP / compute | cadence-dp / compute |",
        "| --- | --- | --- | --- |",
    ]
    for r in rows:
        s = r["slowdown"]
        lines.append(
            f"| {r['model']} | {r['compute_s']:.3f} s | {s['ddp']:.3f} | {s['cadence-dp']:.3f} |"
        )
    return lines


def run_runtime_cost_bench(config: RuntimeCostConfig, command: str, echo: Any = print) -> dict:
    out = Path(config.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "benchmark": "runtime-cost",
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "config": asdict(config),
        "rows": rows,
    }
    run_dir = Path(tempfile.mkdtemp(prefix="cadence-bench-runtime-cost-"))  # kept on failure
    for number, model in enumerate(config.models, 1):
        echo(
            f"[{number}/{len(config.models)}] {model}: {config.procs} processes, "
            f"{config.rounds} rounds + warm-up"
        )
        rows.append(_run_model(config, model, run_dir))
        report["seconds"] = time.time() - started
        out.write_text(json.dumps(report, indent=2) + "\n")  # kept if a later model fails
    shutil.rmtree(run_dir, ignore_errors=True)
    for line in table_lines(rows):
        echo(line)
    echo(f"wrote {out} ({report['seconds']:.0f} s)")
    return report


def read_slowdowns(path: str) -> dict[str, dict[str, float]]:
    """model -> strategy -> slowdown from a `cadence bench runtime-cost` file, or a one-line
    UserError."""
    try:
        data = json.loads(Path(path).read_text())
        if data.get("benchmark") != "runtime-cost":
            raise ValueError("not a runtime-cost file")
        return {
            row["model"]: {k: float(v) for k, v in row["slowdown"].items()} for row in data["rows"]
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(
            f"cannot read {path}: not a `cadence bench runtime-cost` file ({exc})"
        ) from None


def add_parser(bsub: Any) -> None:
    """`cadence bench runtime-cost` on the `cadence bench` subparsers."""
    import argparse
    import shlex
    import sys

    def command(args: argparse.Namespace) -> int:
        config = RuntimeCostConfig(
            models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
            procs=args.procs,
            batch_size=args.batch_size,
            block_steps=args.block_steps,
            block_seconds=args.block_seconds,
            rounds=args.rounds,
            threads=args.threads,
            out=args.out,
        )
        run_runtime_cost_bench(config, shlex.join(["cadence", *sys.argv[1:]]))
        return 0

    p = bsub.add_parser(
        "runtime-cost",
        help="how much DDP's and cadence-dp's own machinery slows compute with every core "
        "busy and no network (the simulator's --runtime-cost)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--models", default="gpt_mini", help="comma-separated zoo models")
    p.add_argument("--procs", type=int, default=2, help="processes computing at once")
    p.add_argument("--batch-size", type=int, default=64, help="global batch (each: its share)")
    p.add_argument("--block-steps", type=int, default=8, help="steps per turn, at least")
    p.add_argument("--block-seconds", type=float, default=3.0, help="timed seconds per turn")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds after a warm-up round")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--out", default="results/runtime-cost.json", help="JSON file")
    p.set_defaults(func=command)
