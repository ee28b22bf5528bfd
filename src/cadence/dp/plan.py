"""The scheduled data-parallel plan: pure data, no torch.distributed.

Gradients are cut into chunks: a gradient larger than the threshold is split into
threshold-sized pieces, smaller ones are fused (in backward order) until the threshold is
reached. Each chunk takes the priority of its front-most layer (0 = first layer = most urgent).

Every rank must issue collectives in the same order, so the order is not decided at run time
from local timing: `build_plan` simulates one backward pass from expected ready times and a link
rate, with at most `credit_bytes` in flight, always sending the most urgent ready chunk next.
The resulting `issue_order` is what every rank follows.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_CHUNKS = 4
"""The default threshold aims at this many chunks of a model's gradients (`default_threshold`)."""
DEFAULT_THRESHOLD_MIN = 1 * 2**20
"""The default threshold never goes below this: each chunk costs a hand-off and a collective."""
DEFAULT_THRESHOLD_MAX = 4 * 2**20
"""Nor above this, whatever the model's size."""


def default_threshold(gradient_bytes: int) -> int:
    """The threshold cadence-dp runs with unless told otherwise: a quarter of the model's
    gradient bytes, within 1-4 MiB. A fixed 4 MiB made a model with a few MB of gradients one
    chunk, sent only after the whole backward pass; smaller than 1 MiB, the chunks' own costs
    showed where the link is fast."""
    quarter = gradient_bytes // DEFAULT_CHUNKS
    return min(DEFAULT_THRESHOLD_MAX, max(DEFAULT_THRESHOLD_MIN, quarter))


DEFAULT_CREDIT_CHUNKS = 2
"""Chunks in flight by default: the next is issued while one is on the wire."""
LARGE_MODEL_CHUNKS = 8
"""A model with at least this many chunks' worth of gradients gets `LARGE_CREDIT_CHUNKS`."""
LARGE_CREDIT_CHUNKS = 4
"""Chunks in flight for a large model. vgg16 at 400mbit (15 chunks of 4 MiB), measured in turns
against two in one run: 0.90-0.97x the iteration time in three runs of five, 1.04x and 1.09x
in two (0.98x on average, within the noise between runs); three chunks 1.01x, six 1.04x. A
small model keeps two: four would put all its gradients in flight at once, leaving nothing for
priority order (gpt_mini at 400mbit: 1.06x with four)."""


def default_credit(threshold_bytes: int, gradient_bytes: int = 0) -> int:
    """The byte credit unless one is given, for a model with `gradient_bytes` of gradients:
    `DEFAULT_CREDIT_CHUNKS` chunks' worth, or `LARGE_CREDIT_CHUNKS` for a large model."""
    large = gradient_bytes >= LARGE_MODEL_CHUNKS * threshold_bytes
    return (LARGE_CREDIT_CHUNKS if large else DEFAULT_CREDIT_CHUNKS) * threshold_bytes


DEFAULT_ONE_CHUNK_WIRE_SHARE = 0.05
"""cadence-dp's default plan stays one chunk, synchronised by the main thread at the end of the
backward pass, when its chunks could hide less than this share of an iteration
(`one_chunk_suffices`)."""


def hideable_share(wire_s: float, iteration_s: float, chunks: int) -> float:
    """The most of an iteration that `chunks` chunks could hide of an all-reduce of every
    gradient taking `wire_s`: all but the last chunk's, which is ready only when the backward
    pass ends."""
    return wire_s * (1 - 1 / max(1, chunks)) / iteration_s


def one_chunk_suffices(wire_s: float, iteration_s: float, chunks: int, share: float) -> bool:
    """Whether a model whose gradients all-reduce in `wire_s`, in iterations of `iteration_s`,
    is best left one chunk rather than cut into `chunks`: when what they could hide is under
    `share` of the iteration. Every chunk handed to the communication thread waits for a core's
    turn on a busy host (two ranks on 2 cores: gpt_mini's four chunks cost 5-6% of a
    step against one chunk, which its all-reduce, 3-6% of the step, could not repay)."""
    return share > 0 and hideable_share(wire_s, iteration_s, chunks) < share


@dataclass(frozen=True)
class ParamInfo:
    """One parameter (shared parameters appear once)."""

    index: int
    """Position in the runtime's parameter list."""
    name: str
    """Qualified name, for humans."""
    numel: int
    """Number of elements."""
    element_size: int
    """Bytes per element."""
    layer: int
    """Front-most layer that uses it: its priority and the layer whose forward waits for it."""

    @property
    def nbytes(self) -> int:
        return self.numel * self.element_size


@dataclass(frozen=True)
class Segment:
    """A contiguous slice of one parameter's flattened gradient."""

    param: int
    """`ParamInfo.index` of the parameter."""
    start: int
    """First element of the slice."""
    length: int
    """Number of elements."""


@dataclass(frozen=True)
class Chunk:
    """What one all-reduce carries."""

    id: int
    """Position in backward (creation) order."""
    priority: int
    """Front-most layer among its segments; lower is more urgent."""
    segments: tuple[Segment, ...]
    """The slices it carries, in order."""
    nbytes: int
    """Bytes on the wire per all-reduce input."""


@dataclass(frozen=True)
class DPPlan:
    """Everything the runtime needs to sync one iteration; identical on every rank."""

    threshold_bytes: int
    """Split/fuse threshold."""
    credit_bytes: int
    """At most this many bytes in flight (at least one chunk is always allowed)."""
    params: tuple[ParamInfo, ...]
    """Parameters in runtime order."""
    chunks: tuple[Chunk, ...]
    """Chunks in creation (backward) order; `Chunk.id` indexes this tuple."""
    issue_order: tuple[int, ...]
    """Chunk ids in the order every rank issues their all-reduce."""
    layer_chunks: tuple[tuple[int, ...], ...]
    """For each layer, the chunks that must be applied before its next forward."""
    reorder_k: int | None = None
    """Backward reordering point K the executor runs with (None: autograd's ordinary order);
    Linear/Conv weight gradients then run in the order K..1, L..K+1 (1-based layers)."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form; `from_json` reads it back (a recorded run's plan, replayed)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DPPlan:
        chunks = tuple(
            Chunk(
                id=int(c["id"]),
                priority=int(c["priority"]),
                segments=tuple(Segment(**s) for s in c["segments"]),
                nbytes=int(c["nbytes"]),
            )
            for c in data["chunks"]
        )
        return cls(
            threshold_bytes=int(data["threshold_bytes"]),
            credit_bytes=int(data["credit_bytes"]),
            params=tuple(ParamInfo(**p) for p in data["params"]),
            chunks=chunks,
            issue_order=tuple(int(c) for c in data["issue_order"]),
            layer_chunks=tuple(tuple(int(c) for c in cs) for cs in data["layer_chunks"]),
            reorder_k=data.get("reorder_k"),
        )

    def describe(self) -> str:
        """Compact golden-string form, e.g. `c0[p3:0+100]@2 c1[...]@0 | order 1 0`."""
        parts = []
        for chunk in self.chunks:
            segs = ",".join(f"p{s.param}:{s.start}+{s.length}" for s in chunk.segments)
            parts.append(f"c{chunk.id}[{segs}]@{chunk.priority}")
        return " ".join(parts) + " | order " + " ".join(map(str, self.issue_order))


def backward_order(params: Sequence[ParamInfo]) -> list[ParamInfo]:
    """Expected order in which gradients become ready: back layers first, and within a layer
    the last-registered parameter first (autograd visits a layer's ops in reverse)."""
    return sorted(params, key=lambda p: (-p.layer, -p.index))


def make_chunks(
    params: Sequence[ParamInfo],
    threshold_bytes: int,
    order: Sequence[ParamInfo] | None = None,
) -> list[Chunk]:
    """Split large gradients and fuse small ones, walking `order` (default: backward order),
    so that a fused chunk holds gradients that become ready one after another."""
    if threshold_bytes < 1:
        raise ValueError(f"threshold must be at least 1 byte, got {threshold_bytes}")
    chunks: list[Chunk] = []
    pending: list[ParamInfo] = []

    def emit(segments: list[Segment], members: list[ParamInfo]) -> None:
        nbytes = sum(s.length * members[0].element_size for s in segments)
        priority = min(p.layer for p in members)
        chunks.append(Chunk(len(chunks), priority, tuple(segments), nbytes))

    def flush() -> None:
        if pending:
            emit([Segment(p.index, 0, p.numel) for p in pending], list(pending))
            pending.clear()

    for param in order if order is not None else backward_order(params):
        if param.numel == 0:
            continue
        if pending and pending[0].element_size != param.element_size:
            flush()  # one chunk, one dtype width
        if param.nbytes > threshold_bytes:
            flush()
            step = max(1, threshold_bytes // param.element_size)
            for start in range(0, param.numel, step):
                emit([Segment(param.index, start, min(step, param.numel - start))], [param])
        else:
            pending.append(param)
            if sum(p.nbytes for p in pending) >= threshold_bytes:
                flush()
    flush()
    return chunks


def priority_order(
    chunks: Sequence[Chunk],
    ready_s: Sequence[float],
    link_bytes_per_s: float,
    credit_bytes: int,
) -> list[int]:
    """Simulate one backward pass and return the order in which chunks get sent.

    `ready_s[c]` is when chunk c's gradients are all computed. The link drains the in-flight
    chunks one after another at `link_bytes_per_s`; a new chunk may start while fewer than
    `credit_bytes` are in flight; among ready chunks the lowest priority number wins.
    """
    order: list[int] = []
    by_ready = sorted(range(len(chunks)), key=lambda c: (ready_s[c], c))
    ready: list[tuple[int, float, int]] = []  # (priority, ready time, id)
    in_flight: list[tuple[float, int]] = []  # (finish time, bytes), finish-ordered
    now, link_free, nxt, in_flight_bytes = 0.0, 0.0, 0, 0
    while len(order) < len(chunks):
        while nxt < len(by_ready) and ready_s[by_ready[nxt]] <= now:
            c = by_ready[nxt]
            heapq.heappush(ready, (chunks[c].priority, ready_s[c], c))
            nxt += 1
        while in_flight and in_flight[0][0] <= now:
            in_flight_bytes -= heapq.heappop(in_flight)[1]
        fits = ready and in_flight_bytes + chunks[ready[0][2]].nbytes <= credit_bytes
        if ready and (not in_flight or fits):
            _, _, c = heapq.heappop(ready)
            start = max(now, link_free)
            link_free = start + chunks[c].nbytes / link_bytes_per_s
            heapq.heappush(in_flight, (link_free, chunks[c].nbytes))
            in_flight_bytes += chunks[c].nbytes
            order.append(c)
            continue
        # Nothing can start now: jump to the next event (a chunk ready, or one finishing).
        next_finish = in_flight[0][0] if in_flight else math.inf
        next_ready = ready_s[by_ready[nxt]] if nxt < len(by_ready) else math.inf
        now = min(next_finish, next_ready)
    return order


def build_plan(
    params: Sequence[ParamInfo],
    threshold_bytes: int,
    credit_bytes: int,
    ready_s: Sequence[float] | None = None,
    link_bytes_per_s: float | None = None,
    reorder_k: int | None = None,
    arrival_order: Sequence[int] | None = None,
) -> DPPlan:
    """Chunk the gradients and fix the issue order every rank will follow.

    `ready_s[i]` is when parameter i's gradient is expected (seconds after backward starts);
    without it, gradients are assumed to arrive one per time unit in backward order. Without
    `link_bytes_per_s` the link is assumed to need as long for all bytes as the backward takes.
    `arrival_order` (parameter indices, `gradient_arrival_order`) breaks ties between equal
    `ready_s`, as a simulator gives every gradient of one block: the order the runtime's hooks
    would see them in. Without it ties fall back on the expected backward order.
    """
    expected = expected_ready_order(params, reorder_k)
    position = {p.index: t for t, p in enumerate(expected)}
    if ready_s is None:
        ready_s = [float(position[p.index]) for p in sorted(params, key=lambda p: p.index)]
    else:  # measured (rank 0's, so the same everywhere): fuse in the order they really came
        if arrival_order is not None:
            position = arrival_positions(params, arrival_order)
        expected = sorted(params, key=lambda p: (ready_s[p.index], position[p.index]))
    chunks = make_chunks(params, threshold_bytes, expected)
    chunk_ready = [max(ready_s[s.param] for s in chunk.segments) for chunk in chunks]
    if link_bytes_per_s is None:
        span = max(chunk_ready, default=0.0) or 1.0
        link_bytes_per_s = max(1.0, sum(c.nbytes for c in chunks) / span)
    order = priority_order(chunks, chunk_ready, link_bytes_per_s, credit_bytes)
    num_layers = 1 + max((p.layer for p in params), default=-1)
    return DPPlan(
        threshold_bytes=threshold_bytes,
        credit_bytes=credit_bytes,
        params=tuple(params),
        chunks=tuple(chunks),
        issue_order=tuple(order),
        layer_chunks=_layer_chunks(chunks, params, num_layers),
        reorder_k=reorder_k,
    )


def weight_grad_order(num_layers: int, k: int) -> list[int]:
    """0-based layer indices in the order their weight gradients run for reorder point `k`."""
    if not 1 <= k <= num_layers:
        raise ValueError(f"reorder point K must be in 1..{num_layers}, got {k}")
    return [*range(k - 1, -1, -1), *range(num_layers - 1, k - 1, -1)]


def arrival_positions(params: Sequence[ParamInfo], arrival_order: Sequence[int]) -> dict[int, int]:
    """Each parameter index's position in `arrival_order` (`gradient_arrival_order`), or a
    ValueError unless it lists every index of `params` once."""
    if sorted(arrival_order) != sorted(p.index for p in params):
        raise ValueError("arrival_order must list every parameter index once")
    return {index: t for t, index in enumerate(arrival_order)}


def expected_ready_order(params: Sequence[ParamInfo], reorder_k: int | None) -> list[ParamInfo]:
    """Order in which gradients are expected before anything was measured: backward order, or
    with reordering at K, layers K..1 then L..K+1 (within a layer, still last parameter first)."""
    num_layers = 1 + max((p.layer for p in params), default=-1)
    if reorder_k is None or reorder_k >= num_layers:
        return backward_order(params)
    rank = {layer: i for i, layer in enumerate(weight_grad_order(num_layers, reorder_k))}
    return sorted(params, key=lambda p: (rank[p.layer], -p.index))


def _layer_chunks(
    chunks: Sequence[Chunk], params: Sequence[ParamInfo], num_layers: int
) -> tuple[tuple[int, ...], ...]:
    layer_of = {p.index: p.layer for p in params}
    per_layer: list[set[int]] = [set() for _ in range(num_layers)]
    for chunk in chunks:
        for seg in chunk.segments:
            per_layer[layer_of[seg.param]].add(chunk.id)
    return tuple(tuple(sorted(s)) for s in per_layer)
