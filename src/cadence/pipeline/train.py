"""`--strategy pipeline` in `cadence train`: rank s trains stage s, the loop hands it each step.

With W = D x S workers it is hybrid data x pipeline: rank d * S + s runs stage s of replica d.
The model is a zoo `BlockModel` or the user's `nn.Sequential` (`--model pkg.module:factory`),
cut between its modules; stages are balanced on a profile of the job's example batches
(`examples.py`) and trained with `--loss`. `--grad-accum N` runs N x `--microbatches` in one
step: the same gradients as N groups of micro-batches (each micro-batch's loss is divided by
the count), with one gradient exchange between replicas.

Every rank builds the whole model (same seed) and keeps it, but computes and updates only its
stage's blocks; the optimizer the loop built over all parameters skips the others (their
gradients stay None). Before each evaluation and checkpoint, `sync` broadcasts every stage's
parameters and buffers from its owner, so the plain module is the trained model on every rank.
With `--schedule auto`, `--replan-every` / `--replan-file` may switch the executor to a new
schedule and micro-batch count before a step (`replan.py`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim import Optimizer

from cadence.comm import DistContext, broadcast_object
from cadence.comm import ops as comm
from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.models import get_model_spec
from cadence.models.blocks import BlockModel
from cadence.pipeline.api import pipeline
from cadence.pipeline.auto import LinkProbe, plan_at_start, stage_link_probe
from cadence.pipeline.examples import BatchOf, job_examples
from cadence.pipeline.executor import PipelineExecutor
from cadence.pipeline.replan import Replanner, switch_executor
from cadence.pipeline.sequential import as_blocks
from cadence.pipeline.stages import PIPELINE_BLOCK_TIMING, balance, stage_module

_PROFILE_ITERATIONS = 3


def profiled_ranges(
    model: BlockModel,
    model_name: str,
    num_stages: int,
    microbatch: int,
    batch_of: BatchOf | None = None,
) -> tuple[tuple[int, int], ...]:
    """Stage ranges balanced on a quick profile of `model` (a copy) at the micro-batch size,
    on `batch_of(microbatch)` (default: zoo `model_name`'s synthetic batch)."""
    from cadence.profile import profile_model

    with torch.random.fork_rng():
        batch = (batch_of or get_model_spec(model_name).synthetic_batch)(microbatch)
        profile = profile_model(
            copy.deepcopy(model), batch, _PROFILE_ITERATIONS, 1, model_name, PIPELINE_BLOCK_TIMING
        )
    return balance([b.total_s for b in profile.blocks], num_stages)


def pipeline_blocks(model: nn.Module, name: str) -> BlockModel:
    """`model` as the blocks the pipeline cuts between: a zoo `BlockModel`, or the user's
    `nn.Sequential` (the same modules, under the same names, so checkpoints keep its keys)."""
    if isinstance(model, BlockModel):
        return model
    # A Sequential subclass with a forward of its own does more than apply its modules in order.
    if isinstance(model, nn.Sequential) and type(model).forward is nn.Sequential.forward:
        return as_blocks(model)
    raise UserError(
        f"--strategy pipeline cuts a model into stages between the modules of an "
        f"nn.Sequential: make --model {name} return an nn.Sequential whose modules each take "
        f"and return one tensor (it returned a {type(model).__name__})"
    )


def _has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, _BatchNorm) for m in model.modules())


class PipelineTrainer(nn.Module):
    """This rank's stage plus the hooks the training loop calls (`train_step`, `sync`)."""

    full_batch = True
    """Every rank reads the whole global batch: the first stage its inputs, the last its
    targets (micro-batches are cut from it)."""

    def __init__(
        self, model: BlockModel, executor: PipelineExecutor, ranges: tuple[tuple[int, int], ...]
    ) -> None:
        super().__init__()
        self.stage = executor.module  # registered: this rank's trained parameters
        self.executor = executor
        self.ranges = ranges
        self._full = [model]  # a list keeps the whole model out of this module's parameters
        self.plan_record: dict[str, Any] | None = None
        """What `--schedule auto` chose and weighed (saved in metrics.json), else None."""
        self.replanner: Replanner | None = None
        """Re-plans between steps (`--replan-every`, `--replan-file`), else None."""
        self.steps_done = 0

    @property
    def full_model(self) -> BlockModel:
        return self._full[0]

    def forward(self, x: Tensor) -> Tensor:
        raise RuntimeError("a pipeline stage is trained with train_step, evaluated via sync")

    def train_step(self, x: Tensor, y: Tensor, optimizer: Optimizer) -> Tensor:
        """One optimizer step on the batch (this replica's share of it). Returns this rank's
        share of the batch loss: the loop averages shares over all D x S ranks, so the last
        stage of each replica reports its loss x S and the other stages zero."""
        if self.replanner is not None:
            self._maybe_replan(self.replanner)
        self.steps_done += 1
        optimizer.zero_grad(set_to_none=True)
        ex = self.executor
        x, y = ex.shard(x), ex.shard(y)
        loss = ex.step(x if ex.is_first else None, y if ex.is_last else None)
        optimizer.step()
        if loss is None:
            return torch.zeros(())
        return loss * len(self.ranges)

    def _maybe_replan(self, replanner: Replanner) -> None:
        reason = replanner.reason(self.steps_done)
        if reason is None:
            return
        ex = self.executor
        old = (ex.schedule.name, ex.schedule.num_microbatches)
        done = replanner.replan(self.steps_done, reason, old)
        if done.switched:
            self.executor = switch_executor(
                ex, done.new_schedule, done.new_microbatches, ex.schedule.recompute
            )

    def run_report(self) -> dict[str, Any]:
        """For metrics.json: every re-plan (empty without re-planning)."""
        if self.replanner is None:
            return {}
        return {"pipeline_replans": [r.to_json() for r in self.replanner.history]}

    @torch.no_grad()
    def sync(self) -> None:
        """Make the whole model equal to the trained stages on every rank (a collective)."""
        if not dist.is_initialized():
            return
        for s in range(len(self.ranges)):
            piece = stage_module(self.full_model, self.ranges, s)
            tensors = [*piece.parameters(), *piece.buffers()]
            floats = [t for t in tensors if t.is_floating_point()]
            if floats:
                flat = torch.cat([t.reshape(-1) for t in floats])
                comm.broadcast(flat, src=s)  # replica 0's stage s; replicas are equal
                for t, value in zip(floats, flat.split([t.numel() for t in floats]), strict=True):
                    t.copy_(value.view_as(t))
            for t in tensors:  # integer buffers (e.g. BatchNorm's batch counter)
                if not t.is_floating_point():
                    comm.broadcast(t, src=s)


def pipeline_wrap_for(
    config: TrainConfig, probe: LinkProbe | None = None
) -> Callable[[nn.Module, Optimizer, DistContext], tuple[nn.Module, Optimizer]]:
    """The `Strategy.configure` of `--strategy pipeline`. `probe` replaces the stage link probe
    of `--schedule auto` and its re-plans (tests inject links with it)."""

    def wrap(
        built: nn.Module, optimizer: Optimizer, ctx: DistContext
    ) -> tuple[nn.Module, Optimizer]:
        model = pipeline_blocks(built, config.model.name)
        stages = config.pipeline.stages
        balance([1.0] * len(model.blocks()), stages)  # every rank: too many stages?
        if ctx.world_size % stages:
            raise UserError(
                f"--strategy pipeline needs --workers a multiple of --stages {stages} "
                f"(replicas x stages), got {ctx.world_size}"
            )
        replicas = ctx.world_size // stages
        # --grad-accum N runs N x the micro-batches in one step: each micro-batch's loss is
        # divided by their count, so the gradients are the mean loss's, as N groups would give.
        microbatches = config.pipeline.microbatches * config.data.grad_accum
        schedule, record = config.pipeline.schedule, None
        backend = config.pipeline.backend
        link_probe = probe or stage_link_probe(stages, ctx.world_size)
        examples = job_examples(config, model)
        inputs = None
        if schedule == "auto":
            backend = "cadence"  # the runtime the planner's simulator models
            record, inputs = plan_at_start(
                model, config, replicas, ctx.is_main, ctx.world_size, link_probe, examples
            )
            schedule = record["best"]["schedule"]
            microbatches = record["best"]["microbatches"]
            ranges: tuple[tuple[int, int], ...] = tuple((a, b) for a, b in record["ranges"])
            if ctx.is_main:
                print(f"pipeline plan: {record['why']}", flush=True)
        else:
            microbatch = config.data.batch_size // (replicas * microbatches)
            found = None
            if ctx.is_main:
                found = profiled_ranges(
                    model, config.model.name, stages, microbatch, examples.profile_batch
                )
            ranges = broadcast_object(found)
        if model is not built and _has_batchnorm(model):  # the user's nn.Sequential
            if microbatches > 1:
                raise UserError(
                    f"BatchNorm in --model {config.model.name} would normalise each of the "
                    "pipeline's micro-batches on its own statistics: use --microbatches 1 and "
                    "--grad-accum 1 (exact), or GroupNorm/LayerNorm"
                )
            if backend == "auto":
                # torch's runtime runs an extra forward to infer shapes, which would move the
                # running statistics once more than training does.
                backend = "cadence"
        executor = pipeline(
            model,
            examples.loss,
            schedule,
            microbatches,
            ranges,
            config.pipeline.recompute,
            backend=backend,
            data_parallel=replicas,
            keep_heap=config.cluster.keep_heap,
        )
        trainer = PipelineTrainer(model, executor, ranges)
        trainer.plan_record = record
        if record is not None and (config.pipeline.replan_every or config.pipeline.replan_file):
            trainer.replanner = Replanner(
                config, replicas=replicas, is_main=ctx.is_main, ranges=ranges,
                inputs=inputs, probe=link_probe,
            )  # fmt: skip
        return trainer, optimizer

    return wrap
