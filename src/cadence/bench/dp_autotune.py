"""`cadence bench dp-autotune`: guided against exhaustive warm-up tuning, measured.

1. Train with cadence-dp and `autotune=exhaustive` (the published procedure: `trials`
   thresholds, each 10% above the previous, then every K), then with `autotune=guided` (the
   simulator picks the few candidates to time). Each run's choice and the warm-up iterations
   it spent are read from its metrics.
2. Train with each chosen (threshold, K), loaded from the saved choice so no rounding
   creeps in, alternating, `repeats` runs of `steps` steps each; medians are compared.

Targets from the issue: guided/exhaustive iteration time <= 1.05, iterations <= 0.25.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cadence.errors import UserError

METHODS = ("exhaustive", "guided")
SETTLE = 1  # a trial's untimed first iteration (its plan is rebuilt from it)
WARMUP = 2  # iterations before the first trial (Autotuner's default)


@dataclass(frozen=True)
class DPAutotuneBenchConfig:
    """What `cadence bench dp-autotune` measures."""

    model: str = "vgg16"
    """Model zoo name."""
    cap: str = "400mbit"
    """Link cap of the emulated cluster."""
    workers: int = 2
    """Ranks (emulated hosts)."""
    batch_size: int = 64
    """Global batch per step."""
    threshold_mb: float = 4.0
    """Threshold both methods start from."""
    trials: int = 100
    """Exhaustive: thresholds tried (each 10% above the previous); guided ranks the same list."""
    steps: int = 12
    """Steps per comparison run; the first is excluded, so at least 10 are timed."""
    repeats: int = 2
    """Comparison runs per chosen configuration, alternating."""
    out: str = "results/dp-autotune.json"
    """JSON output; the PNG goes next to it."""
    run_root: str = "/tmp/cadence-bench-dp-autotune"
    """Where the individual training runs keep their outputs (and the saved choices)."""

    def __post_init__(self) -> None:
        from cadence.models import model_names
        from cadence.netem import parse_bandwidth

        if self.model not in model_names():
            raise UserError(f"unknown model '{self.model}': choose from {', '.join(model_names())}")
        parse_bandwidth(self.cap)
        if self.trials < 1:
            raise UserError(f"--trials must be at least 1, got {self.trials}")
        if self.steps < 11:
            raise UserError(f"--steps must be at least 11 (10 timed), got {self.steps}")
        if self.repeats < 1 or self.workers < 2 or self.batch_size % self.workers:
            raise UserError("--repeats must be >= 1, --workers >= 2 and divide --batch-size")


def tuning_steps(method: str, trials: int, num_layers: int, per_trial: int = 2) -> int:
    """Steps a run needs so tuning certainly finishes: warm-up, every candidate timed (each
    settling once), plus two steps on the chosen plan. Guided times DPConfig's default
    numbers of thresholds and reorder points only, then may time its winner and the starting
    setting again, `autotune_confirm_rounds` times each."""
    if method == "guided":
        from cadence.dp.config import DPConfig

        config = DPConfig()
        candidates = (
            config.guided_thresholds
            + config.guided_reorder_points
            + 2 * config.autotune_confirm_rounds
        )
    else:
        candidates = trials + num_layers
    return WARMUP + (SETTLE + per_trial) * candidates + 2


def exhaustive_iterations(trials: int, num_layers: int, per_trial: int = 2) -> int:
    """Iterations exhaustive tuning spends when every candidate is new: warm-up, `trials`
    thresholds and the L - 1 other reorder points, one settling iteration each, and the first
    iteration of the chosen plan (the Autotuner counts it). Thresholds above the model's
    gradient bytes all give the same plan, so a shorter run can stand in for the 100-trial
    procedure; this gives what the full one would spend."""
    return WARMUP + (SETTLE + per_trial) * (trials + num_layers - 1) + 1


def summarise(tuned: dict[str, dict[str, Any]], measured: dict[str, list[float]]) -> dict[str, Any]:
    """Ratios of guided to exhaustive: measured iteration time of their choices (medians over
    runs) and the warm-up iterations each spent."""
    medians = {m: statistics.median(times) for m, times in measured.items()}
    return {
        "iteration_s": medians,
        "time_ratio": medians["guided"] / medians["exhaustive"],
        "iteration_ratio": tuned["guided"]["iterations"] / tuned["exhaustive"]["iterations"],
    }


def table_lines(tuned: dict[str, dict[str, Any]], summary: dict[str, Any]) -> list[str]:
    lines = [
        "| method | warm-up iterations | trials timed | threshold | K | iteration (measured) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for method in METHODS:
        t = tuned[method]
        lines.append(
            f"| {method} | {t['iterations']} | {t['trials']} | "
            f"{t['threshold_bytes'] / 2**20:.2f} MB | {t['reorder_k'] or 'off'} | "
            f"{summary['iteration_s'][method]:.3f} s |"
        )
    lines.append(
        f"guided/exhaustive: iteration time {summary['time_ratio']:.3f} (target <= 1.05), "
        f"warm-up iterations {summary['iteration_ratio']:.3f} (target <= 0.25)"
    )
    if "published_exhaustive_iterations" in summary:
        lines.append(
            f"the published 100-trial exhaustive procedure spends "
            f"{summary['published_exhaustive_iterations']} iterations on this model; guided "
            f"spent {summary['iteration_ratio_vs_published']:.3f} of that"
        )
    return lines


def _train(config: DPAutotuneBenchConfig, steps: int, **settings: Any) -> dict[str, Any]:
    from cadence.bench._train import train_for_bench
    from cadence.config import TrainConfig

    metrics = train_for_bench(
        TrainConfig(
            model=config.model,
            workers=config.workers,
            batch_size=config.batch_size,
            steps=steps,
            strategy="cadence-dp",
            emulate_bandwidth=config.cap,
            out=config.run_root,
            eval_every_epoch=False,
            threads=1,
            dp_threshold_mb=config.threshold_mb,
            autotune_trials=config.trials,
            **settings,
        )
    )
    return metrics


def tune(config: DPAutotuneBenchConfig, method: str, choice: Path) -> dict[str, Any]:
    """One tuning run; its choice is saved to `choice` and returned with what it cost."""
    from cadence.dp.layers import model_layout
    from cadence.models import get_model_spec

    choice.unlink(missing_ok=True)  # an existing file would be loaded instead of tuning
    layers = len(model_layout(get_model_spec(config.model).build()).layers)
    started = time.perf_counter()
    metrics = _train(
        config,
        tuning_steps(method, config.trials, layers),
        autotune=method,
        autotune_file=str(choice),
    )
    result = metrics.get("dp_autotune")
    if result is None or not choice.exists():
        raise UserError(f"{method} tuning did not finish within the run (see {config.run_root})")
    spent = metrics["iteration_times_s"][: result["iterations"]]
    return {**result, "tuning_s": sum(spent), "run_wall_s": time.perf_counter() - started}


def plot(tuned: dict[str, dict[str, Any]], path: Path) -> None:
    """Every timed trial's median iteration against its threshold, per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    for method, marker in zip(METHODS, ("o", "x"), strict=True):
        timings = tuned[method]["timings"]
        ax.scatter(
            [t[0] / 2**20 for t in timings], [t[2] for t in timings], marker=marker, s=18,
            label=f"{method}: {tuned[method]['iterations']} warm-up iterations",
        )  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("threshold (MB, log scale)")
    ax.set_ylabel("median iteration of the trial (s)")
    ax.set_title("warm-up trials: exhaustive vs guided", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_dp_autotune_bench(
    config: DPAutotuneBenchConfig, command: str, echo: Callable[[str], None] = print
) -> dict[str, Any]:
    from cadence.bench.dp import prepare_out

    out = prepare_out(config.out, True, config.run_root)
    started = time.time()
    choices = {m: Path(config.run_root) / f"choice-{m}.json" for m in METHODS}
    tuned: dict[str, dict[str, Any]] = {}
    for method in METHODS:
        echo(f"{config.model} @ {config.cap}: tuning with {method}")
        tuned[method] = tune(config, method, choices[method])
        t = tuned[method]
        echo(
            f"  chose threshold {t['threshold_bytes']} B, K {t['reorder_k']} "
            f"after {t['iterations']} iterations"
        )
    measured: dict[str, list[float]] = {m: [] for m in METHODS}
    for repeat in range(config.repeats):
        for method in METHODS if repeat % 2 == 0 else tuple(reversed(METHODS)):
            echo(f"  measuring {method}'s choice (run {repeat + 1}/{config.repeats})")
            metrics = _train(config, config.steps, autotune_file=str(choices[method]))
            measured[method].append(metrics["median_iteration_s"])
    summary = summarise(tuned, measured)
    from cadence.dp.layers import model_layout
    from cadence.models import get_model_spec

    layers = len(model_layout(get_model_spec(config.model).build()).layers)
    full = exhaustive_iterations(100, layers)
    summary["published_exhaustive_iterations"] = full
    summary["iteration_ratio_vs_published"] = tuned["guided"]["iterations"] / full
    report = {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "seconds": time.time() - started,
        "config": asdict(config),
        "tuned": tuned,
        "measured_runs_s": measured,
        **summary,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    plot(tuned, out.with_suffix(".png"))
    for line in table_lines(tuned, summary):
        echo(line)
    echo(f"wrote {out} and {out.with_suffix('.png')}")
    return report
