"""`cadence bench sim`: predicted vs measured iteration time of real (emulated-cluster) runs.

Each measured run is a `cadence train --json` file: its config names the model, workers,
global batch, strategy, optimizer and bandwidth cap, and it holds the median iteration. The
simulator predicts the same setting from a profile at the run's per-worker batch.
`--from-bench-dp` adds the DDP and cadence-dp rows of `cadence bench dp` files
(`cadence.sim.bench_dp`).
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.sim.api import DDP_BUCKET_BYTES
from cadence.sim.command import (
    STRATEGIES,
    Setup,
    run_strategy,
    step_cost,
    zoo_arrival_order,
    zoo_buffer_broadcasts,
    zoo_layout,
)
from cadence.sim.compute import cap_link
from cadence.sim.metrics import write_text
from cadence.sim.options import SimOptions
from cadence.sim.stepcost import TCP_PAYLOAD_FRACTION, chosen_step_s
from cadence.sim.zero_graph import ZeroSimPlan
from cadence.zero.config import ZeroConfig


def _read_run(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
        if not (
            isinstance(data, dict) and "median_iteration_s" in data and "model" in data["config"]
        ):
            raise ValueError("no config.model or median_iteration_s")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"cannot read run {path}: not a `cadence train --json` file ({exc})"
        ) from None
    return data


def predict_runs(
    runs: Sequence[str],
    profiles: dict[str, Profile],
    payload_fraction: float = TCP_PAYLOAD_FRACTION,
    options: SimOptions | None = None,
    optimizer_step_s: float | None = None,
    calibrated: AlphaBeta | None = None,
) -> list[dict[str, Any]]:
    """One row per run: measured and predicted median iteration and the relative error.
    `calibrated` gives the links their alphas (`cap_link`)."""
    from cadence.netem import parse_bandwidth

    options = options or SimOptions()
    steps: dict[tuple[str, str], float] = {}
    rows = []
    for path in runs:
        data = _read_run(path)
        cfg = data["config"]
        model, workers, strategy = cfg["model"], int(cfg["workers"]), cfg["strategy"]
        if strategy not in STRATEGIES:
            raise UserError(f"run {path} used strategy {strategy!r}; predicted: {STRATEGIES}")
        if not cfg.get("emulate_bandwidth"):
            raise UserError(f"run {path} had no --emulate-bandwidth cap: its link is unknown")
        if model not in profiles:
            raise UserError(f"run {path} is of model {model!r}; no profile given for it")
        profile = profiles[model]
        if profile.batch_size * workers != int(cfg["batch_size"]):
            raise UserError(
                f"run {path} used {cfg['batch_size']} samples over {workers} workers but the "
                f"{model} profile has batch {profile.batch_size} per worker"
            )
        params, buffer_bytes = zoo_layout(model)
        gradient_bytes = sum(p.nbytes for p in params)
        bps = parse_bandwidth(cfg["emulate_bandwidth"])
        key = (model, cfg.get("optimizer", "adam"))
        if key not in steps:
            chosen = chosen_step_s(key[1], optimizer_step_s, profile.optimizer_step_s)
            steps[key] = step_cost(model, key[1], chosen, params)
        setup = Setup(
            profile=profile,
            params=params,
            buffer_bytes=buffer_bytes,
            buffer_broadcasts=zoo_buffer_broadcasts(model),
            world_size=workers,
            link=cap_link(bps, payload_fraction, calibrated),
            description=f"{model} {cfg['emulate_bandwidth']}",
            update_s_per_byte=steps[key],
            arrival_order=zoo_arrival_order(model),
        )
        zero = None
        if strategy == "zero":
            zero = ZeroSimPlan.from_config(ZeroConfig.from_train_settings(cfg))
        result, _ = run_strategy(
            # cadence-dp at its defaults, as `cadence train --strategy cadence-dp` runs it
            setup, strategy, None, None, DDP_BUCKET_BYTES, options, zero=zero,
        )  # fmt: skip
        measured = float(data["median_iteration_s"])
        rows.append(
            {
                "run": str(path),
                "model": model,
                "strategy": strategy,
                "bandwidth": cfg["emulate_bandwidth"],
                "workers": workers,
                "measured_s": measured,
                "predicted_s": result.iteration_s,
                "error": (result.iteration_s - measured) / measured,
                "optimizer_step_s": steps[key] * gradient_bytes,
                "compute_s": result.compute_s,
                "wire_s": result.wire_s,
            }
        )
    return rows


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The mean and the worst absolute error: how a check is scored."""
    magnitudes = [abs(r["error"]) for r in rows]
    return {"mean_abs_error": statistics.fmean(magnitudes), "worst_abs_error": max(magnitudes)}


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        f"{'run':<44}{'strategy':<12}{'cap':>9}{'measured':>10}{'predicted':>11}{'error':>8}"
        f"{'opt step':>10}"
    ]
    for r in rows:
        lines.append(
            f"{Path(r['run']).name[:43]:<44}{r['strategy']:<12}{r['bandwidth']:>9}"
            f"{r['measured_s']:>9.3f}s{r['predicted_s']:>10.3f}s{r['error'] * 100:>7.1f}%"
            f"{r['optimizer_step_s']:>9.3f}s"
        )
    s = summary(rows)
    lines.append(
        f"mean |error| {s['mean_abs_error'] * 100:.1f}%, worst {s['worst_abs_error'] * 100:.1f}% "
        f"over {len(rows)} runs (target: mean <= 5%, worst <= 10%)"
    )
    return lines


def run_emulated(
    model: str,
    caps: Sequence[str],
    strategies: Sequence[str],
    steps: int,
    out_dir: str,
    workers: int,
    batch_size: int,
    echo: Callable[[str], None] = print,
) -> list[str]:
    """Train each (cap, strategy) in the emulated cluster, alternating strategies; returns the
    `--json` files written (`<out_dir>/sim-<model>-<cap>-<strategy>.json`)."""
    from cadence.config import TrainConfig
    from cadence.train.run import train

    try:  # before minutes of training, not after
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot make {out_dir}: {exc.strerror or exc}") from None
    files = []
    for cap in caps:
        for strategy in strategies:
            path = Path(out_dir) / f"sim-{model}-{cap}-{strategy}.json"
            echo(f"training {model} {strategy} at {cap} ({steps} steps) -> {path}")
            config = TrainConfig.from_flat(
                model=model,
                dataset="synthetic",
                workers=workers,
                batch_size=batch_size,
                steps=steps,
                strategy=strategy,
                emulate_bandwidth=cap,
                out="/tmp/cadence-bench-sim",
            )
            metrics, _ = train(config)
            write_text(path, json.dumps(metrics, indent=2) + "\n")
            files.append(str(path))
    return files


def _per_worker(cfg: dict[str, Any]) -> tuple[str, int]:
    return str(cfg["model"]), int(cfg["batch_size"]) // int(cfg["workers"])


def _bench_dp_models(path: str) -> list[tuple[str, int]]:
    from cadence.sim.bench_dp import read_bench_dp

    data = read_bench_dp(path)
    cfg = data.get("config", {})
    per_worker = int(cfg.get("batch_size", 64)) // int(cfg.get("workers", 2))
    return [(str(row["model"]), per_worker) for row in data["rows"]]


def bench_sim_command(args: Any) -> int:
    """`cadence bench sim`: optionally train in the emulated cluster, then compare."""
    if getattr(args, "held_out", None):
        from cadence.sim.held_out_command import held_out_command

        if args.runs or args.run or args.from_bench_dp or args.profile:
            raise UserError(
                "--held-out trains and profiles its own rows: give it without run files, "
                "--run, --from-bench-dp or --profile"
            )

        return held_out_command(args)
    if getattr(args, "measured", None):
        raise UserError("--measured re-scores an earlier --held-out run: give --held-out too")
    runs = list(args.runs)
    out = Path(args.out)
    try:  # before any training or profiling, not after
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot make {out.parent}: {exc.strerror or exc}") from None
    load_before = os.getloadavg()  # predictions assume a core per worker: record contention
    if args.run:
        from cadence.bench.cli_args import one

        model = one(args.models, "--models")
        caps = [c for c in args.caps.split(",") if c.strip()]
        strategies = [x for x in args.strategies.split(",") if x.strip()]
        for strategy in strategies:
            if strategy not in STRATEGIES:
                raise UserError(f"unknown strategy {strategy!r}; accepted: {', '.join(STRATEGIES)}")
        runs += run_emulated(
            model, caps, strategies, args.steps, str(out.with_name(f"{out.stem}-runs")),
            args.workers, args.batch_size,
        )
    bench_files = list(getattr(args, "from_bench_dp", []) or [])
    if not runs and not bench_files:
        raise UserError(
            "nothing to compare: give `cadence train --json` files, --from-bench-dp or --run"
        )
    profiles: dict[str, Profile] = {}
    for path in args.profile or []:
        profile = Profile.load(path)
        profiles[profile.model] = profile
    wanted = [_per_worker(_read_run(path)["config"]) for path in runs]
    for path in bench_files:
        wanted += _bench_dp_models(path)
    for model, per_worker in wanted:
        if model not in profiles:
            from cadence.profile import profile_command

            print(f"profiling {model} at batch {per_worker} (pass --profile to skip)")
            profiles[model] = profile_command(
                model, batch_size=per_worker, iterations=5, echo=lambda _: None
            )
    from cadence.comm.calibration import calibrated_link

    # The runs' DDP was built with bucket_cap_mb, so no separate first bucket.
    options = SimOptions(ddp_first_bucket_bytes=None)
    calibration = args.calibration
    calibration_latency = getattr(args, "calibration_latency", "by-size")
    calibrated = calibrated_link(calibration, calibration_latency) if calibration else None
    rows = predict_runs(
        runs, profiles, args.payload_fraction, options, args.optimizer_step, calibrated
    )
    if bench_files:
        from cadence.sim.bench_dp import predict_bench_dp

        more, skipped = predict_bench_dp(
            bench_files, profiles, args.payload_fraction, args.optimizer_step, options, calibrated
        )
        rows += more
        for line in skipped:
            print(f"skipped {line}")
    if not rows:
        raise UserError("no run with a known link to predict")
    for line in table_lines(rows):
        print(line)
    data = {
        "command": "cadence " + shlex.join(sys.argv[1:]),
        "rows": rows,
        **summary(rows),
        "profiles": sorted(args.profile or []),
        "calibration": calibration,
        "calibration_latency": calibration_latency if calibration else None,
        "load_average_1m_before_after": [load_before[0], os.getloadavg()[0]],
        "cpu_count": os.cpu_count(),
    }
    write_text(out, json.dumps(data, indent=2) + "\n")
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


def plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Measured and predicted iteration time of every row, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{Path(r['run']).name[:28]}\n{r['strategy']} {r['bandwidth']}" for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows)), 4.5))
    ax.bar([i - 0.2 for i in x], [r["measured_s"] for r in rows], 0.4, label="measured")
    ax.bar([i + 0.2 for i in x], [r["predicted_s"] for r in rows], 0.4, label="predicted")
    ax.set_xticks(list(x), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("median iteration (s)")
    s = summary(rows)
    ax.set_title(
        f"mean |error| {s['mean_abs_error'] * 100:.1f}%, worst {s['worst_abs_error'] * 100:.1f}%"
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
