"""Collectives built from torch.distributed point-to-point, with a choice of algorithm.

Each call mirrors its torch.distributed namesake (in place where torch is; synchronous;
returns None) plus `algorithm=` and `chunk_bytes=` (pipelining granularity). Ranks (`src`,
`dst`) are ranks within `group`, which equal global ranks for the default group. Reductions
run in the tensor's own dtype (fp16/bf16 stay half, as gloo's do); only the summation order
differs from torch's, so half results agree to rounding. "avg" is a sum divided once by p.

Algorithms (see `ALGORITHMS`, `plan_for`, `bytes_sent_per_rank`, and `schedules`):
  all_reduce      ring | halving_doubling (Rabenseifner, folds non-powers of two) |
                  tree (binomial reduce to rank 0 + binomial broadcast, chunk-pipelined)
  broadcast       binomial | ring (pipelined chain)      reduce   binomial | ring (chain)
  reduce_scatter  ring ((p-1)/p of the vector per rank)  all_gather   ring | bruck
  gather/scatter  linear                                 all_to_all   pairwise
"""

from __future__ import annotations

from contextlib import ExitStack

import torch

from cadence.comm.collectives import ring, tree
from cadence.comm.collectives._api import Group, check_len, setup
from cadence.comm.collectives._p2p import (
    DEFAULT_CHUNK_BYTES,
    ByteCounter,
    Comm,
    OpLike,
    chunk_elems,
    count_bytes,
    finish_avg,
    flat_view,
    normalize_op,
    split_sizes,
)
from cadence.comm.collectives.alltoall import all_to_all, gather, scatter
from cadence.comm.collectives.cost import ALGORITHMS, bytes_sent_per_rank, plan_for
from cadence.comm.collectives.halving_doubling import all_reduce_halving_doubling
from cadence.comm.collectives.schedules import Transfer

__all__ = [
    "ALGORITHMS",
    "DEFAULT_CHUNK_BYTES",
    "ByteCounter",
    "Transfer",
    "all_gather",
    "all_gather_into_tensor",
    "all_reduce",
    "all_to_all",
    "broadcast",
    "bytes_sent_per_rank",
    "count_bytes",
    "gather",
    "plan_for",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "split_sizes",
]


def broadcast(
    tensor: torch.Tensor,
    src: int,
    group: Group = None,
    algorithm: str = "binomial",
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> None:
    """Copy `src`'s tensor into every rank's `tensor`."""
    comm = setup("broadcast", algorithm, group)
    with flat_view(tensor, writeback=comm.rank != src) as flat:
        tree.broadcast_tree(comm, flat, src, algorithm, chunk_elems(flat, chunk_bytes))


def reduce(
    tensor: torch.Tensor,
    dst: int,
    op: OpLike = "sum",
    group: Group = None,
    algorithm: str = "binomial",
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> None:
    """Reduce every rank's tensor into `dst`'s `tensor`; other ranks' tensors are unchanged."""
    name = normalize_op(op)
    comm = setup("reduce", algorithm, group)
    with flat_view(tensor, writeback=comm.rank == dst) as flat:
        tree.reduce_tree(comm, flat, dst, name, algorithm, chunk_elems(flat, chunk_bytes))
        if comm.rank == dst:
            finish_avg(flat, name, comm.size)


def all_reduce(
    tensor: torch.Tensor,
    op: OpLike = "sum",
    group: Group = None,
    algorithm: str = "ring",
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> None:
    """Reduce `tensor` across ranks in place."""
    name = normalize_op(op)
    comm = setup("all_reduce", algorithm, group)
    with flat_view(tensor) as flat:
        elems = chunk_elems(flat, chunk_bytes)
        if algorithm == "ring":
            ring.all_reduce_ring(comm, flat, name, elems)
        elif algorithm == "halving_doubling":
            all_reduce_halving_doubling(comm, flat, name, elems)
        else:
            tree.all_reduce_tree(comm, flat, name, elems)
        finish_avg(flat, name, comm.size)


def reduce_scatter(
    output: torch.Tensor,
    input_list: list[torch.Tensor],
    op: OpLike = "sum",
    group: Group = None,
    algorithm: str = "ring",
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> None:
    """`output` = reduction over ranks of their `input_list[rank]`; sizes may differ by index."""
    name = normalize_op(op)
    comm = setup("reduce_scatter", algorithm, group)
    check_len("input_list", input_list, comm.size)
    if output.numel() != input_list[comm.rank].numel():
        raise ValueError("output must have as many elements as input_list[rank]")
    # The ring accumulates in place; a packed copy keeps the caller's inputs intact.
    scratch = torch.cat([t.reshape(-1) for t in input_list]) if input_list else output.new_empty(0)
    _reduce_scatter_into(comm, output, scratch, [t.numel() for t in input_list], name, chunk_bytes)


def reduce_scatter_tensor(
    output: torch.Tensor,
    input: torch.Tensor,
    op: OpLike = "sum",
    group: Group = None,
    algorithm: str = "ring",
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> None:
    """Like `torch.distributed.reduce_scatter_tensor`: `input` is p equal blocks along dim 0."""
    name = normalize_op(op)
    comm = setup("reduce_scatter", algorithm, group)
    if input.numel() != comm.size * output.numel():
        raise ValueError(f"input must have {comm.size} x output.numel() elements")
    scratch = input.reshape(-1).clone()
    _reduce_scatter_into(comm, output, scratch, [output.numel()] * comm.size, name, chunk_bytes)


def _reduce_scatter_into(
    comm: Comm,
    output: torch.Tensor,
    scratch: torch.Tensor,
    sizes: list[int],
    op: str,
    chunk_bytes: int,
) -> None:
    mine = ring.reduce_scatter_ring(comm, scratch, sizes, op, chunk_elems(scratch, chunk_bytes))
    finish_avg(mine, op, comm.size)
    output.copy_(mine.view(output.shape))


def all_gather(
    output_list: list[torch.Tensor],
    tensor: torch.Tensor,
    group: Group = None,
    algorithm: str = "ring",
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> None:
    """`output_list[r]` = rank r's `tensor`; ranks' tensors may differ in size (unlike gloo)."""
    comm = setup("all_gather", algorithm, group)
    check_len("output_list", output_list, comm.size)
    with ExitStack() as stack:
        views = [stack.enter_context(flat_view(t)) for t in output_list]
        views[comm.rank].copy_(tensor.reshape(-1))
        ring.all_gather_blocks(comm, views, algorithm, chunk_elems(tensor, chunk_bytes))


def all_gather_into_tensor(
    output: torch.Tensor,
    input: torch.Tensor,
    group: Group = None,
    algorithm: str = "ring",
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> None:
    """Like `torch.distributed.all_gather_into_tensor`: rank r's `input` is block r of `output`."""
    comm = setup("all_gather", algorithm, group)
    if output.numel() != comm.size * input.numel():
        raise ValueError(f"output must have {comm.size} x input.numel() elements")
    with flat_view(output) as flat:
        views, offsets = ring.block_views(flat, [input.numel()] * comm.size)
        views[comm.rank].copy_(input.reshape(-1))
        elems = chunk_elems(flat, chunk_bytes)
        ring.all_gather_blocks(comm, views, algorithm, elems, flat, offsets)
