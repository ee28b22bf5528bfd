"""Pipeline parallel: stages balanced on a profile, schedules as per-stage action lists
(GPipe, 1F1B, kFkB), a validator, a memory model, and an executor.

Plans here are pure data (no torch.distributed) except `executor` and `api`, which run them.
"""

from cadence.pipeline.api import model_parallel, pipeline
from cadence.pipeline.executor import PipelineExecutor, torch_runtime_supports
from cadence.pipeline.memory import (
    StageMemory,
    optimizer_state_factor,
    peak_in_flight,
    stage_memory,
)
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
from cadence.pipeline.validate import validate

__all__ = [
    "Action",
    "PipelineExecutor",
    "Schedule",
    "StageMemory",
    "StagePlan",
    "balance",
    "build_schedule",
    "even_split",
    "gpipe",
    "kfkb",
    "model_parallel",
    "one_f_one_b",
    "optimizer_state_factor",
    "parse_schedule_name",
    "peak_in_flight",
    "pipeline",
    "plan_stages",
    "stage_memory",
    "stage_module",
    "torch_runtime_supports",
    "validate",
]
