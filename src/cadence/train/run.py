"""`cadence train`: validate the request, prepare the run directory, launch, summarise."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from cadence.config import TrainConfig, check_strategy_name
from cadence.errors import UserError
from cadence.launch import launch_local, torchrun_env_present
from cadence.models import dataset_names, get_model_spec
from cadence.models.refs import import_ref, is_ref


def validate(config: TrainConfig) -> None:
    """Name every problem the registries can see before any process starts; a user's own
    model, dataset and loss (`pkg.module:name`) are imported, not yet called (the workers
    call them and check that they fit together)."""
    check_strategy_name(config.job.strategy)
    for flag, ref in (("--model", config.model.name), ("--dataset", config.data.dataset),
                      ("--loss", config.model.loss)):  # fmt: skip
        if ref is not None and (is_ref(ref) or flag == "--loss"):
            import_ref(ref, flag)
    if is_ref(config.model.name):  # its datasets: checked by the config
        return
    spec = get_model_spec(config.model.name)
    if config.data.dataset is not None and not is_ref(config.data.dataset):
        if config.data.dataset not in dataset_names():
            raise UserError(
                f"unknown dataset '{config.data.dataset}': choose one of "
                f"{', '.join(dataset_names())}"
            )
        if config.data.dataset not in spec.datasets:
            raise UserError(
                f"model '{spec.name}' cannot use dataset '{config.data.dataset}'; "
                f"it accepts: {', '.join(spec.datasets)}"
            )


def make_run_dir(config: TrainConfig, stable_name: str | None = None) -> Path:
    """The run's output directory: --resume's, or <out>/<name> (made). `stable_name`: the name
    when --name is not given and every rank must arrive at the same one (torchrun)."""
    if config.job.resume is not None:
        from cadence.train.resume import check_matches, check_resumable, load_manifest

        check_resumable(config)
        run_dir = Path(config.job.resume)
        # One line now, before any worker starts, if there is nothing to resume from or it
        # was written by another job (the workers check again against the world they form).
        where, manifest = load_manifest(run_dir)
        world = int(os.environ.get("WORLD_SIZE", config.cluster.workers))
        check_matches(manifest, config, world, where)
        return run_dir
    model = config.model.name.replace(":", "-")  # pkg.module:factory
    name = (
        config.job.name
        or stable_name
        or f"{model}-{config.job.strategy}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    out = Path(config.job.out)
    run_dir = out / name
    if config.job.name is None and stable_name is None:
        # never overwrite an earlier run that started in the same second
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
        raise UserError(
            f"cannot write to --out '{config.job.out}': {exc.strerror or exc}"
        ) from None
    return run_dir


def train(config: TrainConfig) -> tuple[dict[str, Any], Path | None]:
    """Run the job described by `config`; returns rank 0's metrics (empty on other ranks)."""
    validate(config)
    if torchrun_env_present():
        from cadence.launch.worker import run_worker

        config = torchrun_resume(config)
        stable = torchrun_run_name(config)
        is_main = os.environ.get("RANK") == "0"
        shared = config.job.name is not None or stable is not None or config.job.resume
        # Without a name every rank agrees on, rank 0 alone writes (and no checkpoint/).
        run_dir = make_run_dir(config, stable) if shared or is_main else None
        return run_worker(config, run_dir), run_dir if is_main else None
    run_dir = make_run_dir(config)
    if config.cluster.emulate_bandwidth is None:
        return launch_local(config, run_dir), run_dir
    from cadence.netem import (
        EmulatedCluster,
        check_netem_available,
        cleanup_on_signals,
        parse_bandwidth,
    )

    bandwidth = parse_bandwidth(config.cluster.emulate_bandwidth)
    check_netem_available()
    classes = 0
    if config.job.strategy == "ps":  # `--ps-priority ORDER+net`: priority classes on the ports
        from cadence.ps.config import NETWORK_CLASSES, parse_priority

        classes = NETWORK_CLASSES if parse_priority(config.ps.priority)[1] else 0
    cluster = EmulatedCluster(config.cluster.workers, bandwidth, priority_classes=classes)
    with cleanup_on_signals(), cluster:
        return launch_local(config, run_dir, cluster), run_dir


def torchrun_run_name(config: TrainConfig) -> str | None:
    """Under torchrun every rank needs the same run directory (each writes its own checkpoint
    file there), also after torchrun restarts them: --name, else a name derived from torchrun's
    run id (`--rdzv-id`, or the one `--standalone` draws). None: --name is given, or there is
    no run id to derive one from."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    if config.job.name is not None or run_id == "none":
        return None
    model = config.model.name.replace(":", "-")
    return f"{model}-{config.job.strategy}-{run_id}"


def torchrun_resume(config: TrainConfig) -> TrainConfig:
    """`config`, resuming from its run directory's checkpoint when torchrun restarted the
    workers (`--max-restarts`) and there is one."""
    from dataclasses import replace

    from cadence.train.resume import find, writes_checkpoints

    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if config.job.resume is not None or restarts == 0 or not writes_checkpoints(config):
        return config
    run_dir = Path(config.job.out) / (config.job.name or torchrun_run_name(config) or "")
    if run_dir == Path(config.job.out) or find(run_dir) is None:
        return config  # killed before its first checkpoint: start again
    return replace(config, job=replace(config.job, resume=str(run_dir)))


def summary_lines(metrics: dict[str, Any], run_dir: Path | None) -> list[str]:
    accuracy = metrics["final_test_accuracy"]
    scored = (
        f"test loss {metrics['final_test_loss']:.4f}"  # targets that are not class labels
        if math.isnan(accuracy)
        else f"test accuracy {100 * accuracy:.2f}%"
    )
    lines = [
        f"done: {len(metrics['epochs'])} epochs, {metrics['steps']} steps in "
        f"{metrics['total_seconds']:.1f} s on {metrics['world_size']} workers; "
        f"{scored}; median iteration {metrics['median_iteration_s'] * 1000:.1f} ms"
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
