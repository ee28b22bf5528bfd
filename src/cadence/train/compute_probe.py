"""A run's own compute speed, timed inside the run: what a simulation of the run scales to.

A benchmark that checks the simulator against a training run needs the compute each of the
run's steps did. Timed in a separate compute-only run, it is taken seconds or minutes away
from the run, and this machine's speed drifts by 10-30% over minutes (a 33 ms cnn_lstm step's
compute-only runs spread 1.31x within one `cadence bench dp` matrix). So after its steps a run
can time the same work without communication, in the same processes: every rank trains its own
fresh copy of the model on its own share of the batch, all ranks at once as during the run,
and the figure is each step's slowest rank (a step that ends in a collective waits for it).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from cadence.comm import DistContext
from cadence.comm.calibrate import slowest
from cadence.config import TrainConfig
from cadence.models import Dataset, ModelSpec, loss_fn
from cadence.train.optim import build_optimizer


def probe_compute(
    spec: ModelSpec,
    data: Dataset,
    config: TrainConfig,
    ctx: DistContext,
    batches: Iterator[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    alone: bool,
) -> dict[str, Any]:
    """Time `config.compute_probe_steps` steady steps (zero_grad, forward, backward, optimizer
    step) of a fresh copy of the model on this rank's `batches`. `optimizer` is the run's: it is
    flushed first, so no gradient of the run is still on the wire. `alone`: the ranks do not
    agree on the figures (each keeps its own). Returns the lockstep median (each step's slowest
    rank), the slowest rank's median, the slowest rank's median optimizer step (the share of
    the step a simulation prices as the update, timed in the same processes as the run's steps)
    and the steps timed."""
    flush = getattr(optimizer, "flush", None)
    if callable(flush):
        flush()  # cadence-dp returns from step() with reductions in flight
    model = spec.build().to(ctx.device)
    model.train()
    probe_optimizer = build_optimizer(model.parameters(), config)
    steps = config.compute_probe_steps
    if not alone and dist.is_initialized():
        dist.barrier()  # every rank starts together: step i runs at about the same time on each
    stamps = []
    optimizer_steps = []
    # One step more than timed: the first allocates everything and is not counted.
    for _ in range(steps + 1):
        stamps.append(time.perf_counter())
        idx = next(batches)
        x, y = data.train_x[idx].to(ctx.device), data.train_y[idx].to(ctx.device)
        probe_optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        _synchronize(ctx.device)
        before_step = time.perf_counter()
        probe_optimizer.step()
        _synchronize(ctx.device)
        optimizer_steps.append(time.perf_counter() - before_step)
    stamps.append(time.perf_counter())
    durations = [b - a for a, b in zip(stamps[1:-1], stamps[2:], strict=True)]
    # Each step, then this rank's medians of whole steps and of optimizer steps (the first
    # optimizer step, which creates Adam's state, is not counted either).
    figures = [*durations, statistics.median(durations), statistics.median(optimizer_steps[1:])]
    if not alone and dist.is_initialized():
        figures = slowest(figures)  # one collective: each figure's maximum over the ranks
    *durations, rank_median, step_median = figures
    return {
        "steps": len(durations),
        "lockstep_median_s": statistics.median(durations),
        "slowest_rank_median_s": rank_median,
        "optimizer_step_median_s": step_median,
    }


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the kernels, not their launches
