"""The per-step work of `cadence train`'s loop that a model's forward and backward leave out.

Two costs, measured as the loop pays them:

- the batch: every step indexes the host dataset with a batch of sample numbers and moves the
  result to the device (`data.train_x[idx].to(device)`). On a GPU that is a gather in host
  memory and a copy from pageable memory, with the device idle, since each step ends in a
  synchronise.
- the optimizer step on CUDA: timed alone (`cadence.profile.optimizer_step`) its kernels start
  on an idle device; inside the loop they queue behind the backward's and the host's time to
  launch them can land on the critical path (resnet32's Adam step took 0.96 ms alone and 2.7 ms
  inside the loop on one GPU). So on CUDA the step is the difference of
  whole loop steps with and without it, timed on the host's clock with a synchronise at each
  step's end, as the loop times them.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from cadence.config import TrainConfig
from cadence.models import BlockModel, loss_fn
from cadence.profile.clock import sync
from cadence.train.optim import build_optimizer

WARM_UP_S = 1.0
"""Seconds of whole iterations run before the loop's steps are timed on a GPU: a GPU and its
host start slow and speed up under load (gpt_mini's first profile iteration took 7.2 ms against
5.9 ms for the training run right after it)."""
LOOP_STEPS_CUDA = 50
"""Steps of each kind timed on a GPU at least (a GPU step takes milliseconds; the host's speed
moves them by more than the step of an optimizer)."""
POOL_BATCHES = 8
"""Batches of samples the input timing gathers from, so that each gather reads memory the
previous one did not just read (the loop gathers from the whole dataset)."""


def _host_pool(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """`POOL_BATCHES` copies of the batch on the host, as one dataset-like tensor each."""
    return (
        x.detach().cpu().repeat(POOL_BATCHES, *([1] * (x.dim() - 1))).contiguous(),
        y.detach().cpu().repeat(POOL_BATCHES, *([1] * (y.dim() - 1))).contiguous(),
    )


def batch_input_s(
    x: Tensor, y: Tensor, device: torch.device, iterations: int = 10, warmup: int = 2
) -> float:
    """Median seconds to gather a batch like (`x`, `y`) from host memory by sample numbers and
    move it to `device`, synchronised before and after, as `cadence train` does every step."""
    pool_x, pool_y = _host_pool(x, y)
    generator = torch.Generator().manual_seed(0)
    batch = int(x.shape[0])
    samples = []
    for i in range(warmup + iterations):
        idx = torch.randperm(len(pool_x), generator=generator)[:batch]
        sync(device)
        start = time.perf_counter()
        xb, yb = pool_x[idx].to(device), pool_y[idx].to(device)
        sync(device)
        if i >= warmup:
            samples.append(time.perf_counter() - start)
        del xb, yb
    return statistics.median(samples)


@dataclass(frozen=True)
class LoopTimes:
    """Whole training steps timed as the loop times them."""

    iteration_s: float
    """Median seconds of a step without the optimizer: zero_grad, forward, loss, backward."""
    optimizer_step_s: dict[str, float]
    """Seconds each optimizer's step adds to that median (never below 0)."""


def warm_up(model: BlockModel, x: Tensor, y: Tensor, seconds: float = WARM_UP_S) -> None:
    """Whole iterations for `seconds`, so that timing starts at the clocks training runs at."""
    device = x.device
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        sync(device)
    model.zero_grad(set_to_none=True)


def steps_in_loop(
    model: BlockModel,
    x: Tensor,
    y: Tensor,
    optimizers: tuple[str, ...],
    iterations: int = 10,
    warmup: int = 2,
) -> LoopTimes:
    """Whole training steps of `model` on (`x`, `y`) without an optimizer and with each of
    `optimizers`, run in turns so that a change of the machine's speed falls on all of them,
    each timed on the host's clock up to a synchronise. A step updates copies of the
    parameters (sharing the model's gradients), so the model is left as it was."""
    params = [p for p in model.parameters() if p.requires_grad]
    device = x.device
    copies = [nn.Parameter(p.detach().clone()) for p in params]
    # Nothing to step (no trainable parameter): no optimizer adds anything.
    steppers = {
        name: build_optimizer(copies, TrainConfig.from_flat(optimizer=name))
        for name in optimizers
        if copies
    }

    def loop_step(optimizer: torch.optim.Optimizer | None) -> float:
        sync(device)
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        for copy, p in zip(copies, params, strict=True):
            copy.grad = p.grad
        if optimizer is not None:
            optimizer.step()
        sync(device)
        return time.perf_counter() - start

    without: list[float] = []
    with_step: dict[str, list[float]] = {name: [] for name in steppers}
    for i in range(warmup + iterations):
        plain = loop_step(None)
        stepped = {name: loop_step(opt) for name, opt in steppers.items()}
        if i >= warmup:
            without.append(plain)
            for name, seconds in stepped.items():
                with_step[name].append(seconds)
    model.zero_grad(set_to_none=True)
    base = statistics.median(without)
    steps = {name: max(0.0, statistics.median(s) - base) for name, s in with_step.items()}
    return LoopTimes(base, {name: steps.get(name, 0.0) for name in optimizers})
