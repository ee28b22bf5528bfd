"""Joining a process group from the environment torchrun (or cadence's own launcher) sets."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    """Where this process stands in the job."""

    rank: int
    """Global rank."""
    world_size: int
    """Number of ranks."""
    local_rank: int
    """Rank within this machine; picks the CUDA device."""
    backend: str
    """torch.distributed backend in use (gloo on CPU, nccl on CUDA)."""
    device: torch.device
    """Device this rank computes on."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def init_from_env(backend: str = "auto", timeout_s: float = 300.0) -> DistContext:
    """Initialise torch.distributed from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT.

    Without those variables it is a world of one (no process group is created), so the same
    training code runs single-process for references and debugging.
    """
    rank = _env_int("RANK", 0)
    world_size = _env_int("WORLD_SIZE", 1)
    local_rank = _env_int("LOCAL_RANK", rank)
    use_cuda = torch.cuda.is_available()
    if backend == "auto":
        backend = "nccl" if use_cuda else "gloo"
    device = torch.device(f"cuda:{local_rank}") if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(
            backend=backend,
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
        )
    return DistContext(rank, world_size, local_rank, backend, device)


def destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
