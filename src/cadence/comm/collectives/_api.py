"""Argument checks shared by the public wrappers."""

from __future__ import annotations

import torch
import torch.distributed as dist

from cadence.comm.collectives._p2p import Comm
from cadence.comm.collectives.cost import check_algorithm

Group = dist.ProcessGroup | None


def setup(collective: str, algorithm: str, group: Group) -> Comm:
    """Validate `algorithm` (before touching the process group), then resolve the group."""
    check_algorithm(collective, algorithm)
    return Comm.of(group)


def check_len(name: str, tensors: list[torch.Tensor], p: int) -> None:
    if len(tensors) != p:
        raise ValueError(f"{name} needs {p} tensors (one per rank), got {len(tensors)}")
