"""`--schedule auto`: plan the pipeline at the start of training, the same on every rank.

Ranks 0 and 1 (stages 0 and 1 of the first replica) probe their link; every rank profiles the
model at every micro-batch size the planner tries, all ranks at the same time (`profile_sizes`,
`profiles_for_model`); rank 0 splits the stages on its profile, every rank times its own
stage's forward and backward at those sizes (`measure_stage_times`); rank 0 simulates every
candidate on these (`planner.plan_pipeline`) and broadcasts the choice, so every rank builds
the same schedule.
A planning error on rank 0 (e.g. no schedule fits the memory limit) is broadcast too and
raised on every rank, instead of leaving the others waiting. Rank 0 keeps what it planned with
(`PlanInputs`) for re-planning during training (`replan.py`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from cadence.comm import broadcast_object
from cadence.comm import ops as comm
from cadence.comm.cost import AlphaBeta
from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.models import get_model_spec, loss_fn
from cadence.models.blocks import BlockModel
from cadence.pipeline.examples import BatchOf, Examples, job_examples
from cadence.pipeline.planner import microbatch_counts, plan_pipeline
from cadence.pipeline.probe import probe_stage_link
from cadence.pipeline.stage_probe import StageTimes, probe_stage_times
from cadence.pipeline.stages import PIPELINE_BLOCK_TIMING, plan_stages
from cadence.profile import Profile
from cadence.sim.pipeline_adapter import StageCosts, measured_stage_costs

_PROFILE_ITERATIONS = 5
"""Timed iterations per profiled size (medians): each size's time enters the plan unsmoothed."""
_FREE_LINK = AlphaBeta(alpha_s=0.0, beta_s_per_byte=0.0)

LinkProbe = Callable[[], AlphaBeta | None]
"""Measures the stage link; called on every rank between steps, rank 0's answer is used."""


def profile_sizes(batch_size: int) -> list[int]:
    """Every micro-batch size of the planner's candidates for a pipeline batch of `batch_size`
    (smallest first): each candidate's compute is then a measured size, not a fitted one."""
    return sorted({batch_size // m for m in microbatch_counts(batch_size)})


def profiles_for_model(
    model: BlockModel,
    name: str,
    sizes: list[int],
    together: bool = False,
    batch_of: BatchOf | None = None,
) -> list[Any]:
    """Profiles of (a copy of) `model` at each batch size, on `batch_of(size)` (default: the
    synthetic batches of zoo `name`).

    `together`: every rank of the process group calls this at once, and each size starts
    after a barrier, so every rank profiles while the others compute too, as stage ranks
    sharing a host do in the pipeline."""
    from cadence.profile import profile_model

    batch_of = batch_of or get_model_spec(name).synthetic_batch
    out = []
    with torch.random.fork_rng():
        for size in sizes:
            batch = batch_of(size)
            if together and dist.is_available() and dist.is_initialized():
                comm.barrier()
            out.append(profile_model(
                copy.deepcopy(model), batch, _PROFILE_ITERATIONS, 1, name, PIPELINE_BLOCK_TIMING
            ))
    return out


def start_profiles(
    model: BlockModel, config: TrainConfig, replicas: int, examples: Examples
) -> list[Profile]:
    """Profiles at every candidate micro-batch size of the per-replica batch, taken on every
    rank at once (rank 0 plans with its own at start and keeps them for every re-plan:
    profiling is the slow part). Every rank must call it."""
    sizes = profile_sizes(config.data.batch_size // replicas)
    return profiles_for_model(model, config.model.name, sizes, True, examples.profile_batch)


def measure_stage_times(
    model: BlockModel,
    name: str,
    ranges: tuple[tuple[int, int], ...],
    batch_size: int,
    examples: Examples | None = None,
) -> list[StageTimes] | None:
    """Every stage's forward and backward seconds at every candidate micro-batch size of a
    pipeline batch of `batch_size`, each timed by its own stage rank while the others time
    theirs (`stage_probe`): the planner's compute costs, on `examples` (default: zoo `name`'s
    synthetic batches and cross entropy). Rank 0 gets them, None elsewhere; every rank must
    call it."""
    if examples is None:
        zoo = get_model_spec(name).synthetic_batch
        examples = Examples(zoo, zoo, loss_fn)
    batch = examples.batch(batch_size)
    return probe_stage_times(model, ranges, examples.loss, batch, profile_sizes(batch_size))


def stage_link_probe(stages: int, world_size: int) -> LinkProbe:
    """The probe `--schedule auto` uses: ranks 0 and 1 (stages 0 and 1 of replica 0) measure
    their link; nothing to measure with one stage or one rank."""
    if stages > 1 and world_size > 1:
        return lambda: probe_stage_link(0, 1)
    return lambda: None


@dataclass(frozen=True)
class PlanInputs:
    """What rank 0 plans with, measured once at start and kept for every re-plan."""

    profiles: tuple[Profile, ...]
    """The model's profiles at every candidate micro-batch size (memory, stage balance)."""
    costs: StageCosts | None
    """Each stage's compute timed on its own rank (`measure_stage_times`), or None: taken
    from the profiles."""
    ranges: tuple[tuple[int, int], ...] | None
    """The stage split the costs were timed on, or None (the planner balances)."""


def plan_record(
    inputs: PlanInputs,
    config: TrainConfig,
    replicas: int,
    link: AlphaBeta | None,
    ranges: tuple[tuple[int, int], ...] | None = None,
) -> dict[str, Any] | str:
    """Rank 0's planning: `PipelinePlan.to_json()` plus whether the link was probed, or the
    planner's one-line error. `ranges` fixes the stage split (re-planning keeps it; default
    the inputs')."""
    try:
        plan = plan_pipeline(
            inputs.profiles,
            stages=config.pipeline.stages,
            batch_size=config.data.batch_size // replicas,
            link=link or _FREE_LINK,
            memory_limit=config.pipeline.memory_limit,
            recompute=config.pipeline.recompute,
            optimizer=config.optim.name,
            ranges=ranges or inputs.ranges,
            costs=inputs.costs,
        )
    except UserError as exc:
        return str(exc)
    return {**plan.to_json(), "probed": link is not None}


def agreed_ranges(
    profiles: list[Profile], stages: int, is_main: bool
) -> tuple[tuple[int, int], ...]:
    """Rank 0's stage split on its profile, on every rank (a split that cannot be made is
    raised on every rank as its one-line error). Every rank must call it."""
    split: tuple[tuple[int, int], ...] | str | None = None
    if is_main:
        try:
            split = plan_stages(profiles[0], stages).ranges
        except UserError as exc:
            split = str(exc)
    split = broadcast_object(split)
    if isinstance(split, str):
        raise UserError(split)
    assert split is not None
    return tuple((a, b) for a, b in split)


def plan_at_start(
    model: BlockModel,
    config: TrainConfig,
    replicas: int,
    is_main: bool,
    world_size: int,
    probe: LinkProbe | None = None,
    examples: Examples | None = None,
) -> tuple[dict[str, Any], PlanInputs | None]:
    """The planner's record (`PipelinePlan.to_json()`, plus the probed link) on every rank, and
    what it planned with (rank 0; None elsewhere). `probe` replaces the link probe (every
    rank calls it; rank 0's answer counts); `examples` the batches it profiles on (default:
    `job_examples(config, model)`)."""
    examples = examples or job_examples(config, model)
    link = (probe or stage_link_probe(config.pipeline.stages, world_size))()
    # on every rank: see profiles_for_model
    profiles = start_profiles(model, config, replicas, examples)
    ranges = agreed_ranges(profiles, config.pipeline.stages, is_main)
    per_replica = config.data.batch_size // replicas
    times = measure_stage_times(model, config.model.name, ranges, per_replica, examples)
    record: dict[str, Any] | str = ""
    inputs = None
    if is_main:
        assert times is not None
        inputs = PlanInputs(tuple(profiles), measured_stage_costs(times), ranges)
        record = plan_record(inputs, config, replicas, link)
    record = broadcast_object(record)
    if isinstance(record, str):
        raise UserError(record)
    return record, inputs
