"""torch.distributed's collectives, as the rest of cadence calls them: small plain functions.

Every collective cadence issues outside `cadence.comm` goes through this module (or
`cadence.comm.collectives`, cadence's own algorithms), so one place shows what travels and
`tests/unit/test_comm_only.py` can hold the line. Each function is torch's namesake with the
reduction named by a string; only `all_reduce_sum`, `barrier` and `broadcast_object` degrade to
no-ops in a world of one (no process group, or one rank).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

Group = dist.ProcessGroup | None

_OPS = {
    "sum": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "product": dist.ReduceOp.PRODUCT,
}

# torch 2.13 deprecates reduce_scatter_tensor and all_gather_into_tensor in favour of the
# *_single names, and warns on every call of the old ones.
_reduce_scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
_all_gather_into = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)


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
    """Sum `tensor` in place across ranks and return it (a no-op in a world of one)."""
    if _active():
        on_wire = tensor.to(wire_device())
        dist.all_reduce(on_wire, op=dist.ReduceOp.SUM)
        if on_wire is not tensor:
            tensor.copy_(on_wire)
    return tensor


def barrier(group: Group = None) -> None:
    """Wait for every rank of `group` (a no-op in a world of one)."""
    if _active():
        dist.barrier(group=group)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Send a picklable object from `src` to every rank (unchanged in a world of one)."""
    if not _active():
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=src)
    return holder[0]


def all_reduce(tensor: torch.Tensor, op: str = "sum", group: Group = None) -> None:
    """Reduce `tensor` in place over `group` with `op` (sum, max, min or product)."""
    dist.all_reduce(tensor, op=_OPS[op], group=group)


def all_reduce_async(tensor: torch.Tensor, op: str = "sum", group: Group = None) -> dist.Work:
    """Start `all_reduce`; the work handle to wait on."""
    work: dist.Work = dist.all_reduce(tensor, op=_OPS[op], group=group, async_op=True)
    return work


def broadcast(tensor: torch.Tensor, src: int, group: Group = None) -> None:
    """`src`'s (global rank) tensor into every rank's `tensor`."""
    dist.broadcast(tensor, src=src, group=group)


_COALESCE_BYTES = 64 * 1024 * 1024
"""`broadcast_tensors` sends tensors in flat buffers of up to this many bytes."""


def broadcast_tensors(tensors: Sequence[torch.Tensor], src: int = 0, group: Group = None) -> None:
    """`src`'s tensors into every rank's (every rank passes them in the same order).

    Runs of tensors of one dtype and device travel flattened, up to `_COALESCE_BYTES` a
    message: a model's hundreds of small tensors cost a few messages' latency, not hundreds."""
    run: list[torch.Tensor] = []
    size = 0
    for tensor in tensors:
        same = not run or (tensor.dtype, tensor.device) == (run[0].dtype, run[0].device)
        if run and (not same or size + _nbytes(tensor) > _COALESCE_BYTES):
            _broadcast_flat(run, src, group)
            run, size = [], 0
        run.append(tensor)
        size += _nbytes(tensor)
    if run:
        _broadcast_flat(run, src, group)


@torch.no_grad()
def broadcast_by_dtype(
    tensors: Sequence[torch.Tensor], send: Callable[[torch.Tensor], None]
) -> None:
    """Rank 0's values of `tensors` into every rank's (every rank passes them in the same
    order) in one flat message per dtype and device, as DDP sends a model's buffers: `send`
    broadcasts one flat tensor in place from rank 0 (over the caller's group and transport)."""
    groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault((tensor.dtype, tensor.device), []).append(tensor)
    for same in groups.values():
        flat = torch.cat([t.reshape(-1) for t in same])
        send(flat)
        for tensor, value in zip(same, flat.split([t.numel() for t in same]), strict=True):
            tensor.copy_(value.view_as(tensor))


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _broadcast_flat(tensors: list[torch.Tensor], src: int, group: Group) -> None:
    if len(tensors) == 1:
        dist.broadcast(tensors[0], src=src, group=group)
        return
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    dist.broadcast(flat, src=src, group=group)
    offset = 0
    with torch.no_grad():
        for tensor in tensors:
            n = tensor.numel()
            tensor.copy_(flat[offset : offset + n].view_as(tensor))
            offset += n


def broadcast_object_list(objects: list[Any], src: int = 0, group: Group = None) -> None:
    """`src`'s picklable objects into every rank's list, in place."""
    dist.broadcast_object_list(objects, src=src, group=group)


def all_gather(parts: list[torch.Tensor], tensor: torch.Tensor, group: Group = None) -> None:
    """Every rank's `tensor` into `parts` (one per rank of `group`)."""
    dist.all_gather(parts, tensor, group=group)


def all_gather_object(obj: Any, group: Group = None) -> list[Any]:
    """Every rank's picklable `obj`, in rank order."""
    out: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, obj, group=group)
    return out


def all_gather_into_tensor(out: torch.Tensor, tensor: torch.Tensor, group: Group = None) -> None:
    """Every rank's `tensor`, concatenated in rank order into `out`."""
    _all_gather_into(out, tensor, group=group)


def all_gather_into_tensor_async(
    out: torch.Tensor, tensor: torch.Tensor, group: Group = None
) -> dist.Work:
    """Start `all_gather_into_tensor`; the work handle to wait on."""
    work: dist.Work = _all_gather_into(out, tensor, group=group, async_op=True)
    return work


def reduce_scatter_tensor(out: torch.Tensor, tensor: torch.Tensor, group: Group = None) -> None:
    """The sum of every rank's `tensor`, this rank's 1/p of it into `out`."""
    _reduce_scatter(out, tensor, group=group)


def all_to_all_single(out: torch.Tensor, tensor: torch.Tensor, group: Group = None) -> None:
    """Piece j of this rank's `tensor` to rank j; rank j's piece i into piece j of `out`."""
    dist.all_to_all_single(out, tensor, group=group)


def send(tensor: torch.Tensor, dst: int, tag: int = 0, group: Group = None) -> None:
    dist.send(tensor, dst, group=group, tag=tag)


def recv(tensor: torch.Tensor, src: int, tag: int = 0, group: Group = None) -> None:
    dist.recv(tensor, src, group=group, tag=tag)


def isend(tensor: torch.Tensor, dst: int, tag: int = 0, group: Group = None) -> dist.Work | None:
    """Start sending `tensor` to `dst`; the handle to wait on (None outside `group`)."""
    return dist.isend(tensor, dst, group=group, tag=tag)


def irecv(tensor: torch.Tensor, src: int, tag: int = 0, group: Group = None) -> dist.Work | None:
    """Start receiving into `tensor` from `src`; the handle to wait on (None outside `group`)."""
    return dist.irecv(tensor, src, group=group, tag=tag)
