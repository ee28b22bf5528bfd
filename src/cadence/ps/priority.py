"""Transfer priorities (torch-free): FIFO, layer order, and computation-graph based.

The graph priority follows the idea of TicTac's timing-aware ordering. The forward pass is a
DAG of ops; parameters are received before the first op that reads them, and parameters read
first by the same op form one *receive* (they share its priority). For each op we know the
receives it needs (directly or through its inputs) and the compute that must run before it
(its ancestors' times). Greedily, again and again, we pick the receive that unblocks an op
after the least compute, given the receives already picked; ties go to the receive more ops
depend on, then to the earlier one. A receive that cannot unblock anything alone is ranked by
how few other receives its nearest op still lacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Op:
    """One forward op of the traced graph."""

    name: str
    """Node name, for humans."""
    time_s: float
    """Measured (or assumed) seconds."""
    inputs: tuple[int, ...]
    """Indices of earlier ops whose outputs it reads (the list is topologically ordered)."""
    params: tuple[int, ...]
    """Indices of parameters it reads directly."""


def fifo_priorities(num_params: int) -> list[int]:
    """One class for all: transfers go in the order they are requested."""
    return [0] * num_params


def layer_priorities(blocks: Sequence[int]) -> list[int]:
    """Earlier block, more urgent (dense ranks of the block indices)."""
    ranks = {b: r for r, b in enumerate(sorted(set(blocks)))}
    return [ranks[b] for b in blocks]


def receive_groups(ops: Sequence[Op], num_params: int) -> list[list[int]]:
    """Parameters grouped by the first op that reads them, in op order."""
    seen: set[int] = set()
    groups = []
    for op in ops:
        fresh = [p for p in op.params if p not in seen and 0 <= p < num_params]
        seen.update(fresh)
        if fresh:
            groups.append(fresh)
    return groups


def graph_order(ops: Sequence[Op], num_params: int) -> list[list[int]]:
    """Receive groups in the greedy order described in the module docstring."""
    groups = receive_groups(ops, num_params)
    group_of = {p: g for g, members in enumerate(groups) for p in members}
    needs: list[int] = []  # bitset of receives each op needs
    ancestors: list[int] = []  # bitset of ops that must run first
    for i, op in enumerate(ops):
        need, anc = 0, 0
        for j in op.inputs:
            if not 0 <= j < i:
                raise ValueError(f"op {i} ({op.name}) reads op {j}: ops must be in topo order")
            need |= needs[j]
            anc |= ancestors[j] | (1 << j)
        for p in op.params:
            if p in group_of:
                need |= 1 << group_of[p]
        needs.append(need)
        ancestors.append(anc)
    before = [
        sum(ops[j].time_s for j in range(i) if anc >> j & 1) for i, anc in enumerate(ancestors)
    ]
    dependents = [sum(1 for n in needs if n >> g & 1) for g in range(len(groups))]
    done, order = 0, []
    remaining = set(range(len(groups)))
    while remaining:
        best = min(remaining, key=lambda g: _greedy_key(g, done, needs, before, dependents))
        order.append(groups[best])
        done |= 1 << best
        remaining.discard(best)
    return order


def _greedy_key(
    g: int, done: int, needs: list[int], before: list[float], dependents: list[int]
) -> tuple[int, float, float, int, int]:
    """Smaller is picked first: (cannot unblock alone, compute before the op it unblocks or
    receives still missing, compute before that op, -dependents, index)."""
    bit = 1 << g
    users = [i for i, n in enumerate(needs) if n & bit]
    ready = [before[i] for i in users if not n_missing(needs[i], done | bit)]
    if ready:
        return (0, min(ready), 0.0, -dependents[g], g)
    lack = min((n_missing(needs[i], done | bit), before[i]) for i in users)
    return (1, float(lack[0]), lack[1], -dependents[g], g)


def n_missing(need: int, done: int) -> int:
    return bin(need & ~done).count("1")


def graph_priorities(ops: Sequence[Op], num_params: int) -> list[int]:
    """Priority per parameter: its receive's position in `graph_order`; parameters no op reads
    come last."""
    order = graph_order(ops, num_params)
    prio = [len(order)] * num_params
    for rank, members in enumerate(order):
        for p in members:
            prio[p] = rank
    return prio
