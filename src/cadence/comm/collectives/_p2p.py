"""Point-to-point plumbing shared by every algorithm: peers, counted sends, chunking, reduce ops.

All sends go through `isend` here so `count_bytes` sees exactly what an algorithm puts on the
wire; tests compare that count with `bytes_sent_per_rank`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

# 1 MiB pieces: big enough to amortise per-message latency, small enough that reducing one
# piece overlaps the transfer of the next.
DEFAULT_CHUNK_BYTES = 1 << 20
_TAG_MOD = 1 << 30  # keep tags inside a signed 32-bit int for every backend

ReduceFn = Callable[[torch.Tensor, torch.Tensor], None]
OpLike = str | dist.ReduceOp

OPS = ("sum", "avg", "max", "min", "product")


@dataclass
class ByteCounter:
    """Bytes this process handed to `isend` while the counter was active."""

    bytes_sent: int = 0
    messages: int = 0


# Per thread: two threads running collectives at once (ZeRO's two communication lanes) each
# count only their own sends.
_local = threading.local()


def _active_counters() -> list[ByteCounter]:
    if not hasattr(_local, "counters"):
        _local.counters = []
    counters: list[ByteCounter] = _local.counters
    return counters


@contextmanager
def count_bytes() -> Iterator[ByteCounter]:
    """Count the payload bytes every collective this thread runs sends inside the block."""
    counter = ByteCounter()
    _active_counters().append(counter)
    try:
        yield counter
    finally:
        _active_counters().remove(counter)


@dataclass(frozen=True)
class Comm:
    """The caller's view of a group: its rank, size, and how to address a peer."""

    group: dist.ProcessGroup | None
    rank: int
    size: int

    @classmethod
    def of(cls, group: dist.ProcessGroup | None) -> Comm:
        return cls(group, dist.get_rank(group), dist.get_world_size(group))

    def global_rank(self, peer: int) -> int:
        # torch's p2p takes global ranks; translate only when a sub-group is in play.
        if self.group is None or self.group is dist.group.WORLD:
            return peer
        return dist.get_global_rank(self.group, peer)

    def isend(self, tensor: torch.Tensor, peer: int, tag: int) -> dist.Work:
        nbytes = tensor.numel() * tensor.element_size()
        for counter in _active_counters():
            counter.bytes_sent += nbytes
            counter.messages += 1
        work = dist.isend(tensor, self.global_rank(peer), group=self.group, tag=tag % _TAG_MOD)
        assert work is not None
        return work

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int) -> dist.Work:
        work = dist.irecv(tensor, self.global_rank(peer), group=self.group, tag=tag % _TAG_MOD)
        assert work is not None
        return work


def normalize_op(op: OpLike) -> str:
    """Map a name or a `dist.ReduceOp` to one of OPS; ValueError otherwise."""
    if isinstance(op, dist.ReduceOp):
        names = {
            dist.ReduceOp.SUM: "sum",
            dist.ReduceOp.AVG: "avg",
            dist.ReduceOp.MAX: "max",
            dist.ReduceOp.MIN: "min",
            dist.ReduceOp.PRODUCT: "product",
        }
        for key, name in names.items():
            if op == key:
                return name
        raise ValueError(f"unsupported reduce op {op!r}; accepted: {', '.join(OPS)}")
    name = str(op).lower()
    if name not in OPS:
        raise ValueError(f"unknown reduce op {op!r}; accepted: {', '.join(OPS)}")
    return name


def _sum(acc: torch.Tensor, inc: torch.Tensor) -> None:
    acc.add_(inc)


def _product(acc: torch.Tensor, inc: torch.Tensor) -> None:
    acc.mul_(inc)


def _max(acc: torch.Tensor, inc: torch.Tensor) -> None:
    torch.maximum(acc, inc, out=acc)


def _min(acc: torch.Tensor, inc: torch.Tensor) -> None:
    torch.minimum(acc, inc, out=acc)


def reducer(op: str) -> ReduceFn:
    """In-place `acc = acc (op) incoming`, in the tensors' own dtype (as gloo does for halves).

    "avg" reduces as a sum; the caller divides once at the end (`finish_avg`).
    """
    return {"sum": _sum, "avg": _sum, "product": _product, "max": _max, "min": _min}[op]


def finish_avg(tensor: torch.Tensor, op: str, world_size: int) -> None:
    if op != "avg":
        return
    if not (tensor.is_floating_point() or tensor.is_complex()):
        raise ValueError(f"op 'avg' needs a floating-point tensor, got {tensor.dtype}")
    tensor.div_(world_size)


def split_sizes(numel: int, parts: int) -> list[int]:
    """Split `numel` into `parts` contiguous blocks, the first `numel % parts` one larger."""
    base, extra = divmod(numel, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def offsets_of(sizes: list[int]) -> list[int]:
    out = [0]
    for s in sizes:
        out.append(out[-1] + s)
    return out


def chunk_elems(tensor: torch.Tensor, chunk_bytes: int) -> int:
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    return max(1, chunk_bytes // max(1, tensor.element_size()))


def pieces(region: torch.Tensor, elems: int) -> list[torch.Tensor]:
    """Contiguous slices of a 1-D `region`, at most `elems` each; none for an empty region."""
    return [region[i : i + elems] for i in range(0, region.numel(), elems)]


@contextmanager
def flat_view(tensor: torch.Tensor, writeback: bool = True) -> Iterator[torch.Tensor]:
    """A contiguous 1-D alias of `tensor`; a staged copy (written back) when it is strided."""
    if tensor.is_contiguous():
        yield tensor.view(-1)
        return
    staged = tensor.contiguous().view(-1)
    yield staged
    if writeback:
        tensor.copy_(staged.view(tensor.shape))
