"""Scheduled data parallel: `cadence.data_parallel(model, optimizer, config)`.

See `plan.py` for what is decided (chunks, priorities, issue order) and `runtime.py` for how it
is carried out (hooks, communication thread, per-layer updates and ready flags).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cadence._lazy import lazy_names

# Names load on first use: the plan (`cadence.dp.plan`) and config are plain data that the
# simulator and the command line read, and they should not wait for torch to import.
if TYPE_CHECKING:
    from cadence.dp.api import data_parallel
    from cadence.dp.config import DPConfig
    from cadence.dp.optimizer import ScheduledOptimizer
    from cadence.dp.plan import Chunk, DPPlan, ParamInfo, Segment, build_plan

_HOMES = {
    "Chunk": "cadence.dp.plan",
    "DPConfig": "cadence.dp.config",
    "DPPlan": "cadence.dp.plan",
    "ParamInfo": "cadence.dp.plan",
    "ScheduledOptimizer": "cadence.dp.optimizer",
    "Segment": "cadence.dp.plan",
    "build_plan": "cadence.dp.plan",
    "data_parallel": "cadence.dp.api",
}

__all__ = [
    "Chunk",
    "DPConfig",
    "DPPlan",
    "ParamInfo",
    "ScheduledOptimizer",
    "Segment",
    "build_plan",
    "data_parallel",
]

__getattr__ = lazy_names(__name__, _HOMES)
