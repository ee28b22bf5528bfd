"""Which algorithms exist, the plan each one runs, and the exact bytes each rank sends.

`nbytes` is always the size of the whole logical vector:
all_reduce / broadcast / reduce: the tensor; reduce_scatter: one rank's full input (p blocks);
all_gather: the full output (p blocks); gather / scatter: the p-block list at the root;
all_to_all: one rank's full input (p blocks). Multi-block vectors split by elements into
near-equal blocks (`split_sizes`), as the executors do, so uneven sizes are exact too.

Closed forms for n bytes divisible by the block count (q = 2^floor(log2 p), e = p - q,
L = ceil(log2 p)):
  all_reduce ring              every rank 2(p-1)/p * n
  all_reduce halving_doubling  rank 2i (i < e): n;  rank 2i+1 (i < e): n + 2(q-1)/q * n;
                               rank >= 2e: 2(q-1)/q * n
  all_reduce tree              rank 0: L*n; rank r > 0: n * (1 + children(r)) where
                               children(r) = #k with 2^k > r, r + 2^k < p, r < 2^k
  broadcast binomial           children(relative rank) * n (root: L*n)
  broadcast ring (chain)       n for every rank but the last of the chain (root - 1)
  reduce binomial | ring       n for every rank but the root, which sends 0
  reduce_scatter ring, all_gather ring | bruck, all_to_all pairwise   (p-1)/p * n every rank
  gather linear                n/p for non-roots, 0 at the root
  scatter linear               (p-1)/p * n at the root, 0 elsewhere
Chunking never changes these totals, only the number of messages.
"""

from __future__ import annotations

from cadence.comm.collectives._p2p import split_sizes
from cadence.comm.collectives.schedules import (
    Transfer,
    binomial_broadcast_schedule,
    binomial_reduce_schedule,
    bruck_all_gather_schedule,
    chain_broadcast_schedule,
    chain_reduce_schedule,
    halving_doubling_all_reduce_schedule,
    largest_power_of_two,
    linear_gather_schedule,
    linear_scatter_schedule,
    pairwise_all_to_all_schedule,
    ring_all_gather_schedule,
    ring_all_reduce_schedule,
    ring_reduce_scatter_schedule,
    tree_all_reduce_schedule,
)

ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "halving_doubling", "tree"),
    "broadcast": ("binomial", "ring"),
    "reduce": ("binomial", "ring"),
    "reduce_scatter": ("ring",),
    "all_gather": ("ring", "bruck"),
    "gather": ("linear",),
    "scatter": ("linear",),
    "all_to_all": ("pairwise",),
}


def check_algorithm(collective: str, algorithm: str) -> None:
    """ValueError naming the accepted values unless `algorithm` exists for `collective`."""
    if collective not in ALGORITHMS:
        raise ValueError(f"unknown collective {collective!r}; accepted: {', '.join(ALGORITHMS)}")
    accepted = ALGORITHMS[collective]
    if algorithm not in accepted:
        raise ValueError(
            f"unknown algorithm {algorithm!r} for {collective}; accepted: {', '.join(accepted)}"
        )


def plan_for(
    collective: str, algorithm: str, world_size: int, root: int = 0
) -> tuple[list[Transfer], int]:
    """The plan a collective runs and how many blocks its vector is split into."""
    check_algorithm(collective, algorithm)
    p = world_size
    key = (collective, algorithm)
    if key == ("all_reduce", "ring"):
        return ring_all_reduce_schedule(p), p
    if key == ("all_reduce", "halving_doubling"):
        return halving_doubling_all_reduce_schedule(p), largest_power_of_two(p)
    if key == ("all_reduce", "tree"):
        return tree_all_reduce_schedule(p), 1
    if key == ("broadcast", "binomial"):
        return binomial_broadcast_schedule(p, root), 1
    if key == ("broadcast", "ring"):
        return chain_broadcast_schedule(p, root), 1
    if key == ("reduce", "binomial"):
        return binomial_reduce_schedule(p, root), 1
    if key == ("reduce", "ring"):
        return chain_reduce_schedule(p, root), 1
    if key == ("reduce_scatter", "ring"):
        return ring_reduce_scatter_schedule(p), p
    if key == ("all_gather", "ring"):
        return ring_all_gather_schedule(p), p
    if key == ("all_gather", "bruck"):
        return bruck_all_gather_schedule(p), p
    if key == ("gather", "linear"):
        return linear_gather_schedule(p, root), p
    if key == ("scatter", "linear"):
        return linear_scatter_schedule(p, root), p
    return pairwise_all_to_all_schedule(p), p


def bytes_sent_per_rank(
    collective: str,
    algorithm: str,
    nbytes: int,
    world_size: int,
    *,
    itemsize: int = 1,
    root: int = 0,
) -> list[int]:
    """Exact payload bytes each rank sends (index = rank) for a vector of `nbytes` bytes made
    of `itemsize`-byte elements (blocks split by element, like the executors)."""
    if nbytes < 0 or itemsize < 1 or nbytes % itemsize:
        raise ValueError(f"nbytes {nbytes} is not a whole number of {itemsize}-byte elements")
    plan, nblocks = plan_for(collective, algorithm, world_size, root)
    sizes = split_sizes(nbytes // itemsize, nblocks)
    sent = [0] * world_size
    for t in plan:
        sent[t.src] += sum(sizes[b] for b in t.blocks) * itemsize
    return sent
