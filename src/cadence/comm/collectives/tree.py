"""Tree and chain collectives over the whole vector, pipelined chunk by chunk.

broadcast: binomial tree or chain ("ring"); reduce: binomial tree or chain ("ring");
all-reduce "tree": binomial reduce to rank 0, then binomial broadcast from rank 0, with chunk c
already going down while chunk c+1 is still coming up.
"""

from __future__ import annotations

import torch

from cadence.comm.collectives._exec import run_chunked
from cadence.comm.collectives._p2p import Comm, reducer
from cadence.comm.collectives.schedules import (
    binomial_broadcast_schedule,
    binomial_reduce_schedule,
    chain_broadcast_schedule,
    chain_reduce_schedule,
    tree_all_reduce_schedule,
)


def broadcast_tree(comm: Comm, flat: torch.Tensor, src: int, algorithm: str, elems: int) -> None:
    if algorithm == "binomial":
        plan = binomial_broadcast_schedule(comm.size, src)
    else:
        plan = chain_broadcast_schedule(comm.size, src)
    run_chunked(comm, plan, flat, None, elems)


def reduce_tree(
    comm: Comm, flat: torch.Tensor, dst: int, op: str, algorithm: str, elems: int
) -> None:
    """Reduce into `flat` on `dst`; other ranks' `flat` is left untouched (unlike gloo's)."""
    if algorithm == "binomial":
        plan = binomial_reduce_schedule(comm.size, dst)
    else:
        plan = chain_reduce_schedule(comm.size, dst)
    receives = any(t.dst == comm.rank for t in plan)
    # Interior nodes accumulate partial sums; do that in scratch so only dst's tensor changes.
    work = flat.clone() if comm.rank != dst and receives else flat
    run_chunked(comm, plan, work, reducer(op), elems)


def all_reduce_tree(comm: Comm, flat: torch.Tensor, op: str, elems: int) -> None:
    run_chunked(comm, tree_all_reduce_schedule(comm.size), flat, reducer(op), elems)
