"""Which device and backend a worker uses, decided from what the host has.

NCCL needs a GPU of its own per rank, so a host with fewer GPUs than workers cannot run every
worker on a GPU over NCCL. `auto` then trains on the CPU over gloo (what runs everywhere);
an explicit `cuda` lets the workers share the GPUs round-robin and talk over gloo, which moves
CUDA tensors through host memory: slower than NCCL, but every rank computes on a GPU (useful
to try a multi-rank job on a one-GPU workstation).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cadence.errors import UserError

DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class Placement:
    """Where one worker computes and how it talks."""

    device: str
    """"cpu" or "cuda:N"."""
    backend: str
    """torch.distributed backend: "gloo" or "nccl"."""
    note: str | None = None
    """One line for the user where the choice is not the obvious one (None otherwise)."""


def check_device(device: str) -> None:
    """Raise a one-line UserError unless `device` is one of `DEVICES`."""
    if device not in DEVICES:
        raise UserError(f"unknown device {device!r}: use one of {', '.join(DEVICES)}")


def place_worker(device: str, local_rank: int, local_workers: int, gpus: int) -> Placement:
    """The device and backend of local rank `local_rank` of `local_workers` on a host with
    `gpus` visible CUDA GPUs, for `device` auto, cpu or cuda."""
    check_device(device)
    if local_workers < 1 or not 0 <= local_rank < local_workers or gpus < 0:
        raise ValueError(f"bad placement input: rank {local_rank} of {local_workers}, {gpus} GPUs")
    if device == "cpu" or (device == "auto" and gpus == 0):
        return Placement("cpu", "gloo")
    if gpus >= local_workers:
        return Placement(f"cuda:{local_rank}", "nccl")
    if device == "auto":
        return Placement(
            "cpu",
            "gloo",
            f"{local_workers} workers on this host but {gpus} GPU(s): training on the CPU "
            f"(--workers {gpus} gives each worker a GPU; --device cuda shares them over gloo)",
        )
    if gpus == 0:
        raise UserError("--device cuda: no CUDA GPU is visible here; use --device cpu or auto")
    return Placement(
        f"cuda:{local_rank % gpus}",
        "gloo",
        f"{local_workers} workers share {gpus} GPU(s) over gloo (NCCL needs a GPU per worker)",
    )


SHARED_GPU_STRATEGIES = ("ddp", "cadence-dp", "ps")
"""Strategies that run with GPUs shared over gloo: gloo all-reduces and broadcasts CUDA
tensors, and the parameter server sends from host memory; gloo's point-to-point sends,
all-gathers and reduce-scatters (pipeline, ZeRO) take host memory only."""


def check_strategy(strategy: str, device: str, backend: str) -> None:
    """Raise a one-line UserError where `strategy` cannot run on `device` over `backend`."""
    shared = device.startswith("cuda") and backend == "gloo"
    if shared and strategy not in SHARED_GPU_STRATEGIES:
        raise UserError(
            f"--strategy {strategy} on GPUs needs a GPU per worker (NCCL), and this host "
            "has fewer: use --device cpu, or as many workers as GPUs"
        )


_GPU_DRIVER_PATHS = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/kfd")
"""Present wherever a CUDA (NVIDIA) or ROCm (AMD) driver is loaded."""


def visible_gpus() -> int:
    """CUDA GPUs this process can use (0 without CUDA). On a machine without a GPU driver the
    answer is 0 without importing torch, which a launcher or `--help` need not wait for."""
    if not any(os.path.exists(path) for path in _GPU_DRIVER_PATHS):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
