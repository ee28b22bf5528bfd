"""`cadence train`: validate the request, prepare the run directory, launch, summarise."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from cadence.config import TrainConfig, check_strategy_name
from cadence.errors import UserError
from cadence.launch import launch_local, torchrun_env_present
from cadence.models import dataset_names, get_model_spec


def validate(config: TrainConfig) -> None:
    """Name every problem the registries can see before any process starts."""
    spec = get_model_spec(config.model)
    if config.dataset is not None:
        if config.dataset not in dataset_names():
            raise UserError(
                f"unknown dataset '{config.dataset}': choose one of {', '.join(dataset_names())}"
            )
        if config.dataset not in spec.datasets:
            raise UserError(
                f"model '{spec.name}' cannot use dataset '{config.dataset}'; "
                f"it accepts: {', '.join(spec.datasets)}"
            )
    check_strategy_name(config.strategy)


def make_run_dir(config: TrainConfig) -> Path:
    name = config.name or f"{config.model}-{config.strategy}-{time.strftime('%Y%m%d-%H%M%S')}"
    out = Path(config.out)
    run_dir = out / name
    if config.name is None:  # never overwrite an earlier run that started in the same second
        suffix = 1
        while run_dir.exists():
            suffix += 1
            run_dir = out / f"{name}-{suffix}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"cannot write to --out '{config.out}': {exc.strerror or exc}") from None
    return run_dir


def train(config: TrainConfig) -> tuple[dict[str, Any], Path | None]:
    """Run the job described by `config`; returns rank 0's metrics (empty on other ranks)."""
    validate(config)
    if torchrun_env_present():
        from cadence.launch.worker import run_worker

        is_main = os.environ.get("RANK") == "0"
        run_dir = make_run_dir(config) if is_main else None
        return run_worker(config, run_dir), run_dir
    run_dir = make_run_dir(config)
    if config.emulate_bandwidth is None:
        return launch_local(config, run_dir), run_dir
    from cadence.netem import (
        EmulatedCluster,
        check_netem_available,
        cleanup_on_signals,
        parse_bandwidth,
    )

    bandwidth = parse_bandwidth(config.emulate_bandwidth)
    check_netem_available()
    classes = 0
    if config.strategy == "ps":  # `--ps-priority ORDER+net`: priority classes on the ports
        from cadence.ps.config import NETWORK_CLASSES, parse_priority

        classes = NETWORK_CLASSES if parse_priority(config.ps_priority)[1] else 0
    cluster = EmulatedCluster(config.workers, bandwidth, priority_classes=classes)
    with cleanup_on_signals(), cluster:
        return launch_local(config, run_dir, cluster), run_dir


def summary_lines(metrics: dict[str, Any], run_dir: Path | None) -> list[str]:
    lines = [
        f"done: {len(metrics['epochs'])} epochs, {metrics['steps']} steps in "
        f"{metrics['total_seconds']:.1f} s on {metrics['world_size']} workers; "
        f"test accuracy {100 * metrics['final_test_accuracy']:.2f}%; "
        f"median iteration {metrics['median_iteration_s'] * 1000:.1f} ms"
    ]
    if "wire_bound_s" in metrics:
        from cadence.netem import format_bandwidth

        lines.append(
            f"wire bound: ring all-reduce of {metrics['gradient_bytes'] / 1e6:.1f} MB of gradients "
            f"at {format_bandwidth(metrics['bandwidth_bps'])} takes "
            f"{metrics['wire_bound_s'] * 1000:.0f} ms (payload at line rate); median iteration is "
            f"{metrics['iteration_over_wire_bound']:.2f}x that"
        )
    if run_dir is not None:
        lines.append(f"wrote {run_dir}/{{metrics.json,training.png,checkpoint.pt}}")
    return lines
