"""Two ways to run a plan (see `schedules`) on this rank.

`run_steps`: step-synchronous, for plans that move different blocks each step (ring,
halving-doubling, Bruck). Within a step all receives and sends are posted at once, each message
split into pieces; a piece is reduced as soon as it lands while later pieces are still in
flight.

`run_chunked`: for tree/chain plans over one block. The vector is cut into chunks and the whole
plan runs chunk by chunk with non-blocking sends, so chunk c travels down the tree while
chunk c+1 is being received and reduced: the classic pipelined tree.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from cadence.comm.collectives._p2p import Comm, ReduceFn, pieces
from cadence.comm.collectives.schedules import Transfer

_STEP_TAG = 1 << 20  # message index within a step lives below this


def _regions(
    blocks: tuple[int, ...],
    views: list[torch.Tensor],
    flat: torch.Tensor | None,
    offsets: list[int] | None,
) -> list[torch.Tensor]:
    """The contiguous memory a transfer covers: consecutive blocks merge into one slice of
    `flat` when the blocks live in one buffer, otherwise one region per block."""
    if flat is None or offsets is None:
        return [views[b] for b in blocks]
    runs: list[list[int]] = []
    for b in blocks:
        if runs and b == runs[-1][-1] + 1:
            runs[-1].append(b)
        else:
            runs.append([b])
    return [flat[offsets[run[0]] : offsets[run[-1] + 1]] for run in runs]


def _messages(
    t: Transfer,
    views: list[torch.Tensor],
    flat: torch.Tensor | None,
    offsets: list[int] | None,
    elems: int,
) -> list[torch.Tensor]:
    # Both ends derive the identical list from the same plan and sizes, so the i-th message
    # (and its tag) match without any size exchange; empty regions send nothing.
    return [p for region in _regions(t.blocks, views, flat, offsets) for p in pieces(region, elems)]


def run_steps(
    comm: Comm,
    plan: list[Transfer],
    views: list[torch.Tensor],
    reduce_fn: ReduceFn | None,
    elems: int,
    flat: torch.Tensor | None = None,
    offsets: list[int] | None = None,
) -> None:
    """Execute this rank's part of `plan`; block b is `views[b]` (or a slice of `flat`)."""
    me = comm.rank
    mine = [t for t in plan if me in (t.src, t.dst) and t.src != t.dst]
    for step in sorted({t.step for t in mine}):
        recvs: list[tuple[dist.Work, torch.Tensor, torch.Tensor | None]] = []
        sends: list[dist.Work] = []
        # Post receives before sends so the peer's data never waits on a missing buffer.
        for t in (t for t in mine if t.step == step and t.dst == me):
            for i, region in enumerate(_messages(t, views, flat, offsets, elems)):
                tag = step * _STEP_TAG + i
                if t.reduce:
                    assert reduce_fn is not None
                    tmp = torch.empty_like(region)
                    recvs.append((comm.irecv(tmp, t.src, tag), region, tmp))
                else:
                    recvs.append((comm.irecv(region, t.src, tag), region, None))
        for t in (t for t in mine if t.step == step and t.src == me):
            for i, region in enumerate(_messages(t, views, flat, offsets, elems)):
                sends.append(comm.isend(region, t.dst, step * _STEP_TAG + i))
        for work, region, incoming in recvs:
            work.wait()
            if incoming is not None:
                assert reduce_fn is not None
                reduce_fn(region, incoming)
        # Later steps may overwrite what we just sent; finish sending first.
        for work in sends:
            work.wait()


def run_chunked(
    comm: Comm,
    plan: list[Transfer],
    flat: torch.Tensor,
    reduce_fn: ReduceFn | None,
    elems: int,
) -> None:
    """Execute a one-block plan over `flat`, chunk by chunk, with sends left in flight."""
    me = comm.rank
    mine = sorted(
        (t for t in plan if me in (t.src, t.dst) and t.src != t.dst), key=lambda t: t.step
    )
    in_flight: list[dist.Work] = []
    for c, chunk in enumerate(pieces(flat, elems)):
        chunk_sends: list[dist.Work] = []
        for t in mine:
            if t.dst == me and t.reduce:
                assert reduce_fn is not None
                tmp = torch.empty_like(chunk)
                comm.irecv(tmp, t.src, c).wait()
                reduce_fn(chunk, tmp)
            elif t.dst == me:
                # Overwriting a chunk we may still be sending (tree all-reduce: up, then down).
                for work in chunk_sends:
                    work.wait()
                chunk_sends.clear()
                comm.irecv(chunk, t.src, c).wait()
            else:
                chunk_sends.append(comm.isend(chunk, t.dst, c))
        in_flight += chunk_sends
    for work in in_flight:
        work.wait()
