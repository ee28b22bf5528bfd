"""A run's own compute speed, timed inside the run: what a simulation of the run scales to.

A benchmark that checks the simulator against a training run needs the compute each of the
run's steps did. Timed in a separate compute-only run, it is taken seconds or minutes away
from the run, and this machine's speed drifts by 10-30% over minutes (a 33 ms cnn_lstm step's
compute-only runs spread 1.31x within one `cadence bench dp` matrix). So after its steps a run
can time the same work without communication, in the same processes: every rank trains its own
fresh copy of the model on its own share of the batch, all ranks at once as during the run,
and the figure is each step's slowest rank (a step that ends in a collective waits for it).
The probe can also run in short blocks spread across the run (`InterleavedProbe`), so that it
times the same moments as the steps it prices.
"""

from __future__ import annotations

import contextlib
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


class ProbeModel:
    """A fresh copy of the model with its own optimizer, trained on this rank's `batches`:
    the work a probe times, one step at a time."""

    def __init__(
        self,
        spec: ModelSpec,
        data: Dataset,
        config: TrainConfig,
        ctx: DistContext,
        batches: Iterator[torch.Tensor],
    ) -> None:
        self.data, self.ctx, self.batches = data, ctx, batches
        with self._own_random_numbers():
            self.model = spec.build().to(ctx.device)
        self.model.train()
        self.optimizer = build_optimizer(self.model.parameters(), config)

    def _own_random_numbers(self) -> contextlib.AbstractContextManager[Any]:
        # The copy's initialisation and dropout must not move the run's random numbers: a
        # probe between the run's steps would otherwise change what the run trains.
        cuda = [self.ctx.device.index or 0] if self.ctx.device.type == "cuda" else []
        return torch.random.fork_rng(devices=cuda)

    def step(self) -> tuple[float, float]:
        """One step (zero_grad, forward, backward, optimizer step): (its seconds, the
        optimizer step's seconds)."""
        with self._own_random_numbers():
            return self._timed_step()

    def _timed_step(self) -> tuple[float, float]:
        start = time.perf_counter()
        idx = next(self.batches)
        x = self.data.train_x[idx].to(self.ctx.device)
        y = self.data.train_y[idx].to(self.ctx.device)
        self.optimizer.zero_grad(set_to_none=True)
        loss_fn(self.model(x), y).backward()
        _synchronize(self.ctx.device)
        before_step = time.perf_counter()
        self.optimizer.step()
        _synchronize(self.ctx.device)
        end = time.perf_counter()
        return end - start, end - before_step


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
    _flush(optimizer)
    probe = ProbeModel(spec, data, config, ctx, batches)
    _barrier(alone)  # every rank starts together: step i runs at about the same time on each
    # One step more than timed: the first allocates everything and is not counted, and
    # neither is its optimizer step, which creates Adam's state.
    probe.step()
    timed = [probe.step() for _ in range(config.compute_probe_steps)]
    return agreed_figures(timed, alone)


class InterleavedProbe:
    """Compute timed inside the run's window: after every `every`-th step (not after the
    last) the run's reductions are flushed and `BLOCK_STEPS` steps of a fresh copy of the
    model are timed, all ranks at once. A probe after the steps times a few seconds later
    than the steps it prices, and this machine's speed moves within seconds; spread across
    the run, the probe samples the same moments as the steps. The step after each block
    starts with nothing on the wire, unlike a steady cadence-dp step, so the run leaves it
    out of its median (`disturbed_steps`)."""

    def __init__(
        self, probe: ProbeModel, every: int, total_steps: int, optimizer: torch.optim.Optimizer,
        alone: bool,
    ) -> None:  # fmt: skip
        self.probe, self.every, self.total_steps = probe, every, total_steps
        self.optimizer, self.alone = optimizer, alone
        self.timed: list[tuple[float, float]] = []
        self.disturbed_steps: list[int] = []
        # Allocate everything (and Adam's state) before the run, outside any timed step.
        probe.step()

    def after_step(self, steps_done: int) -> bool:
        """Run a block if one is due after `steps_done` steps; whether one ran (the caller
        restarts its step clock)."""
        if steps_done % self.every or steps_done >= self.total_steps:
            return False
        _flush(self.optimizer)
        _barrier(self.alone)
        self.timed += [self.probe.step() for _ in range(BLOCK_STEPS)]
        self.disturbed_steps.append(steps_done)  # the index of the step that comes next
        return True

    def result(self) -> dict[str, Any] | None:
        """The blocks' figures as `probe_compute`'s, agreed by every rank; None if the run
        was too short for a block."""
        if not self.timed:
            return None
        return agreed_figures(self.timed, self.alone)


BLOCK_STEPS = 2
"""Probe steps per interleaved block: two, so five blocks time about as many steps as the
probe after the steps (10) while the run loses only one step to each block."""


def agreed_figures(timed: list[tuple[float, float]], alone: bool) -> dict[str, Any]:
    """Each rank's (step, optimizer step) seconds -> the lockstep median (each step's slowest
    rank), the slowest rank's median step and median optimizer step, and the steps timed."""
    durations = [whole for whole, _ in timed]
    figures = [
        *durations,
        statistics.median(durations),
        statistics.median(update for _, update in timed),
    ]
    if not alone and dist.is_initialized():
        figures = slowest(figures)  # one collective: each figure's maximum over the ranks
    *durations, rank_median, step_median = figures
    return {
        "steps": len(durations),
        "lockstep_steps_s": durations,
        "lockstep_median_s": statistics.median(durations),
        "slowest_rank_median_s": rank_median,
        "optimizer_step_median_s": step_median,
    }


def _flush(optimizer: torch.optim.Optimizer) -> None:
    flush = getattr(optimizer, "flush", None)
    if callable(flush):
        flush()  # cadence-dp returns from step() with reductions in flight


def _barrier(alone: bool) -> None:
    if not alone and dist.is_initialized():
        dist.barrier()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the kernels, not their launches
