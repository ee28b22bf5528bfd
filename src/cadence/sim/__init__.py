"""Discrete-event simulation of training iterations: predict time, overlap and memory from a
profile, a cost model and the same plan objects the executors run.

`simulate_dp` / `simulate_ddp` are the entry points; `TaskGraph` + `run` are the engine that
other plan types (parameter server, pipeline, ZeRO) build their adapters on.
"""

from cadence.sim.api import DDP_BUCKET_BYTES, plan_dp, simulate_ddp, simulate_dp
from cadence.sim.engine import Schedule, run
from cadence.sim.graph import LINK, STREAM, Resource, Task, TaskGraph
from cadence.sim.metrics import SimResult
from cadence.sim.options import SimOptions

__all__ = [
    "DDP_BUCKET_BYTES",
    "LINK",
    "STREAM",
    "Resource",
    "Schedule",
    "SimOptions",
    "SimResult",
    "Task",
    "TaskGraph",
    "plan_dp",
    "run",
    "simulate_ddp",
    "simulate_dp",
]
