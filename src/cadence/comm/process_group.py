"""Joining a process group from the environment torchrun (or cadence's own launcher) sets."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from cadence.errors import UserError
from cadence.placement import place_worker, visible_gpus


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


_TIMEOUT: timedelta | None = None  # the job's, once `init_from_env` created its group


def group_timeout() -> timedelta | None:
    """The timeout `init_from_env` gave the job's process group, for the groups cadence creates
    beside it: torch's `new_group` would otherwise wait 30 minutes on gloo whatever the job's
    timeout (None: cadence did not create the group, torch's default applies)."""
    return _TIMEOUT


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def init_from_env(
    backend: str = "auto", timeout_s: float = 300.0, device: str = "auto"
) -> DistContext:
    """Initialise torch.distributed from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT.

    Without those variables it is a world of one (no process group is created), so the same
    training code runs single-process for references and debugging. `device` (auto, cpu or
    cuda) and the host's GPUs pick the device and, with `backend` auto, the backend
    (`cadence.placement`); LOCAL_WORLD_SIZE (set by torchrun and cadence's launcher) says how
    many workers share the host. `timeout_s` bounds every wait on a peer: the rendezvous and
    each collective, here and in the groups cadence creates beside this one.
    """
    rank = _env_int("RANK", 0)
    world_size = _env_int("WORLD_SIZE", 1)
    local_rank = _env_int("LOCAL_RANK", rank)
    gpus = visible_gpus()
    if "LOCAL_WORLD_SIZE" in os.environ:
        local_workers = _env_int("LOCAL_WORLD_SIZE", 1)
    elif device == "cpu" or local_rank < gpus or gpus == 0:
        local_workers = local_rank + 1  # at least; every rank of this host decides alike
    else:  # the ranks below would take a GPU each and this one the CPU: they could not talk
        raise UserError(
            f"local rank {local_rank} but {gpus} GPU(s) and no LOCAL_WORLD_SIZE: set it "
            "(torchrun does), or use --device cpu"
        )
    placement = place_worker(device, local_rank, local_workers, gpus)
    if backend == "auto":
        backend = placement.backend
    where = torch.device(placement.device)
    if where.type == "cuda":
        torch.cuda.set_device(where)
    if world_size > 1 and not dist.is_initialized():
        init_group(backend, rank, world_size, timeout_s)
    return DistContext(rank, world_size, local_rank, backend, where)


def init_group(backend: str, rank: int, world_size: int, timeout_s: float) -> None:
    """Join the default process group (its rendezvous from MASTER_ADDR/MASTER_PORT); the
    groups `new_group` makes later get the same timeout."""
    global _TIMEOUT
    _TIMEOUT = timedelta(seconds=timeout_s)
    dist.init_process_group(
        backend=backend,
        rank=rank,
        world_size=world_size,
        timeout=_TIMEOUT,
        store=_restart_store(rank, world_size, _TIMEOUT),
    )


def new_group(ranks: list[int] | None = None) -> dist.ProcessGroup:
    """A process group of `ranks` (every rank: None); every rank of the job must call it."""
    group: dist.ProcessGroup = dist.new_group(ranks, timeout=group_timeout())
    return group


def new_group_like_default() -> dist.ProcessGroup:
    """A second group of every rank with the default group's backend: collectives issued on it
    from another thread never interleave with the caller's on the default group."""
    group: dist.ProcessGroup = dist.new_group(backend=dist.get_backend(), timeout=group_timeout())
    return group


def _restart_store(rank: int, world_size: int, timeout: timedelta) -> dist.Store | None:
    """After torchrun restarted the workers, a store whose keys are this attempt's only.

    torchrun keeps its agent's store across restarts, so the keys the previous attempt's
    workers wrote there (their gloo addresses) are still found; a new worker that reads one
    before its peer overwrote it connects to a dead process and fails. None on a first
    attempt: torch's own env:// rendezvous."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if attempt == "0" or "MASTER_ADDR" not in os.environ:
        return None
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world_size,
        is_master=not agent and rank == 0,
        timeout=timeout,
        multi_tenant=not agent,
    )
    return dist.PrefixStore(f"cadence/attempt_{attempt}", store)


def destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def leave_groups(*groups: dist.ProcessGroup | None) -> None:
    """Destroy the process groups an engine made for itself (None and repeats skipped): each
    gloo group holds its own connections to every peer and an I/O thread, which would outlive
    the engine otherwise. Every rank calls it, after the group's last collective. Nothing to
    do once the default group is gone: destroying it took every group with it."""
    if not dist.is_initialized():
        return
    for group in dict.fromkeys(g for g in groups if g is not None):
        dist.destroy_process_group(group)


def own_address() -> str:
    """The address peers reach this host at: the interface that routes to MASTER_ADDR (the
    parameter servers and torchft's lighthouse and stores advertise it)."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    if master in ("127.0.0.1", "localhost"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((master, 9))  # UDP connect sends nothing; it only picks the route
        return str(probe.getsockname()[0])
