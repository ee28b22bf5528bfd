"""User-facing entry points: pipeline parallel and inter-operator model parallel."""

from __future__ import annotations

from collections.abc import Sequence

import torch.distributed as dist
from torch import nn

from cadence import heap
from cadence.errors import UserError
from cadence.models.blocks import BlockModel
from cadence.pipeline.executor import LossFn, PipelineExecutor
from cadence.pipeline.schedule import build_schedule
from cadence.pipeline.sequential import as_blocks
from cadence.pipeline.stages import even_split, stage_module


def pipeline(
    model: nn.Module | Sequence[nn.Module],
    loss_fn: LossFn,
    schedule: str = "1f1b",
    microbatches: int = 4,
    ranges: tuple[tuple[int, int], ...] | None = None,
    recompute: bool = False,
    backend: str = "auto",
    data_parallel: int = 1,
    *,
    keep_heap: bool = True,
) -> PipelineExecutor:
    """Pipeline-parallel training of `model` over all ranks: rank s runs stage s (the executor
underneath `cadence.pipeline_parallel`, which adds the ordinary training loop around it).

    With `data_parallel` D > 1 it is hybrid data x pipeline: the W ranks form a (D, S) mesh,
    rank d * S + s runs stage s of replica d, each replica trains on its 1/D of the batch
    (`executor.shard(batch)`), and each stage's gradients are averaged over its D replicas.

    Every rank passes the same (identically initialised) `model`, an `nn.Sequential` (e.g. a
    `BlockModel`) or a list of modules; each keeps only its stage's blocks, `ranges[s]`
    (default: equal block counts). Call `executor.step(x, y)` every step
    (the first rank needs `x`, the last `y`), then step an optimizer over
    `executor.module.parameters()`. `keep_heap`: fix glibc's malloc thresholds for the
    process (`cadence.heap.keep_heap`), so each step reuses the heap's pages.
    """
    if keep_heap:
        heap.keep_heap()
    model = as_blocks(model)
    stages = num_stages(data_parallel)
    ranges = ranges if ranges is not None else even_split(len(model.blocks()), stages)
    if len(ranges) != stages:
        raise UserError(f"{len(ranges)} stage ranges for {stages} stages: give one per stage")
    _check_untied(model, ranges)
    return build_executor(
        model, ranges, loss_fn, schedule, microbatches, recompute, backend, data_parallel
    )


def num_stages(data_parallel: int) -> int:
    """Stages per pipeline when the world's ranks form `data_parallel` replicas."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    if data_parallel < 1 or world % data_parallel:
        raise UserError(f"data parallel size {data_parallel} does not divide {world} ranks")
    return world // data_parallel


def build_executor(
    model: BlockModel,
    ranges: tuple[tuple[int, int], ...],
    loss_fn: LossFn,
    schedule: str,
    microbatches: int,
    recompute: bool,
    backend: str,
    data_parallel: int,
) -> PipelineExecutor:
    """This rank's stage executor: rank d * S + s runs stage s of replica d."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    stages = len(ranges)
    plan = build_schedule(schedule, stages, microbatches, recompute)
    replica, stage = divmod(rank, stages)
    pp_group = dp_group = None
    if data_parallel > 1:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (data_parallel, stages), mesh_dim_names=("dp", "pp"))
        pp_group, dp_group = mesh.get_group("pp"), mesh.get_group("dp")
    return PipelineExecutor(
        stage_module(model, ranges, stage), plan, stage, loss_fn,
        ranks=[replica * stages + s for s in range(stages)], backend=backend,
        pp_group=pp_group, dp_group=dp_group,
    )


def _check_untied(model: BlockModel, ranges: tuple[tuple[int, int], ...]) -> None:
    # A parameter shared by two stages would get two copies and two different gradients.
    owner: dict[int, int] = {}
    for s in range(len(ranges)):
        for p in stage_module(model, ranges, s).parameters():
            if owner.setdefault(id(p), s) != s:
                raise UserError(
                    f"stages {owner[id(p)]} and {s} share a parameter (tied weights): "
                    "keep the tied blocks in one stage, or train with cadence.pipeline_parallel, "
                    "which sums a tied weight's gradients over its stages"
                )


def model_parallel(
    model: nn.Module | Sequence[nn.Module],
    loss_fn: LossFn,
    ranges: tuple[tuple[int, int], ...] | None = None,
) -> PipelineExecutor:
    """Inter-operator model parallel: consecutive blocks on different ranks, one micro-batch.

    This is the pipeline executor with M = 1: rank s computes blocks `ranges[s]` and hands its
    activations to rank s + 1 (and gradients back), so only one rank computes at a time; it
    trades speed for holding 1/S of the model per rank. Use `pipeline` with more micro-batches
    to keep the ranks busy at once.
    """
    return pipeline(model, loss_fn, "gpipe", 1, ranges)
