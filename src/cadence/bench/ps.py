"""`cadence bench ps`: parameter-server transfer orders side by side in the emulated cluster.

Per model, W workers (the server runs beside worker 0, as `cadence train --strategy ps` starts
it) train at one link cap (by default per model, where the wire time equals the compute time)
with FIFO, layer-order, graph (critical-path) priority and graph priority plus switch-port
priority classes; the orders alternate over `repeats` rounds and each run's median iteration
(first step excluded) is taken, the median over rounds reported with the ratio to FIFO next to
the published one (iteration time vs FIFO: 93.5% vgg16, 78.2% resnet32, 86.7% cnn_lstm) and
the simulator's prediction. The bound is max(compute, wire): one worker's compute on its share
of the batch, and one direction of the remote worker's traffic (every gradient out, every
parameter back, at the cap, both directions at once).

On one model, backup workers (K = W - 1) are timed without and with one worker slowed 2x (it
sleeps its compute time every step), next to BSP with the same straggler; and ASP throughput.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cadence.errors import UserError

PUBLISHED = {"vgg16": 0.935, "resnet32": 0.782, "cnn_lstm": 0.867}
"""Iteration time with critical-path priorities as a share of FIFO (the issue's 2022 study)."""
ORDERS = ("fifo", "layer", "graph", "graph+net")
BALANCED = "balanced"
"""A cap chosen per model so that one direction's wire time equals the measured compute."""


@dataclass(frozen=True)
class PSBenchConfig:
    """What `cadence bench ps` measures."""

    models: tuple[str, ...] = ("vgg16", "resnet32", "cnn_lstm")
    """Model zoo names."""
    cap: str = BALANCED
    """Link cap of every emulated host; `balanced`: per model, where one direction's wire time
    (every gradient out, every parameter back) equals the measured compute time."""
    workers: int = 2
    """Workers (emulated hosts); one server, started by worker 0."""
    batch_size: int = 32
    """Global batch per step."""
    steps: int = 12
    """Steps per run; the first is excluded, so at least 10 are timed."""
    repeats: int = 2
    """Rounds over the orders (alternating direction); the median over rounds is reported."""
    orders: tuple[str, ...] = ORDERS
    """`--ps-priority` values compared."""
    straggler_model: str = "resnet32"
    """Model of the backup-worker and ASP runs ('' skips them)."""
    out: str = "bench-out/bench-ps.json"
    """JSON output; the PNG goes next to it."""
    run_root: str = "/tmp/cadence-bench-ps"
    """Where the individual training runs keep their outputs."""

    def __post_init__(self) -> None:
        from cadence.models import model_names
        from cadence.netem import parse_bandwidth
        from cadence.ps.config import parse_priority

        for model in (*self.models, *filter(None, [self.straggler_model])):
            if model not in model_names():
                raise UserError(f"unknown model '{model}': choose from {', '.join(model_names())}")
        if self.cap != BALANCED and parse_bandwidth(self.cap) == float("inf"):
            raise UserError("--caps must be a bandwidth (e.g. 400mbit): the bench needs a cluster")
        for order in self.orders:
            parse_priority(order)
        if "fifo" not in self.orders:
            raise UserError("--orders must include fifo: ratios are taken against it")
        if self.steps < 11:
            raise UserError(f"--steps must be at least 11 (10 timed), got {self.steps}")
        if self.repeats < 1 or self.workers < 2:
            raise UserError("--repeats must be >= 1 and --workers >= 2")
        if self.batch_size % self.workers:
            raise UserError(f"--batch-size {self.batch_size} must divide by --workers")


def _train(model: str, cap: str, config: PSBenchConfig, **settings: Any) -> dict[str, Any]:
    from cadence.bench._train import train_for_bench
    from cadence.config import TrainConfig

    fields: dict[str, Any] = {
        "strategy": "ps",
        "workers": config.workers,
        "batch_size": config.batch_size,
        "emulate_bandwidth": cap,
        **settings,
    }
    train_config = TrainConfig.from_flat(
        model=model, steps=config.steps, out=config.run_root, eval_every_epoch=False, threads=1,
        **fields,
    )  # fmt: skip
    return train_for_bench(train_config)


def _summary(metrics: dict[str, Any]) -> dict[str, Any]:
    """What a row keeps of one run: its median iteration and the PS counters."""
    ps = metrics.get("ps", {})
    return {
        "iteration_s": metrics["median_iteration_s"],
        "param_wait_s_per_step": [w["median_step_param_wait_s"] for w in ps.get("workers", [])],
        "bytes_per_class": ps.get("bytes_per_class"),
        "dropped": ps.get("servers", {}).get("dropped"),
        "rejected": ps.get("servers", {}).get("rejected"),
        "max_staleness": ps.get("max_staleness"),
    }


def measure_compute(model: str, config: PSBenchConfig) -> tuple[float, int]:
    """One worker on its share of the batch, no communication (DDP of one): median iteration,
    and the model's gradient bytes."""
    metrics = _train(
        model, "none", config, strategy="ddp", workers=1,
        batch_size=config.batch_size // config.workers, emulate_bandwidth=None,
    )  # fmt: skip
    return metrics["median_iteration_s"], metrics["gradient_bytes"]


def resolve_cap(cap: str, compute_s: float, grad_bytes: int) -> str:
    """`cap`, or for `balanced` the cap (1 mbit resolution) at which one direction's traffic,
    `grad_bytes`, takes `compute_s` on the wire."""
    if cap != BALANCED:
        return cap
    return f"{max(1, round(grad_bytes * 8 / compute_s / 1e6))}mbit"


def measure_orders(
    model: str, config: PSBenchConfig, echo: Callable[[str], None]
) -> dict[str, Any]:
    """Every transfer order of one model, alternating; returns the row."""
    from cadence.netem import parse_bandwidth

    compute_s, grad_bytes = measure_compute(model, config)
    cap = resolve_cap(config.cap, compute_s, grad_bytes)
    wire_s = grad_bytes * 8 / parse_bandwidth(cap)
    predicted = predict(model, cap, config)
    runs: dict[str, list[dict[str, Any]]] = {}
    for repeat in range(config.repeats):
        sequence = config.orders if repeat % 2 == 0 else tuple(reversed(config.orders))
        for order in sequence:
            echo(f"  {model} @ {cap}: {order} (round {repeat + 1}/{config.repeats})")
            metrics = _train(model, cap, config, ps_priority=order)
            runs.setdefault(order, []).append(_summary(metrics))
    medians = {o: statistics.median(r["iteration_s"] for r in rs) for o, rs in runs.items()}
    bound = max(compute_s, wire_s)
    return {
        "model": model,
        "cap": cap,
        "gradient_bytes": grad_bytes,
        "compute_s": compute_s,
        "wire_s": wire_s,
        "bound_s": bound,
        "iteration_s": medians,
        "over_fifo": {o: t / medians["fifo"] for o, t in medians.items()},
        "over_bound": {o: t / bound for o, t in medians.items()},
        "published_graph_over_fifo": PUBLISHED.get(model),
        "predicted_s": predicted,
        "runs": runs,
    }


def predict(model: str, cap: str, config: PSBenchConfig) -> dict[str, float]:
    """Simulated iteration of each order (`cadence.sim.ps_adapter`) from a profile taken here
    of one worker's share of the batch, one thread, as the workers run (server updates free),
    and the plan the runtime makes for the model (graph priorities from module order)."""
    import torch

    from cadence.models import get_model_spec
    from cadence.netem import parse_bandwidth
    from cadence.profile.measure import profile_zoo_model
    from cadence.ps.config import PSConfig
    from cadence.ps.trace import model_plan
    from cadence.sim.command import zoo_arrival_order
    from cadence.sim.ps_adapter import simulate_ps

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        profile = profile_zoo_model(model, config.batch_size // config.workers, iterations=3)
    finally:
        torch.set_num_threads(threads)
    link = parse_bandwidth(cap) / 8
    module = get_model_spec(model).build()
    # The plan numbers parameters as model.parameters() does, as the layout does.
    arrival = zoo_arrival_order(model)
    return {
        order: simulate_ps(
            profile, workers=config.workers, link=link, priority=order,
            plan=model_plan(module, PSConfig(workers=config.workers, priority=order)),
            arrival_order=arrival,
        ).iteration_s
        for order in config.orders
    }  # fmt: skip


def measure_consistency(
    model: str, cap: str, compute_s: float, config: PSBenchConfig, echo: Callable[[str], None]
) -> dict[str, Any]:
    """Backup workers without and with a 2x straggler (BSP with it for contrast), and ASP."""
    slow = f"{config.workers - 1}:{compute_s:.3f}"  # sleeps its compute time: 2x slower
    backup = f"backup:{config.workers - 1}"
    cases = {
        "backup": {"consistency": backup},
        "backup+straggler": {"consistency": backup, "straggler": slow},
        "bsp+straggler": {"consistency": "bsp", "straggler": slow},
        "asp": {"consistency": "asp"},
    }
    runs: dict[str, list[dict[str, Any]]] = {}
    for repeat in range(config.repeats):
        names = list(cases) if repeat % 2 == 0 else list(reversed(cases))
        for name in names:
            echo(f"  {model} @ {cap}: {name} (round {repeat + 1}/{config.repeats})")
            metrics = _train(model, cap, config, ps_priority="graph", **cases[name])
            runs.setdefault(name, []).append(_summary(metrics))
    medians = {n: statistics.median(r["iteration_s"] for r in rs) for n, rs in runs.items()}
    return {
        "model": model,
        "cap": cap,
        "straggler": slow,
        "iteration_s": medians,
        "backup_straggler_over_backup": medians["backup+straggler"] / medians["backup"],
        "bsp_straggler_over_backup": medians["bsp+straggler"] / medians["backup"],
        "asp_samples_per_s": config.batch_size / medians["asp"],
        "backup_samples_per_s": config.batch_size / medians["backup"],
        "target": "backup+straggler within 15% of backup",
        "runs": runs,
    }


def table_lines(rows: Sequence[dict[str, Any]], extra: dict[str, Any] | None) -> list[str]:
    orders = list(rows[0]["iteration_s"]) if rows else []
    head = " | ".join(f"{o} (vs fifo)" for o in orders)
    lines = [
        f"| model | compute | wire | bound | {head} | published graph/fifo |",
        "| --- " * (5 + len(orders)) + "|",
    ]
    for r in rows:
        cells = " | ".join(f"{r['iteration_s'][o]:.3f} s ({r['over_fifo'][o]:.1%})" for o in orders)
        pub = r["published_graph_over_fifo"]
        lines.append(
            f"| {r['model']} | {r['compute_s']:.3f} s | {r['wire_s']:.3f} s | {r['bound_s']:.3f} s "
            f"| {cells} | {'-' if pub is None else f'{pub:.1%}'} |"
        )
        if r.get("predicted_s"):
            sim = " | ".join(f"{r['predicted_s'][o]:.3f} s" for o in orders)
            lines.append(f"| {r['model']} simulated | | | | {sim} | |")
    if extra is not None:
        it = extra["iteration_s"]
        lines += [
            "",
            f"{extra['model']}, straggler {extra['straggler']} (worker:seconds slept per step):",
            "| backup | backup + straggler | ratio | BSP + straggler | ASP samples/s |",
            "| --- | --- | --- | --- | --- |",
            f"| {it['backup']:.3f} s | {it['backup+straggler']:.3f} s "
            f"| {extra['backup_straggler_over_backup']:.2f} | {it['bsp+straggler']:.3f} s "
            f"| {extra['asp_samples_per_s']:.1f} |",
        ]
    return lines


def plot(rows: Sequence[dict[str, Any]], extra: dict[str, Any] | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.0), width_ratios=(3, 2))
    ax = axes[0]
    orders = list(rows[0]["iteration_s"]) if rows else []
    series = [("bound", [r["bound_s"] for r in rows])]
    series += [(o, [r["iteration_s"][o] for r in rows]) for o in orders]
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(rows))]
        ax.bar(xs, values, width, label=name)
    ax.set_xticks(range(len(rows)), [r["model"] for r in rows])
    ax.set_ylabel("seconds per iteration (median)")
    ax.set_title(f"transfer order @ {rows[0]['cap'] if rows else ''}")
    ax.legend(fontsize=8)
    ax = axes[1]
    if extra is not None:
        names = list(extra["iteration_s"])
        ax.bar(names, [extra["iteration_s"][n] for n in names])
        ax.set_title(f"{extra['model']}: consistency, straggler {extra['straggler']}")
        ax.tick_params(axis="x", labelsize=8)
    else:
        ax.axis("off")
    fig.suptitle("cadence bench ps: lower is better")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _write(out: Path, report: dict[str, Any]) -> None:
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(out)


def run_ps_bench(
    config: PSBenchConfig, command: str, echo: Callable[[str], None] = print
) -> dict[str, Any]:
    from cadence.bench.dp import prepare_out
    from cadence.extras import require

    require("zmq")
    out = prepare_out(config.out, True)
    started = time.time()
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "config": asdict(config),
        "rows": rows,
        "consistency": None,
    }
    for model in config.models:
        echo(f"{model} @ {config.cap}")
        rows.append(measure_orders(model, config, echo))
        report["seconds"] = time.time() - started
        _write(out, report)  # after every model: an interrupted run keeps what it measured
    if config.straggler_model:
        known = {r["model"]: (r["cap"], r["compute_s"]) for r in rows}
        if config.straggler_model not in known:
            compute_s, grad_bytes = measure_compute(config.straggler_model, config)
            cap = resolve_cap(config.cap, compute_s, grad_bytes)
            known[config.straggler_model] = (cap, compute_s)
        cap, compute_s = known[config.straggler_model]
        report["consistency"] = measure_consistency(
            config.straggler_model, cap, compute_s, config, echo
        )
        report["seconds"] = time.time() - started
        _write(out, report)
    plot(rows, report["consistency"], out.with_suffix(".png"))
    for line in table_lines(rows, report["consistency"]):
        echo(line)
    echo(f"wrote {out} and {out.with_suffix('.png')}")
    return report
