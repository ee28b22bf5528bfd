"""`--schedule auto`: plan the pipeline at the start of training, the same on every rank.

Ranks 0 and 1 (stages 0 and 1 of the first replica) probe their link; rank 0 profiles the
model at the smallest micro-batch and at the full per-replica batch, simulates every candidate
(`planner.plan_pipeline`) and broadcasts the choice, so every rank builds the same schedule.
A planning error on rank 0 (e.g. no schedule fits the memory limit) is broadcast too and
raised on every rank, instead of leaving the others waiting.
"""

from __future__ import annotations

import copy
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

_PROFILE_ITERATIONS = 3
_FREE_LINK = AlphaBeta(alpha_s=0.0, beta_s_per_byte=0.0)


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


def plan_at_start(
    model: BlockModel, config: TrainConfig, replicas: int, is_main: bool, world_size: int
) -> dict[str, Any]:
    """The planner's record (`PipelinePlan.to_json()`, plus the probed link), on every rank."""
    link = None
    if config.stages > 1 and world_size > 1:
        link = probe_stage_link(0, 1)  # ranks 0 and 1 are stages 0 and 1 of replica 0
    record: dict[str, Any] | str = ""
    if is_main:
        per_replica = config.batch_size // replicas
        smallest = max(1, per_replica // min(MAX_MICROBATCHES, per_replica))
        try:
            plan = plan_pipeline(
                profiles_for_model(model, config.model, sorted({smallest, per_replica})),
                stages=config.stages,
                batch_size=per_replica,
                link=link or _FREE_LINK,
                memory_limit=config.memory_limit,
                recompute=config.recompute,
                optimizer=config.optimizer,
            )
            record = {**plan.to_json(), "probed": link is not None}
        except UserError as exc:
            record = str(exc)
    record = broadcast_object(record)
    if isinstance(record, str):
        raise UserError(record)
    return record
