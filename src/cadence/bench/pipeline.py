"""`cadence bench pipeline`: pipeline schedules measured against the planner's predictions.

For every model, on 2 emulated hosts joined by a capped link, without and with contention
(`netem load`: a TCP bulk transfer from host 0 to host 1 for the whole scenario): the planner
probes the link and profiles the model on both stage ranks at once (per scenario: the load
takes CPU too), then GPipe, 1F1B and every kFkB (our runtime; those
over the memory limit are marked and still timed), torch's ScheduleGPipe and Schedule1F1B, and
the planner's pick are timed side by side (`_pipeline_worker`). Reported per scenario: measured
medians next to predictions, Kendall tau between predicted and measured order (our runtime's
candidates: torch's classes run the same schedules on another runtime, which the simulator does
not model apart), the pick against the best measured candidate that fits the limit (and the best
of all), and each run's measured peak memory against the limit.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cadence.errors import UserError
from cadence.sim.rankings import kendall_tau

MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536"}
"""Large tensors get their own mappings, returned on free: RSS then follows live tensors."""


@dataclass(frozen=True)
class PipelineBenchConfig:
    """What `cadence bench pipeline` measures."""

    models: tuple[str, ...] = ("gpt_mini", "vgg16")
    """Model zoo names (block models)."""
    cap: str = "200mbit"
    """Link cap between the two hosts (tc syntax)."""
    contention: tuple[bool, ...] = (False, True)
    """Scenarios: without and with background traffic from host 0 to host 1."""
    batch_size: int = 16
    """Samples per step."""
    microbatches: int = 8
    """Micro-batch count M at which every schedule is measured (the planner tries every M)."""
    memory_limit: int | None = None
    """Bytes per stage; None: per scenario, halfway between the smallest and largest simulated
    peak at M, so that some schedules fit and some do not."""
    warmup: int = 2
    """Untimed steps of each candidate first."""
    rounds: int = 12
    """Timed steps of each candidate (one per round, alternating order)."""
    out: str = "bench-out/bench-pipeline.json"
    """JSON output; the PNG goes next to it."""

    def __post_init__(self) -> None:
        from cadence.models import model_names
        from cadence.netem import parse_bandwidth

        for model in self.models:
            if model not in model_names():
                raise UserError(f"unknown model '{model}': choose from {', '.join(model_names())}")
        parse_bandwidth(self.cap)
        if self.rounds < 10:
            raise UserError(f"--steps must be at least 10 (timed steps), got {self.rounds}")
        if self.warmup < 1:
            raise UserError(f"--warmup must be at least 1, got {self.warmup}")
        if self.microbatches < 1 or self.batch_size % self.microbatches:
            fits = [m for m in range(1, self.batch_size + 1) if self.batch_size % m == 0]
            raise UserError(
                f"--microbatches {self.microbatches} does not divide --batch-size "
                f"{self.batch_size}: use one of {', '.join(map(str, fits))}"
            )
        if self.memory_limit is not None and self.memory_limit < 1:
            raise UserError(f"--memory-limit must be positive, got {self.memory_limit}")


def summarise(model: str, loaded: bool, raw: dict[str, Any]) -> dict[str, Any]:
    """One scenario's row: rows plus tau, the pick against the best, memory against the limit."""
    plan, rows = raw["plan"], raw["rows"]
    ours = [r for r in rows if r["backend"] == "cadence"]
    tau = kendall_tau([r["predicted_s"] for r in ours], [r["measured_s"] for r in ours])
    best = min(rows, key=lambda r: r["measured_s"])
    feasible = min((r for r in rows if r["fits"]), key=lambda r: r["measured_s"])
    pick = next(
        r for r in ours
        if (r["schedule"], r["microbatches"]) == (plan["best"]["schedule"],
                                                  plan["best"]["microbatches"])
    )  # fmt: skip
    limit = plan["memory_limit"]
    for r in rows:
        r["measured_within_limit"] = max(r["measured_peak_bytes"]) <= limit
        q = statistics.quantiles(r["step_s"], n=4)
        r["quartiles_s"] = [q[0], q[2]]  # the spread behind each median: the machine is shared
    return {
        "model": model,
        "contention": loaded,
        "memory_limit": limit,
        "probe": plan["probe"],
        "plan_why": plan["why"],
        "plan_time_s": {  # what planning cost: profiles (memory, split) and the stage probe
            "profiles": plan.get("profile_s"),
            "stage_probe": plan.get("stage_probe_s"),
        },
        "stage_times": plan.get("stage_times"),
        "pick": pick["name"],
        "pick_predicted_s": pick["predicted_s"],
        "pick_measured_s": pick["measured_s"],
        "best_feasible": feasible["name"],
        "best_feasible_s": feasible["measured_s"],
        "pick_over_best_feasible": pick["measured_s"] / feasible["measured_s"],
        "best_measured": best["name"],
        "best_measured_s": best["measured_s"],
        "pick_over_best": pick["measured_s"] / best["measured_s"],
        "kendall_tau": tau,
        "rows": rows,
        "plan_candidates": plan["candidates"],
    }


def table_lines(scenarios: Sequence[dict[str, Any]]) -> list[str]:
    lines = []
    for sc in scenarios:
        load = "with contention" if sc["contention"] else "no contention"
        lines.append(
            f"{sc['model']}, {load}: pick {sc['pick']} {sc['pick_measured_s'] * 1e3:.1f} ms "
            f"(predicted {sc['pick_predicted_s'] * 1e3:.1f}); best that fits: "
            f"{sc['best_feasible']} {sc['best_feasible_s'] * 1e3:.1f} ms, pick/best "
            f"{sc['pick_over_best_feasible']:.3f}; best of all: {sc['best_measured']} "
            f"{sc['best_measured_s'] * 1e3:.1f} ms; Kendall tau {sc['kendall_tau']:.2f}; "
            f"limit {sc['memory_limit'] / 2**20:.1f} MiB"
        )
        lines.append("| candidate | M | runtime | predicted ms | measured ms (quartiles) | "
                     "predicted peak MiB (s0/s1) | measured peak MiB (s0/s1) | fits |")  # fmt: skip
        lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in sc["rows"]:
            pred = "/".join(f"{b / 2**20:.1f}" for b in r["peak_bytes"])
            got = "/".join(f"{b / 2**20:.1f}" for b in r["measured_peak_bytes"])
            lines.append(
                f"| {r['name']} | {r['microbatches']} | {r['backend']} "
                f"| {r['predicted_s'] * 1e3:.1f} | {r['measured_s'] * 1e3:.1f} "
                f"({r['quartiles_s'][0] * 1e3:.0f}-{r['quartiles_s'][1] * 1e3:.0f}) "
                f"| {pred} | {got} | {'yes' if r['fits'] else 'no'} |"
            )
    return lines


def plot(scenarios: Sequence[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(scenarios), figsize=(4.2 * len(scenarios), 4.2), squeeze=False)
    for ax, sc in zip(axes[0], scenarios, strict=True):
        rows = sc["rows"]
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], [r["predicted_s"] * 1e3 for r in rows], 0.4,
               label="predicted")  # fmt: skip
        ax.bar([x + 0.2 for x in xs], [r["measured_s"] * 1e3 for r in rows], 0.4,
               label="measured (median)")  # fmt: skip
        names = [r["name"] + (" *" if r["name"] == sc["pick"] else "") for r in rows]
        ax.set_xticks(list(xs), names, rotation=60, ha="right", fontsize=7)
        load = "contention" if sc["contention"] else "quiet"
        ax.set_title(f"{sc['model']}, {load}: tau {sc['kendall_tau']:.2f}", fontsize=9)
        ax.set_ylabel("ms per step")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("cadence bench pipeline (* = planner's pick)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _scenario(
    cluster: Any, config: PipelineBenchConfig, model: str, loaded: bool
) -> dict[str, Any]:
    from cadence.bench._env import child_environment
    from cadence.bench._launch import run_workers
    from cadence.netem import start_background_load

    cfg = {**asdict(config), "model": model}
    with tempfile.TemporaryDirectory(prefix="cadence-bench-pipeline-") as tmp:
        run_dir = Path(tmp)
        (run_dir / "config.json").write_text(json.dumps(cfg))
        result = run_dir / "result.json"
        load = start_background_load(cluster, 0, 1) if loaded else None
        try:
            time.sleep(1.0 if loaded else 0.0)  # let the bulk transfer fill the link
            args = [str(run_dir / "config.json"), str(result)]
            with child_environment(MALLOC_ENV):  # read by the workers' allocator at start
                run_workers(cluster, "cadence.bench._pipeline_worker", args, run_dir, 1, 900.0)
        finally:
            if load is not None:
                load.stop()
        return summarise(model, loaded, json.loads(result.read_text()))


def run_pipeline_bench(
    config: PipelineBenchConfig, command: str, echo: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run every scenario in one emulated cluster; write JSON and PNG, print the table."""
    from cadence.netem import (
        EmulatedCluster,
        check_netem_available,
        cleanup_on_signals,
        parse_bandwidth,
    )

    out = Path(config.out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the directory of --out '{out}': {exc}") from None
    check_netem_available()
    started = time.time()
    scenarios: list[dict[str, Any]] = []
    with cleanup_on_signals(), EmulatedCluster(2, parse_bandwidth(config.cap)) as cluster:
        for model in config.models:
            for loaded in config.contention:
                echo(f"  {model}, {'with' if loaded else 'no'} contention at {config.cap}")
                scenarios.append(_scenario(cluster, config, model, loaded))
    report = {
        "benchmark": "pipeline",
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
        "seconds": time.time() - started,
        "load_average": os.getloadavg(),
        "config": asdict(config),
        "memory_measurement": "per stage: stage parameter bytes + (peak RSS during one step "
        "- RSS before it), peak from /proc/self/status VmHWM after resetting it via "
        "/proc/self/clear_refs; large tensors mmapped (MALLOC_MMAP_THRESHOLD_=65536)",
        "timing": "median over rounds of the slowest rank's step (barrier, then "
        "forward + backward + messages of one batch; no optimizer step)",
        "scenarios": scenarios,
    }
    png = out.with_suffix(".png")
    report["png"] = png.name
    out.write_text(json.dumps(report, indent=2) + "\n")
    plot(scenarios, png)
    for line in table_lines(scenarios):
        echo(line)
    echo(f"wrote {out} and {png}")
    return report
