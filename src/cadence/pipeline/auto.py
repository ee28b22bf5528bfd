"""`--schedule auto`: plan the pipeline at the start of training, the same on every rank.

Ranks 0 and 1 (stages 0 and 1 of the first replica) probe their link; rank 0 profiles the
model at the smallest micro-batch and at the full per-replica batch, simulates every candidate
(`planner.plan_pipeline`) and broadcasts the choice, so every rank builds the same schedule.
A planning error on rank 0 (e.g. no schedule fits the memory limit) is broadcast too and
raised on every rank, instead of leaving the others waiting. Rank 0 keeps the profiles for
re-planning during training (`replan.py`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from cadence.comm import broadcast_object
from cadence.comm.cost import AlphaBeta
from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.models import get_model_spec
from cadence.models.blocks import BlockModel
from cadence.pipeline.planner import MAX_MICROBATCHES, plan_pipeline
from cadence.pipeline.probe import probe_stage_link
from cadence.profile import Profile

_PROFILE_ITERATIONS = 3
_FREE_LINK = AlphaBeta(alpha_s=0.0, beta_s_per_byte=0.0)

LinkProbe = Callable[[], AlphaBeta | None]
"""Measures the stage link; called on every rank between steps, rank 0's answer is used."""


def profiles_for_model(model: BlockModel, name: str, sizes: list[int]) -> list[Any]:
    """Profiles of (a copy of) `model` at each batch size, on synthetic batches of zoo `name`."""
    from cadence.profile import profile_model

    out = []
    with torch.random.fork_rng():
        for size in sizes:
            batch = get_model_spec(name).synthetic_batch(size)
            out.append(
                profile_model(copy.deepcopy(model), batch, _PROFILE_ITERATIONS, 1, name)
            )
    return out


def start_profiles(model: BlockModel, config: TrainConfig, replicas: int) -> list[Profile]:
    """Profiles at the smallest micro-batch and at the full per-replica batch (rank 0 plans
    with these at start and keeps them for every re-plan: profiling is the slow part)."""
    per_replica = config.batch_size // replicas
    smallest = max(1, per_replica // min(MAX_MICROBATCHES, per_replica))
    return profiles_for_model(model, config.model, sorted({smallest, per_replica}))


def stage_link_probe(stages: int, world_size: int) -> LinkProbe:
    """The probe `--schedule auto` uses: ranks 0 and 1 (stages 0 and 1 of replica 0) measure
    their link; nothing to measure with one stage or one rank."""
    if stages > 1 and world_size > 1:
        return lambda: probe_stage_link(0, 1)
    return lambda: None


def plan_record(
    profiles: list[Profile],
    config: TrainConfig,
    replicas: int,
    link: AlphaBeta | None,
    ranges: tuple[tuple[int, int], ...] | None = None,
) -> dict[str, Any] | str:
    """Rank 0's planning: `PipelinePlan.to_json()` plus whether the link was probed, or the
    planner's one-line error. `ranges` fixes the stage split (re-planning keeps it)."""
    try:
        plan = plan_pipeline(
            profiles,
            stages=config.stages,
            batch_size=config.batch_size // replicas,
            link=link or _FREE_LINK,
            memory_limit=config.memory_limit,
            recompute=config.recompute,
            optimizer=config.optimizer,
            ranges=ranges,
        )
    except UserError as exc:
        return str(exc)
    return {**plan.to_json(), "probed": link is not None}


def plan_at_start(
    model: BlockModel,
    config: TrainConfig,
    replicas: int,
    is_main: bool,
    world_size: int,
    probe: LinkProbe | None = None,
) -> tuple[dict[str, Any], list[Profile] | None]:
    """The planner's record (`PipelinePlan.to_json()`, plus the probed link) on every rank, and
    the profiles it planned with (rank 0; None elsewhere). `probe` replaces the link probe
    (every rank calls it; rank 0's answer counts)."""
    link = (probe or stage_link_probe(config.stages, world_size))()
    record: dict[str, Any] | str = ""
    profiles = None
    if is_main:
        profiles = start_profiles(model, config, replicas)
        record = plan_record(profiles, config, replicas, link)
    record = broadcast_object(record)
    if isinstance(record, str):
        raise UserError(record)
    return record, profiles
