"""Pipeline parallel: stages balanced on a profile, schedules as per-stage action lists
(GPipe, 1F1B, kFkB), a validator, a memory model, and an executor.

Plans here are pure data (no torch.distributed) except `executor` and `api`, which run them.
Names load on first use, so `cadence.pipeline.schedule` stays torch-free for config checks.
"""

from typing import TYPE_CHECKING

from cadence._lazy import lazy_names

if TYPE_CHECKING:
    from cadence.pipeline.api import model_parallel, pipeline
    from cadence.pipeline.executor import PipelineExecutor
    from cadence.pipeline.memory import (
        StageMemory,
        optimizer_state_factor,
        peak_in_flight,
        stage_memory,
    )
    from cadence.pipeline.planner import PipelinePlan, plan_pipeline
    from cadence.pipeline.receives import torch_runtime_supports
    from cadence.pipeline.schedule import (
        Action,
        Schedule,
        build_schedule,
        gpipe,
        kfkb,
        one_f_one_b,
        parse_schedule_name,
    )
    from cadence.pipeline.stages import StagePlan, balance, even_split, plan_stages, stage_module
    from cadence.pipeline.validation import message_source, validate
    from cadence.pipeline.wrap import PipelineParallel, pipeline_parallel

_LAZY = {
    "Action": "cadence.pipeline.schedule",
    "PipelineExecutor": "cadence.pipeline.executor",
    "PipelinePlan": "cadence.pipeline.planner",
    "plan_pipeline": "cadence.pipeline.planner",
    "Schedule": "cadence.pipeline.schedule",
    "StageMemory": "cadence.pipeline.memory",
    "StagePlan": "cadence.pipeline.stages",
    "balance": "cadence.pipeline.stages",
    "build_schedule": "cadence.pipeline.schedule",
    "even_split": "cadence.pipeline.stages",
    "gpipe": "cadence.pipeline.schedule",
    "kfkb": "cadence.pipeline.schedule",
    "model_parallel": "cadence.pipeline.api",
    "one_f_one_b": "cadence.pipeline.schedule",
    "optimizer_state_factor": "cadence.pipeline.memory",
    "parse_schedule_name": "cadence.pipeline.schedule",
    "peak_in_flight": "cadence.pipeline.memory",
    "pipeline": "cadence.pipeline.api",
    "pipeline_parallel": "cadence.pipeline.wrap",
    "PipelineParallel": "cadence.pipeline.wrap",
    "plan_stages": "cadence.pipeline.stages",
    "stage_memory": "cadence.pipeline.memory",
    "stage_module": "cadence.pipeline.stages",
    "torch_runtime_supports": "cadence.pipeline.receives",
    "message_source": "cadence.pipeline.validation",
    "validate": "cadence.pipeline.validation",
}

__all__ = [
    "Action",
    "PipelineExecutor",
    "PipelinePlan",
    "Schedule",
    "StageMemory",
    "StagePlan",
    "balance",
    "build_schedule",
    "even_split",
    "gpipe",
    "kfkb",
    "message_source",
    "model_parallel",
    "one_f_one_b",
    "optimizer_state_factor",
    "parse_schedule_name",
    "peak_in_flight",
    "pipeline",
    "pipeline_parallel",
    "PipelineParallel",
    "plan_pipeline",
    "plan_stages",
    "stage_memory",
    "stage_module",
    "torch_runtime_supports",
    "validate",
]

__getattr__ = lazy_names(__name__, _LAZY)
