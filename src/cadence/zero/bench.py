"""`cadence bench zero`: ZeRO stages with and without 1-bit Adam against DDP + Adam, FSDP2 and
DeepSpeed ZeRO-2, in one emulated cluster.

    cadence bench zero --models vgg16 --caps 200mbit --steps 24 --freeze-steps 8 \\
        --out bench-out/bench-zero-vgg16.json

Every job runs `bench_worker.py`'s loop (same model, data, batch, seed, cap, threads); the
iteration time is the median over the steps after 1-bit Adam's switch-over plus two (the same
window for every job). Two byte figures per job and rank: the computed payload (cadence's
`comm_bytes_per_step`, DDP's ring all-reduce; none for the peers) and the bytes the host's
interface really sent in the window (kernel counters, TCP/IP headers included).
"""

from __future__ import annotations

import json
import platform
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from cadence.errors import UserError
from cadence.zero.bench_report import plot_losses, plot_times, table_lines, targets
from cadence.zero.bench_worker import JobSpec

WORKER = "cadence.zero.bench_worker"
ALL_JOBS = (
    "ddp", "fsdp2", "deepspeed-zero2",
    "zero1-none", "zero1-onebit", "zero1-onebit-bf16",
    "zero2-none", "zero2-onebit", "zero2-onebit-bf16",
    "zero3-none", "zero3-onebit", "zero3-onebit-bf16",
    "zero1-onebit-overlap", "zero1-onebit-bf16-overlap",
    "zero2-onebit-overlap", "zero2-onebit-bf16-overlap",
    "zero1-onebit-replicated", "zero2-onebit-replicated",
)  # fmt: skip


def job_spec(name: str, base: JobSpec) -> JobSpec:
    """The job called `name` ("ddp", "fsdp2", "deepspeed-zero2", "zero<S>-<comp>[-options]";
    `backorder`: every gather in backward order, `ZeroConfig.forward_gather_share` = 0;
    `fwdorder`: every gather after the backward in forward order, share 1; `front<N>`: share
    N percent; `onelane`: gathers on the same communication thread as the reductions,
    `ZeroConfig.gather_lane` off; `replicated`: `ZeroConfig.replicated_update`;
    `replicated<N>`: that for the front blocks within N percent of the parameters,
    `ZeroConfig.replicated_share`)."""
    if name in ("ddp", "fsdp2"):
        return replace(base, name=name, kind=name)
    if name == "deepspeed-zero2":
        return replace(base, name=name, kind="deepspeed", stage=2)
    parts = name.split("-")
    options = set(parts[2:])
    shares = _percent_options(options, "front")
    shares.update({"backorder": 0.0, "fwdorder": 1.0})
    orders = options & shares.keys()
    replicas = _percent_options(options, "replicated", bare=1.0)
    ok = (
        len(parts) >= 2
        and parts[0] in ("zero1", "zero2", "zero3")
        and parts[1] in ("none", "fp16", "onebit")
        and options - orders - replicas.keys() <= {"bf16", "overlap", "onelane"}
        and len(orders) <= 1
        and len(replicas) <= 1
        and len(options) == len(parts) - 2
    )
    if not ok:
        raise UserError(
            f"unknown zero bench job '{name}': "
            "zero<1|2|3>-<none|fp16|onebit>[-bf16][-overlap][-backorder|-fwdorder|-front<N>]"
            "[-onelane][-replicated[<N>]] "
            f"or one of {', '.join(ALL_JOBS[:3])}"
        )
    spec = replace(
        base,
        name=name,
        kind="zero",
        stage=int(parts[0][-1]),
        compression=parts[1],
        gather_dtype="bf16" if "bf16" in options else "fp32",
        overlap_gather="overlap" in options,
        forward_gather_share=shares[orders.pop()] if orders else JobSpec.forward_gather_share,
        gather_lane="onelane" not in options,
        replicated_update=bool(replicas),
        replicated_share=replicas.popitem()[1] if replicas else JobSpec.replicated_share,
    )
    spec.zero_config()  # a combination cadence.zero refuses fails here, before any run
    return spec


def _percent_options(options: set[str], prefix: str, bare: float | None = None) -> dict[str, float]:
    """The job-name options `<prefix><N>` (N percent, 0-100) with their fraction; `bare`, if
    given, is the fraction of `<prefix>` alone."""
    found: dict[str, float] = {}
    for o in options:
        match = re.fullmatch(rf"{prefix}(100|[1-9]?[0-9])?", o)
        if match and match[1] is not None:
            found[o] = int(match[1]) / 100
        elif match and bare is not None:
            found[o] = bare
    return found


def payload_bytes(spec: JobSpec, workers: int) -> int | None:
    """Computed payload bytes per step and rank after warm-up (None: not modelled here)."""
    from cadence.models import get_model_spec
    from cadence.zero.layout import bucket_params, build_layout, comm_bytes_per_step

    net = get_model_spec(spec.model).build()
    if spec.kind == "ddp":
        grad = sum(p.numel() * 4 for p in net.parameters() if p.requires_grad)
        return 2 * (workers - 1) * grad // workers
    if spec.kind != "zero":
        return None
    entries = [e for e in bucket_params(net) if e[2]]
    layout = build_layout(
        [(n, [(k, tuple(p.shape)) for k, p in params]) for n, _, params in entries], workers
    )
    gather = 2 if spec.gather_dtype == "bf16" else 4
    share = spec.replicated_share if spec.replicated_update else 0.0
    return comm_bytes_per_step(layout, spec.stage, spec.compression, True, gather, share)["total"]


def _run_job(cluster: Any, spec: JobSpec, run_dir: Path) -> list[dict[str, Any]]:
    from cadence.bench._launch import run_workers

    run_dir.mkdir(parents=True, exist_ok=True)
    spec_path = run_dir / "spec.json"
    spec_path.write_text(json.dumps(spec.to_json()) + "\n")
    timeout = 180 + 30 * spec.steps
    run_workers(cluster, WORKER, [str(spec_path), str(run_dir)], run_dir, spec.threads, timeout)
    return [
        json.loads((run_dir / f"rank{r}.json").read_text()) for r in range(len(cluster.hosts))
    ]


def _row(spec: JobSpec, ranks: list[dict[str, Any]], workers: int, bps: float) -> dict[str, Any]:
    window = spec.steps - spec.window_start
    times = [statistics.median(r["iteration_times_s"][spec.window_start :]) for r in ranks]
    tx = [r["iface_bytes"]["end"][1] - r["iface_bytes"]["start"][1] for r in ranks]
    rx = [r["iface_bytes"]["end"][0] - r["iface_bytes"]["start"][0] for r in ranks]
    payload = payload_bytes(spec, workers)
    wire_tx = statistics.mean(tx) / window
    return {
        "job": spec.name,
        "median_iteration_s": max(times),  # the slowest rank sets the pace
        "payload_bytes_per_step_per_rank": payload,
        "payload_wire_s": None if payload is None else payload * 8 / bps,
        "iface_tx_bytes_per_step_per_rank": wire_tx,
        "iface_rx_bytes_per_step_per_rank": statistics.mean(rx) / window,
        "iface_wire_s": wire_tx * 8 / bps,
        "step_loss": ranks[0]["step_loss"],
        "final_train_loss": ranks[0]["step_loss"][-1],
    }


def _merge_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One row per job: the median over rounds of each round's median step, every round's
    figure kept; bytes averaged over rounds; losses from the first (same seed every round)."""
    row = dict(rounds[0])
    row["round_iteration_s"] = [r["median_iteration_s"] for r in rounds]
    row["median_iteration_s"] = statistics.median(row["round_iteration_s"])
    for key in ("iface_tx_bytes_per_step_per_rank", "iface_rx_bytes_per_step_per_rank",
                "iface_wire_s"):  # fmt: skip
        row[key] = statistics.mean(r[key] for r in rounds)
    return row


def run_bench(
    model: str,
    bandwidth: str,
    steps: int,
    freeze_steps: int,
    workers: int,
    out: Path,
    *,
    jobs: tuple[str, ...] = (),
    batch_size: int = 64,
    repeats: int = 1,
    command: str = "",
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    from cadence.netem import (
        EmulatedCluster,
        check_netem_available,
        cleanup_on_signals,
        parse_bandwidth,
    )
    from cadence.profile import profile_command
    from cadence.zero.bench_predict import attach_predictions, predict_jobs
    from cadence.zero.peers import deepspeed_missing

    if repeats < 1:
        raise UserError(f"--repeats must be at least 1 (got {repeats})")
    if steps < freeze_steps + 12:
        raise UserError(f"--steps must be at least --freeze-steps + 12 (10 timed), got {steps}")
    base = JobSpec(name="", kind="ddp", model=model, batch_size=batch_size, steps=steps,
                   window_start=freeze_steps + 2, freeze_steps=freeze_steps)  # fmt: skip
    specs = [job_spec(name, base) for name in jobs or ALL_JOBS]
    bps = parse_bandwidth(bandwidth)
    check_netem_available()
    out.parent.mkdir(parents=True, exist_ok=True)
    runs_dir = Path(tempfile.mkdtemp(prefix="cadence-zero-bench-"))
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    summary: dict[str, Any] = {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.node()} ({platform.machine()})",
        "model": model, "bandwidth": bandwidth, "workers": workers, "batch_size": batch_size,
        "steps": steps, "freeze_steps": freeze_steps, "timed_steps": steps - base.window_start,
        "repeats": repeats, "rows": rows, "skipped": skipped,
    }  # fmt: skip
    runnable = []
    for spec in specs:
        reason = deepspeed_missing() if spec.kind == "deepspeed" else None
        if reason is None:
            runnable.append(spec)
        else:
            echo(f"{spec.name}: skipped: {reason}")
            skipped[spec.name] = reason
    rounds: dict[str, list[dict[str, Any]]] = {spec.name: [] for spec in runnable}
    # The simulator's input, made before the runs.
    profile_path = out.with_name(f"{out.stem}-profile.json")
    per_worker = max(1, batch_size // workers)
    echo(f"profiling {model} at batch {per_worker} per worker for the predictions")
    profile_command(model, batch_size=per_worker, iterations=5, out=profile_path,
                    echo=lambda _: None)  # fmt: skip
    predicted = predict_jobs(runnable, profile_path, workers, bandwidth)
    with cleanup_on_signals(), EmulatedCluster(workers, bps) as cluster:
        for index in range(repeats):
            # Alternate the order so no job always runs first (or last) on a drifting machine.
            for spec in runnable if index % 2 == 0 else runnable[::-1]:
                run_dir = runs_dir / f"{spec.name}-{index}"
                r = _row(spec, _run_job(cluster, spec, run_dir), workers, bps)
                rounds[spec.name].append(r)
                echo(f"{spec.name:<26} {r['median_iteration_s'] * 1000:8.1f} ms  "
                     f"iface {r['iface_tx_bytes_per_step_per_rank'] / 1e6:7.2f} MB/step"
                     + (f"  (round {index + 1}/{repeats})" if repeats > 1 else ""))  # fmt: skip
    rows.extend(_merge_rounds(rounds[spec.name]) for spec in runnable)
    attach_predictions(rows, predicted)
    shutil.rmtree(runs_dir, ignore_errors=True)
    summary["targets"] = targets(summary)
    out.write_text(json.dumps(summary, indent=2) + "\n")
    plot_times(out.with_suffix(".png"), summary)
    losses = out.with_name(f"{out.stem}-loss.png")
    plot_losses(losses, summary)
    for line in table_lines(summary):
        echo(line)
    echo(f"wrote {out}, {out.with_suffix('.png')}, {losses} and {profile_path}")
    return summary
