"""`cadence bench dp`: cadence-dp against torch DDP, side by side in one run.

For every model and link cap: the compute-only iteration (one worker, no communication; once
per round, beside the variants, as the machine's speed drifts), the
wire time of one all-reduce of all gradients at the cap (measured: one gloo all-reduce of them
as a single message, `dp_wire`), DDP with its default 25 MB buckets, DDP with the best of a few
bucket sizes, and cadence-dp. Variants are run in alternating order `repeats` times; each
run's median iteration (first step excluded) is taken and the median over repeats reported.
The bound is max(compute, wire); the stricter line-rate bound (payload bytes at the cap, no
TCP/IP framing, alpha-beta bandwidth term) is reported beside it.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cadence.dp.config import DPConfig, mb_to_bytes
from cadence.errors import UserError
from cadence.heap import FIXED_HEAP_ENV

NO_CAP = "none"
BALANCED = "balanced"
"""A cap chosen per model so the wire time of one all-reduce equals the measured compute time."""
DDP_FIXED_HEAP = "ddp-heap"
"""DDP with cadence-dp's heap thresholds (`DPBenchConfig.ddp_fixed_heap`)."""


@dataclass(frozen=True)
class DPBenchConfig:
    """What `cadence bench dp` measures."""

    models: tuple[str, ...] = ("vgg16", "resnet32", "cnn_lstm", "gpt_mini")
    """Model zoo names."""
    caps: tuple[str, ...] = (NO_CAP, "1gbit", "400mbit")
    """Link caps; `none` runs on the loopback without an emulated cluster; `balanced` picks,
    per model, the cap at which wire time equals the measured compute time."""
    workers: int = 2
    """Ranks (emulated hosts)."""
    batch_size: int = 64
    """Global batch per step."""
    steps: int = 12
    """Steps per run; the first is excluded, so at least 10 are timed."""
    repeats: int = 3
    """Runs per variant, in alternating order; the median over them is reported. Odd by
    default: with two, the median is their mean and one stalled run moves it."""
    ddp_buckets_mb: tuple[float, ...] = (5.0, 100.0)
    """Bucket sizes tried for "DDP tuned" (its default 25 MB is always measured too)."""
    threshold_mb: float | None = None
    """cadence-dp threshold (where autotuning starts); None: cadence-dp's default (a quarter
    of the model's gradient bytes, within 1-4 MiB)."""
    reorder_k: int | None = None
    """cadence-dp reorder point."""
    autotune: str = "off"
    """cadence-dp autotuning for its runs: off, exhaustive or guided."""
    ddp_fixed_heap: bool = False
    """Also run DDP (25 MB buckets) in processes whose glibc malloc trim and mmap thresholds
    are fixed as cadence-dp fixes its own (`cadence.heap.FIXED_HEAP_ENV`): variant
    `ddp-heap`, and `cadence_over_ddp_heap` in each row, so the table shows how much of
    cadence-dp's lead over DDP is that setting. It is not one of the "DDP tuned" buckets."""
    out: str = "bench-out/bench-dp.json"
    """JSON output; the PNG goes next to it."""
    run_root: str = "/tmp/cadence-bench-dp"
    """Where the individual training runs keep their outputs."""

    def __post_init__(self) -> None:
        from cadence.models import model_names
        from cadence.netem import parse_bandwidth

        for model in self.models:
            if model not in model_names():
                raise UserError(f"unknown model '{model}': choose from {', '.join(model_names())}")
        for cap in self.caps:
            if cap not in (NO_CAP, BALANCED):
                parse_bandwidth(cap)
        if self.steps < 11:
            raise UserError(f"--steps must be at least 11 (10 timed), got {self.steps}")
        if self.repeats < 1 or self.workers < 2:
            raise UserError("--repeats must be >= 1 and --workers >= 2")
        if self.batch_size % self.workers:
            raise UserError(f"--batch-size {self.batch_size} must divide by --workers")


@dataclass(frozen=True)
class Variant:
    """One way of training measured in the benchmark."""

    name: str
    """Label in the table."""
    strategy: str
    """`--strategy` value."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Extra TrainConfig fields."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment settings for its processes (`cadence.heap.FIXED_HEAP_ENV` for
    `ddp-heap`)."""

    @property
    def fixed_heap(self) -> bool:
        """Whether its processes run with glibc's heap thresholds fixed: cadence-dp fixes
        them itself (`DPConfig.keep_heap`), `ddp-heap` through its environment."""
        return self.strategy == "cadence-dp" or self.env == FIXED_HEAP_ENV


TORCH_HEAP = {"keep_heap": False}
"""DDP's processes keep glibc's own malloc thresholds, as a plain torch script runs (`cadence
train` fixes them for every strategy unless told not to)."""
COMPUTE_ONLY = Variant("compute", "ddp", TORCH_HEAP)
"""Compute alone: DDP's training run on one worker, so nothing is sent."""


def variants(config: DPBenchConfig) -> list[Variant]:
    ddp = [Variant("ddp", "ddp", {"bucket_mb": 25.0, **TORCH_HEAP})]
    ddp += [
        Variant(f"ddp-{mb:g}mb", "ddp", {"bucket_mb": mb, **TORCH_HEAP})
        for mb in config.ddp_buckets_mb
        if mb != 25.0
    ]
    if config.ddp_fixed_heap:
        ddp.append(Variant(DDP_FIXED_HEAP, "ddp", {"bucket_mb": 25.0}, dict(FIXED_HEAP_ENV)))
    cadence = Variant(
        "cadence",
        "cadence-dp",
        {
            "threshold_mb": config.threshold_mb,
            "reorder_k": config.reorder_k,
            "autotune": config.autotune,
        },
    )
    return [*ddp, cadence]


def train_variant(
    model: str, cap: str, variant: Variant, workers: int, config: DPBenchConfig
) -> dict[str, Any]:
    """One training run of `variant` (its strategy, settings and environment) on `model` at
    `cap`, as the benchmark times it: rank 0's metrics."""
    from cadence.bench._env import child_environment
    from cadence.bench._train import train_for_bench
    from cadence.config import TrainConfig

    train_config = TrainConfig.from_flat(
        model=model,
        workers=workers,
        batch_size=config.batch_size // (config.workers // workers),
        steps=config.steps,
        strategy=variant.strategy,
        emulate_bandwidth=None if cap == NO_CAP else cap,
        out=config.run_root,
        eval_every_epoch=False,
        threads=1,
        **variant.settings,
    )
    with child_environment(variant.env):
        return train_for_bench(train_config)


def _plan(metrics: dict[str, Any]) -> dict[str, Any]:
    """The plan a cadence-dp run ended with: chunks, threshold, the one-chunk probe if any."""
    return {
        "chunks": metrics["dp_chunks"],
        "threshold_bytes": metrics["dp_threshold_bytes"],
        "one_chunk_probe": metrics.get("dp_one_chunk_probe"),
    }


def measure_compute(
    model: str, config: DPBenchConfig, echo: Callable[[str], None]
) -> tuple[float, int]:
    """Median iteration of one worker on its share of the batch (no communication at all),
    and the model's gradient bytes."""
    echo(f"  {model}: compute only (1 worker, its share of the batch)")
    runs = [train_variant(model, NO_CAP, COMPUTE_ONLY, 1, config) for _ in range(config.repeats)]
    return statistics.median(m["median_iteration_s"] for m in runs), runs[0]["gradient_bytes"]


def balanced_cap(compute_s: float, gradient_bytes: int, workers: int) -> str:
    """The cap (tc syntax, 1 mbit resolution) at which one ring all-reduce of all gradients
    takes `compute_s` on the wire: the hardest case for overlap, where neither side hides."""
    from cadence.comm.cost import ring_allreduce_wire_s

    one_bps = ring_allreduce_wire_s(gradient_bytes, workers, 1.0)  # seconds at 1 bit/s
    return f"{max(1, round(one_bps / compute_s / 1e6))}mbit"


def measure_case(
    model: str,
    cap: str,
    model_compute: tuple[float, int] | None,
    config: DPBenchConfig,
    echo: Callable[[str], None],
) -> dict[str, Any]:
    """All variants of one (model, cap), alternating, with compute alone and the wire time
    (capped links only) measured once per round; returns the row. `model_compute`: the
    model's compute and gradient bytes measured before its first case (`measure_compute`),
    kept in the row beside this case's; None takes them from this case's first round."""
    from cadence.bench.dp_wire import measure_wire
    from cadence.comm.cost import ring_allreduce_wire_s
    from cadence.netem import parse_bandwidth

    runs: dict[str, list[float]] = {}
    plans: list[dict[str, Any]] = []  # cadence-dp's plan in each of its runs
    wire_runs: list[float] = []
    compute_runs: list[float] = []
    order = variants(config)
    for repeat in range(config.repeats):
        # Compute alone once per round too: this machine's speed drifts over minutes, so the
        # bound (and a simulator's replay of the row) takes compute from beside the variants.
        echo(f"  {model} @ {cap}: compute only (run {repeat + 1})")
        compute = train_variant(model, NO_CAP, COMPUTE_ONLY, 1, config)
        compute_runs.append(compute["median_iteration_s"])
        if model_compute is None:
            model_compute = compute["median_iteration_s"], compute["gradient_bytes"]
        model_compute_s, grad_bytes = model_compute
        if cap != NO_CAP:
            echo(f"  {model} @ {cap}: one all-reduce of all gradients (run {repeat + 1})")
            wire_runs.append(measure_wire(grad_bytes, config.workers, cap))
        sequence = order if repeat % 2 == 0 else list(reversed(order))
        for variant in sequence:
            echo(f"  {model} @ {cap}: {variant.name} (run {repeat + 1}/{config.repeats})")
            metrics = train_variant(model, cap, variant, config.workers, config)
            runs.setdefault(variant.name, []).append(metrics["median_iteration_s"])
            if "dp_chunks" in metrics:
                plans.append(_plan(metrics))
    # Without a cap the link is the loopback, limited by the processors: no wire time.
    wire = statistics.median(wire_runs) if wire_runs else 0.0
    line_wire = 0.0
    if cap != NO_CAP:
        line_wire = ring_allreduce_wire_s(grad_bytes, config.workers, parse_bandwidth(cap))
    medians = {name: statistics.median(times) for name, times in runs.items()}
    compute_s = statistics.median(compute_runs)
    bound = max(compute_s, wire)
    line_bound = max(compute_s, line_wire)
    ddp_tuned = min(v for k, v in medians.items() if k.startswith("ddp") and k != DDP_FIXED_HEAP)
    cadence = medians["cadence"]
    same_heap = {}
    if DDP_FIXED_HEAP in medians:
        same_heap["cadence_over_ddp_heap"] = cadence / medians[DDP_FIXED_HEAP]
    cadence_config = DPConfig(threshold_bytes=mb_to_bytes(config.threshold_mb))
    return {
        "model": model,
        "cap": cap,
        "gradient_bytes": grad_bytes,
        # What cadence-dp's runs split and fused by (its default depends on the model).
        "cadence_threshold_bytes": cadence_config.threshold_for(grad_bytes),
        # And the bytes it let in flight (its default depends on the model too).
        "cadence_credit_bytes": cadence_config.credit_for(grad_bytes),
        "cadence_plans": plans,
        "compute_s": compute_s,
        "compute_runs_s": compute_runs,
        "model_compute_s": model_compute_s,
        "wire_s": wire,
        "wire_runs_s": wire_runs,
        "bound_s": bound,
        "line_wire_s": line_wire,
        "line_bound_s": line_bound,
        "iteration_s": medians,
        "runs_s": runs,
        "ddp_tuned_s": ddp_tuned,
        "cadence_over_ddp": cadence / medians["ddp"],
        "cadence_over_ddp_tuned": cadence / ddp_tuned,
        "cadence_over_bound": cadence / bound,
        "ddp_over_bound": medians["ddp"] / bound,
        "cadence_over_line_bound": cadence / line_bound,
        # Which variants' processes ran with glibc's heap thresholds fixed.
        "fixed_heap_variants": [v.name for v in order if v.fixed_heap],
        **same_heap,
    }


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    same_heap = any("cadence_over_ddp_heap" in r for r in rows)
    extra = " DDP, heap fixed | cadence/DDP, heap fixed |" if same_heap else ""
    lines = [
        "| model | cap | compute | wire | line wire | DDP | DDP tuned | cadence | cadence/DDP "
        "| cadence/DDP tuned | cadence/bound | DDP/bound | cadence/line bound |" + extra,
        "| --- " * (13 + 2 * same_heap) + "|",
    ]
    for r in rows:
        it = r["iteration_s"]
        line = (
            f"| {r['model']} | {r['cap']} | {r['compute_s']:.3f} s | {r['wire_s']:.3f} s "
            f"| {r['line_wire_s']:.3f} s "
            f"| {it['ddp']:.3f} s | {r['ddp_tuned_s']:.3f} s | {it['cadence']:.3f} s "
            f"| {r['cadence_over_ddp']:.2f} | {r['cadence_over_ddp_tuned']:.2f} "
            f"| {r['cadence_over_bound']:.2f} | {r['ddp_over_bound']:.2f} "
            f"| {r['cadence_over_line_bound']:.2f} |"
        )
        if same_heap:
            heap = it.get(DDP_FIXED_HEAP)
            ratio = r.get("cadence_over_ddp_heap")
            line += f" {heap:.3f} s | {ratio:.2f} |" if heap and ratio else " - | - |"
        lines.append(line)
    return lines


def plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows)), 4.0))
    labels = [f"{r['model']}\n{r['cap']}" for r in rows]
    series = [
        ("line-rate bound", [r["line_bound_s"] for r in rows]),
        ("bound max(compute, wire)", [r["bound_s"] for r in rows]),
        ("DDP (25 MB)", [r["iteration_s"]["ddp"] for r in rows]),
        ("DDP tuned bucket", [r["ddp_tuned_s"] for r in rows]),
    ]
    if all(DDP_FIXED_HEAP in r["iteration_s"] for r in rows):
        series.append(("DDP, heap fixed", [r["iteration_s"][DDP_FIXED_HEAP] for r in rows]))
    series.append(("cadence-dp", [r["iteration_s"]["cadence"] for r in rows]))
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(rows))]
        ax.bar(xs, values, width, label=name)
    ax.set_xticks(range(len(rows)), labels)
    ax.set_ylabel("seconds per iteration (median)")
    ax.set_title("cadence bench dp: iteration time, lower is better")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def prepare_out(out: str, netem: bool, *dirs: str) -> Path:
    """Create the output's directory (and `dirs`), and check the emulated cluster can be built
    when `netem`, before anything runs: a one-line error instead of a lost benchmark."""
    path = Path(out)
    try:
        for folder in (path.parent, *map(Path, dirs)):
            folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the directory of --out '{out}': {exc}") from None
    if netem:
        from cadence.netem import check_netem_available

        check_netem_available()
    return path


def run_dp_bench(
    config: DPBenchConfig, command: str, echo: Callable[[str], None] = print
) -> dict[str, Any]:
    out = prepare_out(config.out, any(cap != NO_CAP for cap in config.caps))
    started = time.time()
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "config": asdict(config),
        "rows": rows,
    }
    for model in config.models:
        # Only a balanced cap needs the compute before any case; otherwise the first case's
        # first round measures it.
        first = measure_compute(model, config, echo) if BALANCED in config.caps else None
        for rule in config.caps:
            cap = rule
            if rule == BALANCED and first is not None:
                cap = balanced_cap(*first, config.workers)
            echo(f"{model} @ {cap}" + (" (balanced: wire = compute)" if rule == BALANCED else ""))
            row = measure_case(model, cap, first, config, echo)
            first = first or (row["model_compute_s"], row["gradient_bytes"])
            rows.append({**row, "cap_rule": rule})
            report["seconds"] = time.time() - started
            # Written after every case: an interrupted benchmark keeps what it measured.
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(report, indent=2, default=_json_default) + "\n")
            tmp.replace(out)
    plot(rows, out.with_suffix(".png"))
    for line in table_lines(rows):
        echo(line)
    echo(f"wrote {out} and {out.with_suffix('.png')}")
    return report


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    raise TypeError(f"not JSON serialisable: {value!r}")
