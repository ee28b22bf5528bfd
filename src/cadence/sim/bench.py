"""`cadence bench sim`: predicted vs measured iteration time of real (emulated-cluster) runs.

Each measured run is a `cadence train --json` file: its config names the model, workers,
global batch, strategy, optimizer and bandwidth cap, and it holds the median iteration. The
simulator predicts the same setting from a profile at the run's per-worker batch.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.sim.api import DDP_BUCKET_BYTES
from cadence.sim.bench_halves import error_score, halves_line, halves_summary
from cadence.sim.bench_twins import twins_line, twins_summary
from cadence.sim.command import (
    STRATEGIES,
    Setup,
    run_strategy,
    step_cost,
    zoo_arrival_order,
    zoo_buffer_broadcasts,
    zoo_layout,
)
from cadence.sim.compute import cap_link, emulated_options
from cadence.sim.metrics import write_text
from cadence.sim.options import SimOptions
from cadence.sim.stepcost import TCP_PAYLOAD_FRACTION, chosen_step_s
from cadence.sim.zero_graph import ZeroSimPlan
from cadence.zero.config import ZeroConfig

PROBE_STEPS = 10
"""Steps each `--run` training run times of its own compute after its steps (as `cadence
bench dp` does)."""


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
    co_run_slowdown: float = 1.0,
    calibrated: AlphaBeta | None = None,
    runtime_slowdowns: dict[str, dict[str, float]] | None = None,
    in_run_compute: bool | None = None,
    link_bucket: bool = False,
    probe: str = "after",
    step_shares: dict[str, float] | None = None,
    heap_factors: dict[str, dict[float, float]] | None = None,
) -> list[dict[str, Any]]:
    """One row per run: measured and predicted median iteration and the relative error.
    `co_run_slowdown` scales the (one-worker) profile's times for workers sharing a host;
    `calibrated` gives the links their alphas (`cap_link`); `runtime_slowdowns` (model ->
    strategy -> factor, `cadence bench runtime-cost`) slows a strategy's compute by its
    runtime's own cost. `in_run_compute`: scale the compute to the one the run timed in its
    own processes after its steps (`compute_probe`; an error where a run lacks it) instead
    of the profile's; None: where the run has it. `link_bucket`: price the emulated links'
    token bucket (`emulated_options`). `probe`: "interleaved" takes the compute a run of
    `HEAP_KEPT_STRATEGIES` timed in blocks between its steps (`interleaved_compute_probe`)
    instead ("auto" and "after" do not). `step_shares` (model -> share of Adam's step,
    `cadence.sim.step_share`): an Adam run with in-run compute prices the optimizer step as
    that share of it, not at the profile's or one timed now. `heap_factors` (model -> cap in
    bit/s -> factor, `cadence bench heap-cost`) slows the compute of DDP runs by the nearest
    cap's: `cadence train` leaves DDP's processes' glibc heap thresholds dynamic."""
    from cadence.bench.heap_cost import factor_at
    from cadence.bench.runtime_cost import STRATEGIES as RUNTIME_COSTED
    from cadence.netem import parse_bandwidth
    from cadence.sim.bench_dp import compute_scale, scaled_profile
    from cadence.sim.bench_dp_records import HEAP_KEPT_STRATEGIES

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
        slowdown = 1.0
        if runtime_slowdowns is not None and strategy in RUNTIME_COSTED.values():
            if model not in runtime_slowdowns:
                raise UserError(f"run {path}: no runtime cost of {model!r} given")
            slowdown = runtime_slowdowns[model].get(strategy, 1.0)
        if heap_factors is not None and strategy == "ddp":
            if model not in heap_factors:
                raise UserError(f"run {path}: no heap cost of {model!r} given")
            slowdown *= factor_at(heap_factors[model], bps)
        between = probe == "interleaved" and strategy in HEAP_KEPT_STRATEGIES
        probe_key = "interleaved_compute_probe" if between else "compute_probe"
        probed = data.get(probe_key)
        if in_run_compute and not probed:
            raise UserError(
                f"run {path} timed no compute of its own (`{probe_key}`): use "
                "--compute-basis beside"
            )
        in_run = bool(probed) and in_run_compute is not False
        compute_s = float(probed["lockstep_median_s"]) * slowdown if probed and in_run else 0.0
        key = (model, cfg.get("optimizer", "adam"))
        # The shares are of Adam's step, the one `cadence bench dp` trains with.
        shared = key[1] == "adam" and optimizer_step_s is None and model in (step_shares or {})
        if in_run and shared and step_shares:
            step_s = step_shares[model] * compute_s  # at the speed of the run's compute
            update_s_per_byte = step_s / max(1, gradient_bytes)
        else:
            if key not in steps:
                chosen = chosen_step_s(key[1], optimizer_step_s, profile.optimizer_step_s)
                steps[key] = step_cost(model, key[1], chosen, params)
            update_s_per_byte = steps[key]
            step_s = update_s_per_byte * gradient_bytes
        if in_run:
            # Profile + optimizer step = the run's own step without communication.
            factor = compute_scale(profile, compute_s, step_s)
            basis = "in-run, interleaved" if between else "in-run"
        else:
            factor, basis = co_run_slowdown * slowdown, "profile"
        setup = Setup(
            profile=scaled_profile(profile, factor),
            params=params,
            buffer_bytes=buffer_bytes,
            buffer_broadcasts=zoo_buffer_broadcasts(model),
            world_size=workers,
            link=cap_link(bps, payload_fraction, calibrated),
            description=f"{model} {cfg['emulate_bandwidth']}",
            update_s_per_byte=update_s_per_byte,
            arrival_order=zoo_arrival_order(model),
        )
        zero = None
        if strategy == "zero":
            zero = ZeroSimPlan.from_config(ZeroConfig.from_train_settings(cfg))
        result, _ = run_strategy(
            # cadence-dp at its defaults, as `cadence train --strategy cadence-dp` runs it
            setup, strategy, None, None, DDP_BUCKET_BYTES,
            emulated_options(options, bps, payload_fraction, link_bucket), zero=zero,
        )
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
                "optimizer_step_s": step_s,
                "compute_s": result.compute_s,
                "compute_basis": basis,
                "wire_s": result.wire_s,
            }
        )
    return rows


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    return error_score([r["error"] for r in rows])


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        f"{'run':<44}{'strategy':<12}{'cap':>9}{'measured':>10}{'predicted':>11}{'error':>8}"
        f"{'opt step':>10}"
    ]
    for r in rows:
        shown = r.get("variant", r["strategy"])  # `ddp-heap` beside DDP's own rows
        lines.append(
            f"{Path(r['run']).name[:43]:<44}{shown:<12}{r['bandwidth']:>9}"
            f"{r['measured_s']:>9.3f}s{r['predicted_s']:>10.3f}s{r['error'] * 100:>7.1f}%"
            f"{r['optimizer_step_s']:>9.3f}s"
        )
    halves = halves_summary(rows)
    if halves:  # before the score line, which scripts read as the output's last
        lines.append(halves_line(halves))
    twins = twins_summary(rows)
    if twins:
        lines.append(twins_line(twins))
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
        raise UserError(f"cannot make --out-dir {out_dir}: {exc.strerror or exc}") from None
    files = []
    for cap in caps:
        for strategy in strategies:
            path = Path(out_dir) / f"sim-{model}-{cap}-{strategy}.json"
            echo(f"training {model} {strategy} at {cap} ({steps} steps) -> {path}")
            config = TrainConfig(
                model=model,
                dataset="synthetic",
                workers=workers,
                batch_size=batch_size,
                steps=steps,
                strategy=strategy,
                emulate_bandwidth=cap,
                out="/tmp/cadence-bench-sim",
                # The run's own compute after its steps: what the prediction scales to.
                compute_probe_steps=PROBE_STEPS if strategy in ("ddp", "cadence-dp") else 0,
            )
            metrics, _ = train(config)
            write_text(path, json.dumps(metrics, indent=2) + "\n")
            files.append(str(path))
    return files


def _per_worker(cfg: dict[str, Any]) -> tuple[str, int]:
    return str(cfg["model"]), int(cfg["batch_size"]) // int(cfg["workers"])


def _bench_dp_models(path: str) -> list[tuple[str, int]]:
    from cadence.sim.bench_dp_records import read_bench_dp

    data = read_bench_dp(path)
    cfg = data.get("config", {})
    per_worker = int(cfg.get("batch_size", 64)) // int(cfg.get("workers", 2))
    return [(str(row["model"]), per_worker) for row in data["rows"]]


def _timeline_model(path: str) -> tuple[str, int]:
    from cadence.sim.bench_timeline import read_timeline

    cfg = read_timeline(path)["config"]
    return str(cfg["model"]), int(cfg.get("batch_size", 64)) // int(cfg.get("workers", 2))


def _charges(args: Any) -> dict[str, str | None]:
    """part -> file of each charge: its own flag, else the --costs folder's file, else None."""
    flags = {
        "contention": getattr(args, "contention", None),
        "calibration": getattr(args, "calibration", None),
        "runtime-cost": getattr(args, "runtime_cost", None),
        "heap-cost": getattr(args, "heap_cost", None),
    }
    folder = getattr(args, "costs", None)
    if not folder:
        return flags
    from cadence.bench.sim_costs import costs_files

    files = costs_files(folder)
    return {part: flag or files[part] for part, flag in flags.items()}


def bench_sim_command(args: Any) -> int:
    """`cadence bench sim`: optionally train in the emulated cluster, then compare."""
    runs = list(args.runs)
    charges = _charges(args)  # a bad --costs folder fails before any training or profiling
    load_before = os.getloadavg()  # predictions assume a core per worker: record contention
    if args.run:
        caps = [c for c in args.caps.split(",") if c.strip()]
        strategies = [x for x in args.strategies.split(",") if x.strip()]
        for strategy in strategies:
            if strategy not in STRATEGIES:
                raise UserError(f"unknown strategy {strategy!r}; accepted: {', '.join(STRATEGIES)}")
        runs += run_emulated(
            args.model, caps, strategies, args.steps, args.out_dir, args.workers, args.batch_size
        )
    bench_files = list(getattr(args, "from_bench_dp", []) or [])
    timelines = list(getattr(args, "from_timeline", []) or [])
    if not runs and not bench_files and not timelines:
        raise UserError(
            "nothing to compare: give `cadence train --json` files, --from-bench-dp, "
            "--from-timeline or --run"
        )
    profiles: dict[str, Profile] = {}
    for path in args.profile or []:
        profile = Profile.load(path)
        profiles[profile.model] = profile
    wanted = [_per_worker(_read_run(path)["config"]) for path in runs]
    for path in bench_files:
        wanted += _bench_dp_models(path)
    for path in timelines:
        wanted.append(_timeline_model(path))
    for model, per_worker in wanted:
        if model not in profiles:
            from cadence.profile import profile_command

            print(f"profiling {model} at batch {per_worker} (pass --profile to skip)")
            profiles[model] = profile_command(
                model, batch_size=per_worker, iterations=5, echo=lambda _: None
            )
    from cadence.bench.contention import ContentionFit
    from cadence.comm.calibrate import calibrated_link

    # Without a measurement: a spare core for communication, workers not slowing each other.
    contention = charges["contention"]
    fit = ContentionFit.load(contention) if contention else ContentionFit(0.0, 0.0)
    # A share given on the command line prices every row; else each row's own measurement.
    given_rate = getattr(args, "comm_rate_while_computing", None)
    options = SimOptions(
        comm_cpu_s_per_message=fit.cpu_s_per_message,
        comm_cpu_s_per_byte=fit.cpu_s_per_byte,
        ddp_first_bucket_bytes=None,  # the runs' DDP was built with bucket_cap_mb
        comm_rate_while_computing=given_rate or 1.0,
        layer_ready_points=getattr(args, "gradients_ready", "layer") == "layer",
        collectives_in_order=getattr(args, "collectives", "in-order") == "in-order",
    )
    co_run = fit.co_run_slowdown
    from cadence.bench.runtime_cost import read_slowdowns

    compute_basis = getattr(args, "compute_basis", "auto")
    paired_compute = getattr(args, "paired_compute", "lockstep")
    in_run = {"auto": None, "in-run": True, "beside": False, "interleaved": True}[compute_basis]
    probe = {"auto": "auto", "interleaved": "interleaved"}.get(compute_basis, "after")
    calibration = charges["calibration"]
    calibration_latency = getattr(args, "calibration_latency", "by-size")
    calibrated = calibrated_link(calibration, calibration_latency) if calibration else None
    link_bucket = getattr(args, "link_bucket", "none") == "tbf"
    runtime_cost = charges["runtime-cost"]
    slowdowns = read_slowdowns(runtime_cost) if runtime_cost else None
    if runtime_cost:
        from cadence.bench.sim_costs import runtime_cost_warning

        warning = runtime_cost_warning(runtime_cost)  # the predictions carry its drift
        if warning:
            print(warning)
    heap_cost = charges["heap-cost"]
    heap_factors = None
    if heap_cost:
        from cadence.bench.heap_cost import read_heap_factors

        heap_factors = read_heap_factors(heap_cost)
    shares = None
    if getattr(args, "step_shares", None):
        from cadence.sim.step_share import step_shares

        shares = step_shares(args.step_shares)
        print("optimizer step where a row timed none: " + ", ".join(
            f"{model} {share * 100:.2f}% of its compute" for model, share in sorted(shares.items())
        ))  # fmt: skip
    rows = predict_runs(
        runs, profiles, args.payload_fraction, options, args.optimizer_step, co_run, calibrated,
        slowdowns, in_run, link_bucket, probe, shares, heap_factors,
    )  # fmt: skip
    if bench_files:
        from cadence.sim.bench_dp import predict_bench_dp

        more, skipped = predict_bench_dp(
            bench_files, profiles, args.payload_fraction, args.optimizer_step, options, co_run,
            slowdowns, in_run_compute=in_run, calibrated=calibrated, link_bucket=link_bucket,
            probe=probe, step_shares=shares, heap_factors=heap_factors,
            measured_rates=given_rate is None,
            paired_compute=paired_compute,
        )  # fmt: skip
        rows += more
        for line in skipped:
            print(f"skipped {line}")
    if timelines:
        from cadence.sim.bench_timeline import predict_timelines

        more, skipped = predict_timelines(
            timelines, profiles, args.payload_fraction, options, calibrated, link_bucket
        )
        rows += more
        for line in skipped:
            print(f"skipped {line}")
    if not rows:
        raise UserError("no run with a known link to predict")
    for line in table_lines(rows):
        print(line)
    timed_now = sum(r.get("optimizer_step_basis") == "timed now" for r in rows)
    if timed_now:
        print(f"{timed_now} rows timed no optimizer step and their profile records none: priced "
              "with one timed now on this machine, which moves with its speed (pin it with "
              "--step-shares FILE... or --optimizer-step)")  # fmt: skip
    if args.json:
        data = {
            "command": "cadence " + shlex.join(sys.argv[1:]),
            "rows": rows,
            **summary(rows),
            "halves": halves_summary(rows),
            "twins": twins_summary(rows),
            "profiles": sorted(args.profile or []),
            "costs": getattr(args, "costs", None),
            "contention": contention,
            "runtime_cost": charges["runtime-cost"],
            "heap_cost": heap_cost,
            "calibration": calibration,
            "calibration_latency": calibration_latency if calibration else None,
            "compute_basis": compute_basis,
            "paired_compute": paired_compute,
            "step_shares": {"files": args.step_shares, "shares": shares} if shares else None,
            "link_bucket": "tbf" if link_bucket else "none",
            "comm_cpu": {
                "s_per_message": options.comm_cpu_s_per_message,
                "s_per_byte": options.comm_cpu_s_per_byte,
                "co_run_slowdown": co_run,
            },
            "load_average_1m_before_after": [load_before[0], os.getloadavg()[0]],
            "cpu_count": os.cpu_count(),
        }
        write_text(args.json, json.dumps(data, indent=2) + "\n")
    return 0
