"""The parameter-server plan: pure data, no torch.

Parameters are cut into slices (a tensor larger than the slice size, or than an even 1/S share
of the model, is split into near-equal pieces), and the slices are placed on servers largest
first, each on the least-loaded server (by bytes). Every slice carries its parameter's priority
(0 = most urgent) and the priority class (channel) that priority maps to; the plan also names
the consistency model the servers keep. Every worker builds the same plan from the same inputs,
so keys and placements agree without negotiation. The runtime (`cadence.ps.runtime`: the
worker, and the servers it starts with their slices) and the simulator
(`cadence.sim.ps_adapter`: its transfers and updates, `PSPlan.transfers`) read the same plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cadence.ps.priority import fifo_priorities, layer_priorities


@dataclass(frozen=True)
class ParamInfo:
    """One parameter (shared parameters appear once)."""

    index: int
    """Position in the worker's parameter list."""
    name: str
    """Qualified name, for humans."""
    numel: int
    """Number of elements."""
    block: int
    """Block whose forward waits for this parameter."""


@dataclass(frozen=True)
class Slice:
    """A contiguous piece of one parameter, owned by one server."""

    key: int
    """Position in `PSPlan.slices`; the key every message about this slice carries."""
    param: int
    """`ParamInfo.index` of the parameter."""
    start: int
    """First element (of the flattened parameter)."""
    length: int
    """Number of elements."""
    server: int
    """Owning server."""
    priority: int
    """0 is the most urgent."""
    klass: int
    """Priority class: the channel (socket, DSCP mark) its messages travel on."""


@dataclass(frozen=True)
class PSPlan:
    """Placement and priorities; identical on every worker and server."""

    servers: int
    """Number of servers."""
    classes: int
    """Number of priority classes."""
    element_size: int
    """Bytes per element (4: float32)."""
    params: tuple[ParamInfo, ...]
    """Parameters in worker order."""
    slices: tuple[Slice, ...]
    """All slices; `Slice.key` indexes this tuple."""
    consistency: str = "bsp"
    """What the servers wait for before answering a pull (`PSConfig.consistency`): bsp,
    asp, ssp:S or backup:K."""

    def server_bytes(self) -> list[int]:
        """Bytes each server owns."""
        loads = [0] * self.servers
        for s in self.slices:
            loads[s.server] += s.length * self.element_size
        return loads

    def slices_of(self, param: int) -> list[Slice]:
        return [s for s in self.slices if s.param == param]

    def pull_order(self) -> list[int]:
        """Slice keys in the order a worker requests them: most urgent first."""
        return [s.key for s in sorted(self.slices, key=lambda s: (s.priority, s.key))]

    def slice_transfers(self, arrival_order: Sequence[int] | None = None) -> list[Transfer]:
        """One transfer per slice, as the runtime sends them: a message each way per step
        (`transfers` sums them per block and server). In block order; within a block in the
        order a worker pushes them: its parameters in the order their gradients arrive
        (`arrival_order`, parameter indices; None: last registered first, backward's usual
        order), each parameter's slices in key order."""
        if arrival_order is None:
            arrival_order = sorted((p.index for p in self.params), reverse=True)
        rank = {index: i for i, index in enumerate(arrival_order)}
        block = {p.index: p.block for p in self.params}
        out = [
            Transfer(block[s.param], s.server, s.length * self.element_size, 1, s.priority)
            for s in self.slices
        ]
        keys = [(block[s.param], rank.get(s.param, len(rank)), s.key) for s in self.slices]
        return [t for _, t in sorted(zip(keys, out, strict=True), key=lambda kt: kt[0])]

    def transfers(self) -> list[Transfer]:
        """Per block and server, what a worker pushes there each step (and pulls back):
        the block's slices on that server, in block then server order; pairs without a
        slice are left out."""
        found: dict[tuple[int, int], Transfer] = {}
        for s in self.slices:
            where = (self.params[s.param].block, s.server)
            nbytes = s.length * self.element_size
            t = found.get(where)
            found[where] = (
                Transfer(*where, nbytes, 1, s.priority)
                if t is None
                else Transfer(
                    *where, t.nbytes + nbytes, t.messages + 1, min(t.priority, s.priority)
                )
            )
        return [found[k] for k in sorted(found)]


@dataclass(frozen=True)
class Transfer:
    """What one worker sends one server for one block each step (its pushes; its pulls
    bring back as much): the block's slices that the server owns."""

    block: int
    """Block whose backward produces the gradients and whose forward waits for the pull."""
    server: int
    """Owning server."""
    nbytes: int
    """Bytes of the slices."""
    messages: int
    """Slices: one message each way per step."""
    priority: int
    """The most urgent slice's priority (0 first)."""


def priority_class(priority: int, max_priority: int, classes: int) -> int:
    """Map priorities 0..max_priority evenly onto classes 0..classes-1."""
    return min(classes - 1, priority * classes // (max_priority + 1))


def split_lengths(numel: int, max_elems: int) -> list[int]:
    """Near-equal pieces of at most `max_elems` elements (larger pieces first)."""
    pieces = max(1, math.ceil(numel / max_elems))
    base, extra = divmod(numel, pieces)
    return [base + (1 if i < extra else 0) for i in range(pieces)]


def build_plan(
    params: Sequence[ParamInfo],
    priorities: Sequence[int],
    servers: int,
    classes: int = 1,
    slice_bytes: int = 4 << 20,
    element_size: int = 4,
    consistency: str = "bsp",
) -> PSPlan:
    """Slice, place and prioritise `params` (`priorities[i]` belongs to `params[i]`)."""
    if len(priorities) != len(params):
        raise ValueError(f"{len(priorities)} priorities for {len(params)} parameters")
    total = sum(p.numel for p in params)
    max_elems = max(1, min(slice_bytes // element_size, math.ceil(total / servers)))
    pieces: list[tuple[int, int, int]] = []  # (param, start, length)
    for p in params:
        start = 0
        for length in split_lengths(p.numel, max_elems):
            pieces.append((p.index, start, length))
            start += length
    owner = [0] * len(pieces)
    loads = [0] * servers
    # Largest first onto the least-loaded server (ties: lowest server, then lowest key).
    for key in sorted(range(len(pieces)), key=lambda k: (-pieces[k][2], k)):
        server = min(range(servers), key=lambda s: (loads[s], s))
        owner[key] = server
        loads[server] += pieces[key][2]
    by_index = {p.index: i for i, p in enumerate(params)}
    top = max(priorities, default=0)
    slices = []
    for key, (param, start, length) in enumerate(pieces):
        prio = priorities[by_index[param]]
        klass = priority_class(prio, top, classes)
        slices.append(Slice(key, param, start, length, owner[key], prio, klass))
    return PSPlan(servers, classes, element_size, tuple(params), tuple(slices), consistency)


def chain_plan(
    block_bytes: Sequence[int], servers: int, order: str, *, slice_bytes: int = 4 << 20,
    consistency: str = "bsp",
) -> PSPlan:  # fmt: skip
    """The plan of a chain of blocks known by their fp32 parameter bytes (a profile's): one
    parameter per block holding any (`layout_plan`)."""
    params = [
        ParamInfo(i, f"block{b}", nbytes // 4, b)
        for i, (b, nbytes) in enumerate((b, n) for b, n in enumerate(block_bytes) if n > 0)
    ]
    return layout_plan(params, servers, order, slice_bytes=slice_bytes, consistency=consistency)


def layout_plan(
    params: Sequence[ParamInfo],
    servers: int,
    order: str,
    classes: int = 1,
    slice_bytes: int = 4 << 20,
    consistency: str = "bsp",
) -> PSPlan:
    """The plan of a chain of blocks known by their fp32 parameters, prioritised in `order`
    (fifo: all equal; layer, and graph, which on a chain is layer order: front block first).
    The runtime's graph order ranks the parameters within a block too; the simulator, which
    waits for a block's parameters all together, needs only the blocks' order."""
    if order == "fifo":
        priorities = fifo_priorities(len(params))
    else:
        priorities = layer_priorities([p.block for p in params])
    return build_plan(params, priorities, servers, classes, slice_bytes, 4, consistency)
