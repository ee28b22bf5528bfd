"""Pure communication plans: who sends which blocks to whom at which step.

A plan is a list of `Transfer`s. Blocks are indices into the vector's split (ring and Bruck: one
block per rank; halving-doubling: one per rank of the largest power of two <= world size; trees:
a single block, the whole vector). Executors run these plans, `bytes_sent_per_rank` sums them,
and the simulator can replay them without touching torch.distributed.
"""

from __future__ import annotations

from typing import NamedTuple


class Transfer(NamedTuple):
    """At `step`, `src` sends its copy of `blocks` to `dst`, which reduces into or overwrites."""

    step: int
    src: int
    dst: int
    blocks: tuple[int, ...]
    reduce: bool


def _check(world_size: int, root: int = 0) -> None:
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= root < world_size:
        raise ValueError(f"root {root} outside 0..{world_size - 1}")


def ring_reduce_scatter_schedule(world_size: int, first_step: int = 0) -> list[Transfer]:
    """p-1 steps; at step s rank r reduces block (r-s-1) into rank r+1, so rank r ends owning
    the fully reduced block r."""
    _check(world_size)
    p = world_size
    return [
        Transfer(first_step + s, r, (r + 1) % p, ((r - s - 1) % p,), True)
        for s in range(p - 1)
        for r in range(p)
    ]


def ring_all_gather_schedule(world_size: int, first_step: int = 0) -> list[Transfer]:
    """p-1 steps; at step s rank r forwards block (r-s) (its own at s=0) to rank r+1."""
    _check(world_size)
    p = world_size
    return [
        Transfer(first_step + s, r, (r + 1) % p, ((r - s) % p,), False)
        for s in range(p - 1)
        for r in range(p)
    ]


def ring_all_reduce_schedule(world_size: int) -> list[Transfer]:
    """Reduce-scatter then all-gather around the ring: 2(p-1) steps over p blocks."""
    return ring_reduce_scatter_schedule(world_size) + ring_all_gather_schedule(
        world_size, first_step=max(0, world_size - 1)
    )


def largest_power_of_two(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def halving_doubling_all_reduce_schedule(world_size: int) -> list[Transfer]:
    """Rabenseifner's all-reduce over q = largest power of two <= p blocks.

    Non-powers of two fold: with e = p - q extra ranks, rank 2i (i < e) first sends its whole
    vector to rank 2i+1 and sits out; the q survivors do recursive-halving reduce-scatter
    (distance q/2, q/4, ..., 1) and recursive-doubling all-gather (1, 2, ..., q/2); finally rank
    2i+1 sends the result back to rank 2i.
    """
    _check(world_size)
    p = world_size
    q = largest_power_of_two(p)
    extra = p - q
    everything = tuple(range(q))

    def real(v: int) -> int:  # virtual rank among the q survivors -> real rank
        return 2 * v + 1 if v < extra else v + extra

    plan: list[Transfer] = []
    step = 0
    if extra:
        plan += [Transfer(0, 2 * i, 2 * i + 1, everything, True) for i in range(extra)]
        step = 1
    owned = {v: (0, q) for v in range(q)}
    dist = q // 2
    while dist >= 1:  # recursive halving: each pair splits its range, sends the half it drops
        for v in range(q):
            lo, hi = owned[v]
            mid = (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if v & dist == 0 else ((mid, hi), (lo, mid))
            plan.append(Transfer(step, real(v), real(v ^ dist), tuple(range(*give)), True))
            owned[v] = keep
        step += 1
        dist //= 2
    dist = 1
    while dist < q:  # recursive doubling: swap owned ranges, which then merge
        for v in range(q):
            plan.append(Transfer(step, real(v), real(v ^ dist), tuple(range(*owned[v])), False))
        for v in range(q):
            if v & dist == 0:
                lo, _ = owned[v]
                _, hi = owned[v ^ dist]
                owned[v] = owned[v ^ dist] = (lo, hi)
        step += 1
        dist *= 2
    plan += [Transfer(step, 2 * i + 1, 2 * i, everything, False) for i in range(extra)]
    return plan


def binomial_broadcast_schedule(world_size: int, root: int = 0) -> list[Transfer]:
    """ceil(log2 p) steps; at step k every holder v < 2^k (relative to root) sends to v + 2^k."""
    _check(world_size, root)
    p = world_size
    plan: list[Transfer] = []
    k, dist = 0, 1
    while dist < p:
        for v in range(min(dist, p - dist)):
            plan.append(Transfer(k, (v + root) % p, (v + dist + root) % p, (0,), False))
        k, dist = k + 1, dist * 2
    return plan


def binomial_reduce_schedule(world_size: int, root: int = 0, first_step: int = 0) -> list[Transfer]:
    """The broadcast tree run backwards: at step k, relative rank v with v % 2^(k+1) == 2^k
    sends its partial result to v - 2^k."""
    _check(world_size, root)
    p = world_size
    plan: list[Transfer] = []
    k, dist = 0, 1
    while dist < p:
        for v in range(dist, p, 2 * dist):
            plan.append(Transfer(first_step + k, (v + root) % p, (v - dist + root) % p, (0,), True))
        k, dist = k + 1, dist * 2
    return plan


def chain_broadcast_schedule(world_size: int, root: int = 0) -> list[Transfer]:
    """Pipelined chain root -> root+1 -> ... ; with chunking every link is busy at once."""
    _check(world_size, root)
    p = world_size
    return [Transfer(s, (root + s) % p, (root + s + 1) % p, (0,), False) for s in range(p - 1)]


def chain_reduce_schedule(world_size: int, root: int = 0) -> list[Transfer]:
    """Pipelined chain root+1 -> root+2 -> ... -> root, accumulating on the way."""
    _check(world_size, root)
    p = world_size
    return [Transfer(s, (root + s + 1) % p, (root + s + 2) % p, (0,), True) for s in range(p - 1)]


def tree_all_reduce_schedule(world_size: int) -> list[Transfer]:
    """Binomial reduce to rank 0, then binomial broadcast from rank 0 (chunk-pipelined)."""
    reduce = binomial_reduce_schedule(world_size, 0)
    steps = 1 + max((t.step for t in reduce), default=-1)
    bcast = binomial_broadcast_schedule(world_size, 0)
    return reduce + [t._replace(step=t.step + steps) for t in bcast]


def bruck_all_gather_schedule(world_size: int) -> list[Transfer]:
    """ceil(log2 p) steps; at step k rank r sends the min(2^k, p-2^k) blocks r, r+1, ... it holds
    to rank r - 2^k. Blocks land at their final index, so no final rotation is needed."""
    _check(world_size)
    p = world_size
    plan: list[Transfer] = []
    k, dist = 0, 1
    while dist < p:
        count = min(dist, p - dist)
        for r in range(p):
            blocks = tuple((r + j) % p for j in range(count))
            plan.append(Transfer(k, r, (r - dist) % p, blocks, False))
        k, dist = k + 1, dist * 2
    return plan


def linear_gather_schedule(world_size: int, root: int = 0) -> list[Transfer]:
    """Every rank sends its block straight to the root (what gloo does too)."""
    _check(world_size, root)
    return [Transfer(0, r, root, (r,), False) for r in range(world_size) if r != root]


def linear_scatter_schedule(world_size: int, root: int = 0) -> list[Transfer]:
    """The root sends block r straight to rank r."""
    _check(world_size, root)
    return [Transfer(0, root, r, (r,), False) for r in range(world_size) if r != root]


def pairwise_all_to_all_schedule(world_size: int) -> list[Transfer]:
    """p-1 steps; at step s rank r sends its block for rank r+s and receives from rank r-s.

    Block b of a Transfer is the sender's input block b (destined for rank b)."""
    _check(world_size)
    p = world_size
    return [
        Transfer(s - 1, r, (r + s) % p, ((r + s) % p,), False)
        for s in range(1, p)
        for r in range(p)
    ]
