"""Time each stage's forward and backward on its own rank at plan time, as the executor runs them.

The planner's compute costs came from a block-by-block profile of the whole model, scaled to
the whole iteration. The executor runs something else: one stage module per rank, each
micro-batch's forward as one call (the last stage adds the loss) and its backward as one
`autograd.backward` from the received gradient, next to the other stages doing the same on
the same host. They differ most at small micro-batches: gpt_mini's first stage at 1 sample,
under the bench's allocator setting, 4.1-4.3 ms profiled and 5.4-5.8 ms as a stage, an error
the simulator carries into every action of a many-micro-batch schedule.

So, like the link probe, every stage rank times its own stage at every micro-batch size the
planner tries, all ranks at the same time (each size after a barrier), on a real input (the
earlier stages run forward locally: every rank holds the whole model). Medians over a few
repeats; rank 0 receives every stage's timings.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from cadence.comm import ops as comm
from cadence.models.blocks import BlockModel
from cadence.pipeline.executor import LossFn
from cadence.pipeline.stages import stage_module

PROBE_REPEATS = 5
"""Timed forward + backward pairs per size (after one untimed), medians taken."""

StageTimes = dict[int, tuple[float, float]]
"""Micro-batch size -> (forward seconds, backward seconds) of one stage."""


def time_stage(
    model: BlockModel,
    ranges: tuple[tuple[int, int], ...],
    stage: int,
    loss_fn: LossFn,
    batch: tuple[Tensor, Tensor],
    sizes: Sequence[int],
    repeats: int = PROBE_REPEATS,
    barrier: bool = False,
) -> StageTimes:
    """Forward and backward seconds of stage `stage` of (a copy of) `model` on the first n
    samples of `batch`, for each n in `sizes`, run as the executor runs one micro-batch.
    `barrier`: every rank of the group calls this at once and each size starts together."""
    if repeats < 1:
        raise ValueError(f"need at least one repeat, got {repeats}")
    with torch.random.fork_rng():
        copied = copy.deepcopy(model)
        module = stage_module(copied, ranges, stage)
        first, last = stage == 0, stage == len(ranges) - 1
        x, y = batch
        out: StageTimes = {}
        for n in sizes:
            if n > x.shape[0]:
                raise ValueError(f"size {n} is larger than the batch of {x.shape[0]}")
            inp = x[:n]
            with torch.no_grad():  # the stage's input: the earlier stages' output
                for s in range(stage):
                    inp = stage_module(copied, ranges, s)(inp)
            if barrier and dist.is_available() and dist.is_initialized():
                comm.barrier()
            fwd, bwd = [], []
            for i in range(repeats + 1):
                f, b = _one(module, inp, y[:n], first, last, loss_fn)
                if i:  # the first is warm-up
                    fwd.append(f)
                    bwd.append(b)
            module.zero_grad(set_to_none=True)
            out[n] = (statistics.median(fwd), statistics.median(bwd))
    return out


def _one(
    module: torch.nn.Module, inp: Tensor, y: Tensor, first: bool, last: bool, loss_fn: LossFn
) -> tuple[float, float]:
    start = time.perf_counter()
    x = inp if first else inp.detach().requires_grad_(True)
    output = module(x)
    if last:
        output = loss_fn(output, y)
    mid = time.perf_counter()
    grad = None if last else torch.ones_like(output)  # stands in for the received gradient
    torch.autograd.backward(output, grad)
    return mid - start, time.perf_counter() - mid


def probe_stage_times(
    model: BlockModel,
    ranges: tuple[tuple[int, int], ...],
    loss_fn: LossFn,
    batch: tuple[Tensor, Tensor],
    sizes: Sequence[int],
    repeats: int = PROBE_REPEATS,
) -> list[StageTimes] | None:
    """Every stage's `time_stage` on rank 0 (None on the others), each measured by its own
    rank of the first replica (rank s: stage s) while the others measure theirs. Every rank
    of the group must call it; ranks beyond the first replica time their stage too (in the
    pipeline they compute as well) but their timings are not used."""
    stages = len(ranges)
    if not (dist.is_available() and dist.is_initialized()):
        return [time_stage(model, ranges, s, loss_fn, batch, sizes, repeats) for s in range(stages)]
    rank = dist.get_rank()
    mine = time_stage(model, ranges, rank % stages, loss_fn, batch, sizes, repeats, True)
    every = comm.all_gather_object(mine)
    if rank != 0:
        return None
    found = every[:stages]
    assert all(t is not None for t in found)
    return [t for t in found if t is not None]
