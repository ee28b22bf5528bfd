"""Communication: process-group setup and the collectives cadence issues.

Only this package (and executors through it) calls torch.distributed collectives directly.
Its names load on first use: the cost model (`cadence.comm.cost`) needs no torch, and the
command line, which reads it to parse and check its arguments, should not wait for torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cadence._lazy import lazy_names

if TYPE_CHECKING:
    from cadence.comm.ops import all_reduce_sum, barrier, broadcast_object, wire_device
    from cadence.comm.process_group import DistContext, destroy, init_from_env

_HOMES = {
    "all_reduce_sum": "cadence.comm.ops",
    "barrier": "cadence.comm.ops",
    "broadcast_object": "cadence.comm.ops",
    "wire_device": "cadence.comm.ops",
    "DistContext": "cadence.comm.process_group",
    "destroy": "cadence.comm.process_group",
    "init_from_env": "cadence.comm.process_group",
}

__all__ = [
    "DistContext",
    "all_reduce_sum",
    "barrier",
    "broadcast_object",
    "destroy",
    "init_from_env",
    "wire_device",
]

__getattr__ = lazy_names(__name__, _HOMES)
