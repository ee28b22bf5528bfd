"""Communication: process-group setup and the collectives cadence issues.

Only this package (and executors through it) calls torch.distributed collectives directly.
"""

from cadence.comm.ops import all_reduce_sum, barrier, broadcast_object
from cadence.comm.process_group import DistContext, destroy, init_from_env

__all__ = [
    "DistContext",
    "all_reduce_sum",
    "barrier",
    "broadcast_object",
    "destroy",
    "init_from_env",
]
