"""Small collective helpers that degrade to no-ops in a world of one."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def wire_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """Where a tensor sent over `group` (default: the default group) must live: NCCL takes
    only tensors on this rank's GPU, gloo takes host memory (and CUDA tensors, via a copy).
    Control messages (timings, flags, probes) are made here so they travel over either."""
    if dist.is_available() and dist.is_initialized() and dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` in place across ranks and return it."""
    if _active():
        on_wire = tensor.to(wire_device())
        dist.all_reduce(on_wire, op=dist.ReduceOp.SUM)
        if on_wire is not tensor:
            tensor.copy_(on_wire)
    return tensor


def barrier() -> None:
    if _active():
        dist.barrier()


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Send a picklable object from `src` to every rank."""
    if not _active():
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=src)
    return holder[0]
