"""Wire-time bounds used to put measured times next to what the network physically allows."""

from __future__ import annotations

import math


def ring_allreduce_wire_s(num_bytes: int, world_size: int, bandwidth_bps: float) -> float:
    """Seconds a ring all-reduce of `num_bytes` needs on links of `bandwidth_bps` (bandwidth term
    only): each rank sends and receives 2 (p - 1) / p of the data."""
    if world_size <= 1 or math.isinf(bandwidth_bps):
        return 0.0
    return 2 * (world_size - 1) / world_size * num_bytes * 8 / bandwidth_bps
