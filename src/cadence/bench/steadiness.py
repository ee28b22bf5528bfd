"""`cadence bench steadiness`: is this machine steady enough to compare timings?

Every comparison in cadence's benchmarks (and every check of the simulator against a real
run) assumes the machine computes at the same speed from one run to the next. On a shared or
virtual machine it may not. This benchmark runs one fixed piece of work, a zoo model's
forward + backward + Adam step on a synthetic batch with one intra-op thread, over and over for
`windows` consecutive windows of `window_s` seconds (in `processes` copies at once, as the
workers of an emulated cluster share the host), and reports each window's median *processor*
time per step (the thread's CPU time, so waiting for a core does not count). Identical work
should cost identical processor time; the spread between windows is the noise floor below which
no timing comparison on this machine means anything.

    cadence bench steadiness --model gpt_mini --batch-size 32 --windows 12 --window-s 5
"""

from __future__ import annotations

import json
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cadence.errors import UserError


@dataclass(frozen=True)
class SteadinessConfig:
    """What `cadence bench steadiness` runs."""

    model: str = "gpt_mini"
    """Zoo model whose training step is the fixed work."""
    batch_size: int = 32
    """Synthetic batch per step."""
    windows: int = 8
    """Consecutive timing windows (at least 2: the figure is their spread)."""
    window_s: float = 5.0
    """Seconds per window."""
    processes: int = 1
    """Copies of the work running at once, each with one intra-op thread."""
    out: str = "results/steadiness.json"
    """JSON output; the PNG goes next to it."""

    def __post_init__(self) -> None:
        from cadence.models import model_names

        if self.model not in model_names():
            raise UserError(f"unknown model '{self.model}': choose from {', '.join(model_names())}")
        if self.windows < 2 or self.window_s <= 0 or self.processes < 1 or self.batch_size < 1:
            raise UserError(
                "--windows must be >= 2, --window-s > 0, --processes >= 1 and --batch-size >= 1 "
                f"(got {self.windows}, {self.window_s}, {self.processes}, {self.batch_size})"
            )


def time_windows(model: str, batch_size: int, windows: int, window_s: float) -> list[dict]:
    """Run the fixed step for `windows` windows; per window: steps, median CPU and wall ms."""
    import torch

    from cadence.models import get_model_spec, loss_fn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = get_model_spec(model)
    net = spec.build()
    x, y = spec.synthetic_batch(batch_size)
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)

    def step() -> None:
        loss_fn(net(x), y).backward()
        opt.step()
        opt.zero_grad()

    step()  # first-call allocations and lazy initialisation stay out of the windows
    out = []
    for _ in range(windows):
        cpu: list[float] = []
        wall: list[float] = []
        end = time.perf_counter() + window_s
        while time.perf_counter() < end or not cpu:
            w0, c0 = time.perf_counter(), time.thread_time()
            step()
            cpu.append(time.thread_time() - c0)
            wall.append(time.perf_counter() - w0)
        out.append(
            {
                "steps": len(cpu),
                "cpu_ms": 1e3 * statistics.median(cpu),
                "wall_ms": 1e3 * statistics.median(wall),
            }
        )
    return out


def _child(config: SteadinessConfig, conn: Any) -> None:
    conn.send(time_windows(config.model, config.batch_size, config.windows, config.window_s))
    conn.close()


def summarise(per_process: list[list[dict]]) -> dict[str, Any]:
    """Spread of the window medians: max / min and the median absolute deviation, in %."""
    cpu = [w["cpu_ms"] for proc in per_process for w in proc]
    mid = statistics.median(cpu)
    return {
        "median_cpu_ms": mid,
        "max_over_min": max(cpu) / min(cpu),
        "mad_percent": 100 * statistics.median(abs(c - mid) for c in cpu) / mid,
        "worst_percent": 100 * max(abs(c - mid) for c in cpu) / mid,
    }


def plot(per_process: list[list[dict]], config: SteadinessConfig, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for i, proc in enumerate(per_process):
        starts = [k * config.window_s for k in range(len(proc))]
        ax.plot(starts, [w["cpu_ms"] for w in proc], marker="o", label=f"process {i}")
    ax.set_xlabel("window start (s)")
    ax.set_ylabel("processor ms per step (median)")
    ax.set_title(f"{config.model}, batch {config.batch_size}: the same work, window by window")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def run_steadiness(
    config: SteadinessConfig, command: str, echo: Callable[[str], None] = print
) -> dict[str, Any]:
    from cadence.bench.dp import prepare_out

    out = prepare_out(config.out, False)
    total = config.windows * config.window_s
    echo(f"{config.processes} x {config.model} (batch {config.batch_size}) for {total:.0f} s ...")
    started = time.time()
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for _ in range(config.processes):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(config, child))
        proc.start()
        child.close()
        pipes.append(parent)
        procs.append(proc)
    per_process = [pipe.recv() for pipe in pipes]
    for proc in procs:
        proc.join()
    summary = summarise(per_process)
    report = {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "config": asdict(config),
        "windows": per_process,
        "summary": summary,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    plot(per_process, config, out.with_suffix(".png"))
    for i, proc_windows in enumerate(per_process):
        cells = " ".join(f"{w['cpu_ms']:.1f}" for w in proc_windows)
        echo(f"process {i}: processor ms per step by window: {cells}")
    echo(
        f"median {summary['median_cpu_ms']:.1f} ms; slowest window / fastest "
        f"{summary['max_over_min']:.2f}; windows deviate from the median by "
        f"{summary['mad_percent']:.1f}% typically and {summary['worst_percent']:.1f}% at worst: "
        "a timed run as long as a window can be off by that much with nothing else changed"
    )
    echo(f"wrote {out} and {out.with_suffix('.png')}")
    return report
