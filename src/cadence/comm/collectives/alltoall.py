"""Personalised collectives: all-to-all (pairwise exchange), gather and scatter (linear).

These move distinct data to each peer, so there is nothing to reduce or forward; the only
choices are the order of exchanges and chunking. The public `gather`, `scatter` and
`all_to_all` live here and are re-exported by the package.
"""

from __future__ import annotations

from contextlib import ExitStack

import torch
import torch.distributed as dist

from cadence.comm.collectives._api import Group, check_len, setup
from cadence.comm.collectives._p2p import DEFAULT_CHUNK_BYTES, Comm, chunk_elems, flat_view, pieces

Pair = tuple[torch.Tensor, int]  # (contiguous 1-D buffer, peer)


def exchange(comm: Comm, sends: list[Pair], recvs: list[Pair], elems: int, tag: int = 0) -> None:
    """Post every receive, then every send (each in pieces), and wait for all of them."""
    works: list[dist.Work] = []
    for buf, peer in recvs:
        works += [comm.irecv(p, peer, tag + i) for i, p in enumerate(pieces(buf, elems))]
    for buf, peer in sends:
        works += [comm.isend(p, peer, tag + i) for i, p in enumerate(pieces(buf, elems))]
    for work in works:
        work.wait()


def all_to_all_pairwise(
    comm: Comm, outputs: list[torch.Tensor], inputs: list[torch.Tensor], elems: int
) -> None:
    """Step s: send to rank r+s, receive from rank r-s; one partner pair per step keeps the
    number of concurrent flows per rank at two instead of 2(p-1)."""
    r, p = comm.rank, comm.size
    outputs[r].copy_(inputs[r])
    for s in range(1, p):
        to, frm = (r + s) % p, (r - s) % p
        exchange(comm, [(inputs[to], to)], [(outputs[frm], frm)], elems, tag=s << 20)


def gather_linear(
    comm: Comm, flat: torch.Tensor, outputs: list[torch.Tensor] | None, dst: int, elems: int
) -> None:
    if comm.rank != dst:
        exchange(comm, [(flat, dst)], [], elems)
        return
    assert outputs is not None
    outputs[dst].copy_(flat)
    exchange(comm, [], [(outputs[r], r) for r in range(comm.size) if r != dst], elems)


def scatter_linear(
    comm: Comm, flat: torch.Tensor, inputs: list[torch.Tensor] | None, src: int, elems: int
) -> None:
    if comm.rank != src:
        exchange(comm, [], [(flat, src)], elems)
        return
    assert inputs is not None
    flat.copy_(inputs[src])
    exchange(comm, [(inputs[r], r) for r in range(comm.size) if r != src], [], elems)


def gather(
    tensor: torch.Tensor,
    gather_list: list[torch.Tensor] | None = None,
    dst: int = 0,
    group: Group = None,
    algorithm: str = "linear",
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> None:
    """`gather_list[r]` on `dst` = rank r's `tensor`."""
    comm = setup("gather", algorithm, group)
    elems = chunk_elems(tensor, chunk_bytes)
    src = tensor.contiguous().view(-1)
    if comm.rank != dst:
        gather_linear(comm, src, None, dst, elems)
        return
    if gather_list is None:
        raise ValueError("gather_list is required on the destination rank")
    check_len("gather_list", gather_list, comm.size)
    with ExitStack() as stack:
        views = [stack.enter_context(flat_view(t)) for t in gather_list]
        gather_linear(comm, src, views, dst, elems)


def scatter(
    tensor: torch.Tensor,
    scatter_list: list[torch.Tensor] | None = None,
    src: int = 0,
    group: Group = None,
    algorithm: str = "linear",
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> None:
    """Rank r's `tensor` = `scatter_list[r]` on `src`."""
    comm = setup("scatter", algorithm, group)
    inputs = None
    if comm.rank == src:
        if scatter_list is None:
            raise ValueError("scatter_list is required on the source rank")
        check_len("scatter_list", scatter_list, comm.size)
        inputs = [t.contiguous().view(-1) for t in scatter_list]
    with flat_view(tensor) as flat:
        scatter_linear(comm, flat, inputs, src, chunk_elems(flat, chunk_bytes))


def all_to_all(
    output_list: list[torch.Tensor],
    input_list: list[torch.Tensor],
    group: Group = None,
    algorithm: str = "pairwise",
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> None:
    """`output_list[j]` on rank r = rank j's `input_list[r]`; sizes may differ per pair."""
    comm = setup("all_to_all", algorithm, group)
    check_len("input_list", input_list, comm.size)
    check_len("output_list", output_list, comm.size)
    inputs = [t.contiguous().view(-1) for t in input_list]
    with ExitStack() as stack:
        views = [stack.enter_context(flat_view(t)) for t in output_list]
        all_to_all_pairwise(comm, views, inputs, chunk_elems(inputs[0], chunk_bytes))
