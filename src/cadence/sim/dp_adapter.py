"""Task graphs of data-parallel training: cadence's scheduled plan (`DPPlan`) and DDP.

Both follow what the executors do, step by step:

- gradient accumulation (`SimOptions.grad_accum` N): each iteration's compute is N
  micro-batches, the first N-1 with no communication (`no_sync`); everything below happens in
  the last one, whose backward alone overlaps the gradients' synchronisation.
- cadence-dp (`cadence/dp/runtime.py`): the communication thread walks `plan.issue_order`;
  before issuing a chunk it waits for the chunk's gradients and then, while the bytes in
  flight plus the chunk's would exceed `plan.credit_bytes`, completes the *oldest* in-flight
  chunk (waits for it, unpacks it). After the last issue and the backward's end it all-reduces
  one "used" flag per parameter (priced at one message's latency; not with a one-chunk plan,
  whose flags travel in its one all-reduce), then completes the remaining chunks in order.
  Updates are released by `optimizer.step()`, at the backward's end: a layer whose last
  chunk is completed after it is updated at once (a conditional task, working only if the
  backward had ended); one completed before it is held, and the held ones run in completion
  order once every chunk and the flags are reduced (each a deferred copy, which ends with the
  early one where that one worked). A completion at the very instant the backward ends counts
  as after step(): the runtime's two threads race there. With `SimOptions.clip` the main thread
  waits for every reduction and the flags, clips (`SimOptions.clip_s` on the compute), then
  steps. Layer b's next forward waits for its update only; a model with buffers has them
  broadcast from rank 0 before each forward, as DDP does (main thread, default group), and
  the forward waits for it. Backward runs in ordinary order, or reordered at
  `plan.reorder_k` (all input gradients first, then weight gradients of layers K..1, L..K+1).
- DDP: before each forward, a model with buffers (BatchNorm's running statistics) has them
  broadcast from rank 0 (`broadcast_buffers`, on by default), and the forward waits for it;
  gradients are bucketed in the order they arrive (DDP rebuilds its buckets so after the
  first iteration; first bucket 1 MiB, then `bucket_bytes`), a bucket's all-reduce is
  launched once it is ready and every earlier bucket is launched, the optimizer steps after
  backward once all are done (after the clip with `SimOptions.clip`), and the next forward
  waits for that step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from cadence.comm.cost import AlphaBeta
from cadence.dp.plan import DPPlan, ParamInfo, arrival_positions
from cadence.dp.wire import wire_bytes
from cadence.errors import UserError
from cadence.sim.compute import (
    BlockCosts,
    add_accumulation,
    add_compute_iteration,
    add_input,
    allreduce_flow,
    backward_steps,
    broadcast_flow,
    param_blocks,
    reordered_blocks,
)
from cadence.sim.grad_ready import ready_points
from cadence.sim.graph import LINK, STREAM, TaskGraph
from cadence.sim.host_cpu import charged as host_charged
from cadence.sim.options import DDP_FIRST_BUCKET_BYTES, SimOptions


@dataclass(frozen=True)
class Built:
    """A graph plus what the metrics need to read its schedule."""

    graph: TaskGraph
    """The tasks."""
    iteration_starts: tuple[int, ...]
    """Per simulated iteration, worker 0's first forward task; one more (a marker) at the end."""
    measured_from: int
    """Index in `iteration_starts` where steady state (the measured window) begins."""
    strategy: str
    """"cadence-dp" or "ddp"."""
    world_size: int
    """Workers modelled."""


def _resources(
    graph: TaskGraph,
    worker: int,
    link: AlphaBeta,
    shared_compute: bool = False,
    bucket_bytes: float = 0.0,
    rate_while_computing: float = 1.0,
) -> tuple[int, int, int]:
    rate = 1.0 / link.beta_s_per_byte if link.beta_s_per_byte > 0 else float("inf")
    if shared_compute:  # time-sliced between the main thread and the communication thread
        compute = graph.resource(f"w{worker}.compute", LINK, bytes_per_s=1.0, worker=worker)
    else:
        compute = graph.resource(f"w{worker}.compute", STREAM, worker=worker)
    comm = graph.resource(f"w{worker}.comm", STREAM, worker=worker)
    nic = graph.resource(
        f"w{worker}.nic",
        LINK,
        bytes_per_s=rate,
        worker=worker,
        bucket_bytes=bucket_bytes,
        slowed_by=compute if rate_while_computing < 1 else None,
        slowed_share=rate_while_computing,
    )
    return compute, comm, nic


def _flow(
    graph: TaskGraph,
    name: str,
    nbytes: int,
    nics: Sequence[int],
    link: AlphaBeta,
    world_size: int,
    deps: list[int | None],
    iteration: int,
    broadcast: bool = False,
) -> int:
    """A ring all-reduce of `nbytes` on every NIC (or, with `broadcast`, gloo's broadcast)."""
    flow = broadcast_flow if broadcast else allreduce_flow
    latency, wire = flow(link, nbytes, world_size)
    if link.beta_s_per_byte == 0:
        wire = 0.0  # infinitely fast link: only the latency remains
    return graph.add(
        name,
        "collective" if broadcast else "allreduce",
        resources=nics,
        duration_s=latency,
        nbytes=wire,
        deps=deps,
        iteration=iteration,
    )


class _ProcessGroup:
    """The collectives of one process group, in the order they are issued. gloo's pairs carry
    them in that order over one connection each, and NCCL runs them on one stream, so each
    starts only when the one issued before it has ended: cadence-dp's chunks and DDP's buckets
    queue on the link rather than share it."""

    def __init__(self) -> None:
        self.last: int | None = None

    def after(self, deps: Sequence[int | None]) -> list[int | None]:
        """`deps`, and the collective issued before."""
        return [*deps, self.last] if self.last is not None else list(deps)

    def issued(self, task: int) -> int:
        """Record `task` as the latest collective; returns it."""
        self.last = task
        return task


def _buffer_broadcast(
    graph: TaskGraph,
    buffer_bytes: int,
    nics: Sequence[int],
    link: AlphaBeta,
    world_size: int,
    deps: list[int | None],
    iteration: int,
    computes: Sequence[int],
    options: SimOptions,
    calls: int,
    group: _ProcessGroup,
) -> list[list[int]]:
    """DDP's broadcast of the model's buffers before a forward, as `gates` for the forward's
    blocks: the first block waits for it (no gates when there are no buffers). torch sends one
    broadcast per dtype (`calls`), at most two in flight: priced on the wire as one of all the
    bytes, while each call takes its processor time from every worker's compute where that is
    charged (`_comm_cpu`, the bytes split between the calls)."""
    if buffer_bytes <= 0 or world_size < 2:
        return []
    task = group.issued(
        _flow(graph, "buffers", buffer_bytes, nics, link, world_size, group.after(deps),
              iteration, broadcast=True)
    )  # fmt: skip
    calls = max(calls, 1)
    share = buffer_bytes // calls
    for _ in range(calls):
        _comm_cpu(graph, "buffers", share, computes, [deps] * len(computes), iteration, options)
    return [[task]]


def _comm_cpu(
    graph: TaskGraph,
    name: str,
    nbytes: int,
    computes: Sequence[int],
    deps: Sequence[list[int | None]],
    iteration: int,
    options: SimOptions,
) -> list[int | None]:
    """Per worker, the processor time an all-reduce takes from its compute (None when not
    charged): a task on the shared compute that starts with the transfer."""
    if not options.charges_comm_cpu:
        return [None] * len(computes)
    seconds = options.comm_cpu_s(nbytes)
    return [
        graph.add_work(
            f"cpu {name}",
            "comm-cpu",
            compute,
            seconds,
            deps=list(deps[w]),
            worker=w,
            iteration=iteration,
        )  # fmt: skip
        for w, compute in enumerate(computes)
    ]


class _CommThread:
    """The communication-thread program of cadence-dp for every simulated worker."""

    def __init__(self, graph: TaskGraph, plan: DPPlan, streams: Sequence[int]) -> None:
        self.graph, self.plan, self.streams = graph, plan, streams
        self.prev: list[int | None] = [None] * len(streams)
        self.iteration = 0
        self.flows: dict[int, int] = {}
        self.cpu: dict[int, list[int | None]] = {}
        self.gates: list[list[list[int]]] = []

    def step(
        self,
        w: int,
        name: str,
        kind: str,
        seconds: float,
        deps: Sequence[int | None],
        mem: int = 0,
        stream: int | None = None,
        **conditional: int | None,
    ) -> int:
        """The thread's next step; it runs on `stream` (default: the thread's own);
        `conditional`: `work_if_ended` / `ends_with` (see `Task`)."""
        tid = self.graph.add_work(
            name,
            kind,
            self.streams[w] if stream is None else stream,
            seconds,
            deps=[self.prev[w], *deps],
            worker=w,
            iteration=self.iteration,
            mem_end=mem,
            **conditional,
        )
        self.prev[w] = tid
        return tid

    def complete(self, c: int) -> None:
        """Wait for chunk `c`'s all-reduce and unpack it (its packed copy is freed)."""
        for w in range(len(self.streams)):
            cpu = self.cpu[c][w] if c in self.cpu else None
            deps = [self.flows[c]] if cpu is None else [self.flows[c], cpu]
            self.step(w, f"done c{c}", "complete", 0.0, deps, -_packed(self.plan, c))

    def update(
        self,
        layers: Sequence[int],
        released: Sequence[int | None],
        layer_block: Sequence[int],
        layer_bytes: Sequence[int],
        update_s_per_byte: float,
        update_streams: Sequence[int] | None,
        inline: dict[tuple[int, int], int] | None = None,
        reduced: Sequence[int | None] = (),
    ) -> None:
        """Update `layers` once `released[w]` (the step) has happened and, where `reduced` is
        given, every chunk is reduced; where `inline` holds the layer's update applied at its
        chunk's completion if step() had happened by then, this is the deferred copy, which
        ends with that one if it worked."""
        for w in range(len(self.streams)):
            for layer in layers:
                seconds = update_s_per_byte * layer_bytes[layer]
                # The update frees the layer's gradients and gates its next forward.
                stream = None if update_streams is None else update_streams[w]
                early = None if inline is None else inline.get((w, layer))
                deps = [released[w], *(reduced[w : w + 1])]
                t = self.step(
                    w, f"U{layer}", "update", seconds, deps, -layer_bytes[layer], stream,
                    ends_with=early,
                )  # fmt: skip
                self.gates[w][layer_block[layer]].append(t)

    def apply_if_released(
        self,
        layers: Sequence[int],
        released: Sequence[int | None],
        layer_bytes: Sequence[int],
        update_s_per_byte: float,
        update_streams: Sequence[int] | None,
        inline: dict[tuple[int, int], int],
    ) -> None:
        """`layers`' updates at their chunk's completion, done only if step() (`released[w]`)
        has happened by then; recorded in `inline`."""
        for w in range(len(self.streams)):
            for layer in layers:
                seconds = update_s_per_byte * layer_bytes[layer]
                stream = None if update_streams is None else update_streams[w]
                inline[w, layer] = self.step(
                    w, f"U{layer}", "update", seconds, [], 0, stream, work_if_ended=released[w]
                )


def build_dp(
    costs: BlockCosts,
    plan: DPPlan,
    world_size: int,
    link: AlphaBeta,
    iterations: int,
    options: SimOptions,
    buffer_bytes: int = 0,
    buffer_broadcasts: int = 1,
) -> Built:
    """Graph of `options.warmup_iterations + iterations` iterations of cadence-dp
    (`buffer_bytes`, `buffer_broadcasts`: as for `build_ddp`)."""
    options = host_charged(options, link, world_size)
    graph = TaskGraph()
    blocks = param_blocks(costs, plan.params)
    points = ready_points(plan.params, blocks, len(costs.forward_s))
    layer_block = [0] * len(plan.layer_chunks)
    layer_bytes = [0] * len(plan.layer_chunks)
    for p in plan.params:
        layer_block[p.layer] = blocks[p.index]
        layer_bytes[p.layer] += p.nbytes
    nb = len(costs.forward_s)
    k = getattr(plan, "reorder_k", None)
    steps = backward_steps(nb, reordered_blocks(layer_block, nb, k))
    chunk_points = [sorted({(blocks[s.param], points.point[s.param]) for s in c.segments})
                    for c in plan.chunks]  # fmt: skip
    position = {c: i for i, c in enumerate(plan.issue_order)}
    # Each layer is updated when the last (in issue order) of its chunks is completed.
    updates_at: dict[int, list[int]] = {}
    for layer, chunk_ids in enumerate(plan.layer_chunks):
        if chunk_ids:
            last = max(chunk_ids, key=lambda c: position[c])
            updates_at.setdefault(last, []).append(layer)
    shared = options.updates_share_compute or options.charges_comm_cpu
    workers = [
        _resources(
            graph, w, link, shared, options.link_bucket_bytes, options.comm_rate_while_computing
        )
        for w in range(options.replicas)
    ]
    nics = [nic for _, _, nic in workers]
    comm = _CommThread(graph, plan, [c for _, c, _ in workers])
    group = _ProcessGroup()
    main_group = _ProcessGroup()  # the main thread's collectives (buffers), on the default group
    computes = [compute for compute, _, _ in workers]
    update_streams = computes if options.updates_share_compute else None
    total_bytes = sum(layer_bytes)
    flag_bytes = 4 * len(plan.params) if len(plan.chunks) > 1 else 0
    total = options.warmup_iterations + iterations
    starts: list[int] = []
    compute_prev: list[int | None] = [None] * options.replicas
    gates: list[list[list[int]]] = [[[] for _ in costs.forward_s] for _ in workers]
    no_gates: list[list[int]] = [[] for _ in costs.forward_s]
    for it in range(total):
        grads_ready = []
        buffers = _buffer_broadcast(
            graph, buffer_bytes, nics, link, world_size, [*compute_prev], it, computes, options,
            buffer_broadcasts, main_group,
        )  # fmt: skip
        for w, (compute, _, _) in enumerate(workers):
            forward_gates = [list(g) for g in gates[w]]
            if buffers:  # before the first micro-batch only, as under DDP's no_sync
                forward_gates[0] += buffers[0]
            first, after = add_accumulation(
                graph, costs, stream=compute, worker=w, iteration=it, after=compute_prev[w],
                gates=forward_gates, passes=options.grad_accum - 1,
            )  # fmt: skip
            done = add_compute_iteration(
                graph,
                costs,
                stream=compute,
                worker=w,
                iteration=it,
                after=after,
                gates=forward_gates if first is None else no_gates,
                steps=steps,
                shares=points.shares,
            )
            compute_prev[w] = done.last
            grads_ready.append(done.ready)
            if w == 0:
                starts.append(done.forward[0] if first is None else first)
        comm.iteration, comm.flows, comm.cpu = it, {}, {}
        comm.gates = gates = [[[] for _ in costs.forward_s] for _ in workers]

        pending: list[int] = []  # layers whose last chunk is complete, in completion order
        # With a clip, step() comes after every reduction: nothing is applied at completion.
        inline: dict[tuple[int, int], int] | None = None if options.clip else {}
        backward_end = list(compute_prev)  # where step() releases the updates, unclipped

        def completed(
            c: int,
            pending: list[int] = pending,
            inline: dict[tuple[int, int], int] | None = inline,
            backward_end: list[int | None] = backward_end,
        ) -> None:
            comm.complete(c)
            layers = updates_at.get(c, [])
            pending.extend(layers)
            if inline is not None:
                comm.apply_if_released(
                    layers, backward_end, layer_bytes, options.update_s_per_byte,
                    update_streams, inline,
                )  # fmt: skip
        window: deque[int] = deque()
        in_flight = 0
        for c in plan.issue_order:
            nbytes = plan.chunks[c].nbytes
            while window and in_flight + nbytes > plan.credit_bytes:
                oldest = window.popleft()
                in_flight -= plan.chunks[oldest].nbytes
                completed(oldest)
            issued = [
                comm.step(
                    w,
                    f"issue c{c}",
                    "issue",
                    0.0,
                    [grads_ready[w][b][j] for b, j in chunk_points[c]],
                    _packed(plan, c),
                )
                for w in range(options.replicas)
            ]
            if options.dp_compression == "none":
                flow = _flow(
                    graph, f"ar c{c}", nbytes, nics, link, world_size, group.after(issued), it
                )
            else:
                flow = _compressed_flow(
                    graph, plan, c, options.dp_compression, nics, link, world_size,
                    group.after(issued), it,
                )  # fmt: skip
            comm.flows[c] = group.issued(flow)
            comm.cpu[c] = _comm_cpu(
                graph, f"c{c}", nbytes, computes, [[t] for t in issued], it, options
            )
            window.append(c)
            in_flight += nbytes
        flags = None
        if flag_bytes:  # once the backward has ended: which parameters got a gradient
            issued = [
                comm.step(w, "issue flags", "issue", 0.0, [compute_prev[w]])
                for w in range(options.replicas)
            ]
            # A few bytes per parameter: priced at its latency only (the alpha of one message).
            latency, _ = allreduce_flow(link, flag_bytes, world_size)
            flags = group.issued(
                graph.add("ar flags", "collective", resources=nics, duration_s=latency,
                          deps=group.after(issued), iteration=it)
            )  # fmt: skip
        while window:
            completed(window.popleft())
        reduced = [comm.step(w, "reduced", "complete", 0.0, [flags]) for w in range(len(workers))]
        released: list[int | None] = []  # optimizer.step(), on each main thread
        for w, compute in enumerate(computes):
            if options.clip:  # clip_grad_norm_ waits for every reduction, then reads them all
                compute_prev[w] = graph.add_work(
                    "clip", "update", compute, options.clip_s(total_bytes),
                    deps=[compute_prev[w], reduced[w]], worker=w, iteration=it,
                )  # fmt: skip
            released.append(compute_prev[w])
        for layer in pending:
            comm.update(
                [layer], released, layer_block, layer_bytes, options.update_s_per_byte,
                update_streams, inline, reduced,
            )  # fmt: skip
    taken = add_input(
        graph, costs, stream=workers[0][0], worker=0, iteration=total, after=compute_prev[0]
    )
    buffers = _buffer_broadcast(
        graph, buffer_bytes, nics, link, world_size, [*compute_prev], total, computes, options,
        buffer_broadcasts, main_group,
    )  # fmt: skip
    gate = [*gates[0][0], *(buffers[0] if buffers else [])]
    starts.append(_marker(graph, workers[0][0], taken, gate, total))
    return Built(graph, tuple(starts), options.warmup_iterations, "cadence-dp", world_size)


def compressed_flow_terms(
    link: AlphaBeta, numel: int, element_size: int, method: str, world_size: int
) -> tuple[float, float]:
    """(latency seconds, bytes each NIC moves) of one chunk of `numel` elements reduced with
    cadence-dp's `method`: bytes from `compress.wire_bytes`, as the engine counts them; sign's
    bits and scale are all-gathered (a ring of p-1 steps), the casts all-reduced."""
    if method == "powersgd":
        raise UserError(
            "the simulator has no parameter shapes to price powersgd's low-rank factors:"
            " simulate cadence-dp with compression none, bf16, fp16 or sign"
        )
    payload = wire_bytes(method, numel, element_size)
    if method == "sign":
        terms = link.terms("allgather", "ring", payload * world_size, world_size)
        return link.alpha_for("allgather") * terms.messages, terms.wire_bytes
    return allreduce_flow(link, payload, world_size)


def _compressed_flow(
    graph: TaskGraph,
    plan: DPPlan,
    c: int,
    method: str,
    nics: Sequence[int],
    link: AlphaBeta,
    world_size: int,
    deps: list[int | None],
    iteration: int,
) -> int:
    chunk = plan.chunks[c]
    numel = sum(seg.length for seg in chunk.segments)
    element_size = plan.params[chunk.segments[0].param].element_size
    latency, wire = compressed_flow_terms(link, numel, element_size, method, world_size)
    if link.beta_s_per_byte == 0:
        wire = 0.0
    return graph.add(
        f"ar c{c}", "allreduce", resources=nics, duration_s=latency, nbytes=wire, deps=deps,
        iteration=iteration,
    )  # fmt: skip


def _packed(plan: DPPlan, c: int) -> int:
    """Bytes of the copy a chunk of several segments is packed into (`torch.cat`)."""
    chunk = plan.chunks[c]
    return chunk.nbytes if len(chunk.segments) > 1 else 0


def _marker(
    graph: TaskGraph, stream: int, after: int | None, gate: Sequence[int], iteration: int
) -> int:
    """Zero-time task where the next iteration's first forward would start: on the compute
    stream, so it also waits for work queued there ahead of a forward."""
    return graph.add(
        "next", "marker", resources=(stream,), deps=[after, *gate], iteration=iteration
    )


def ddp_buckets(
    params: Sequence[ParamInfo],
    bucket_bytes: int,
    first_bucket_bytes: int | None = DDP_FIRST_BUCKET_BYTES,
    arrival_order: Sequence[int] | None = None,
) -> list[list[ParamInfo]]:
    """DDP's buckets: parameters in the order their gradients arrive (`arrival_order`, in
    which DDP rebuilds its buckets after the first iteration; None: reverse registration
    order), a bucket closes once it holds at least its cap (`first_bucket_bytes` for the
    first, None meaning `bucket_bytes`, then `bucket_bytes`); parameters are never split."""
    first_cap = bucket_bytes if first_bucket_bytes is None else first_bucket_bytes
    if arrival_order is None:
        ordered = sorted(params, key=lambda p: -p.index)
    else:
        position = arrival_positions(params, arrival_order)
        ordered = sorted(params, key=lambda p: position[p.index])
    buckets: list[list[ParamInfo]] = [[]]
    size = 0
    for p in ordered:
        if p.numel == 0:
            continue
        buckets[-1].append(p)
        size += p.nbytes
        cap = first_cap if len(buckets) == 1 else bucket_bytes
        if size >= cap:
            buckets.append([])
            size = 0
    return [b for b in buckets if b]


def build_ddp(
    costs: BlockCosts,
    params: Sequence[ParamInfo],
    world_size: int,
    link: AlphaBeta,
    bucket_bytes: int,
    iterations: int,
    options: SimOptions,
    buffer_bytes: int = 0,
    buffer_broadcasts: int = 1,
    arrival_order: Sequence[int] | None = None,
) -> Built:
    """Graph of `options.warmup_iterations + iterations` iterations of DDP (`buffer_bytes`: the
    model's buffers, broadcast before every forward in `buffer_broadcasts` calls;
    `arrival_order`: see `ddp_buckets`)."""
    options = host_charged(options, link, world_size)
    graph = TaskGraph()
    blocks = param_blocks(costs, params)
    points = ready_points(params, blocks, len(costs.forward_s))
    buckets = ddp_buckets(params, bucket_bytes, options.ddp_first_bucket_bytes, arrival_order)
    steps = backward_steps(len(costs.forward_s), None)
    # DDP's reducer runs on its own thread: only communication's processor time shares compute.
    shared = options.charges_comm_cpu
    workers = [
        _resources(
            graph, w, link, shared, options.link_bucket_bytes, options.comm_rate_while_computing
        )
        for w in range(options.replicas)
    ]
    computes = [compute for compute, _, _ in workers]
    nics = [nic for _, _, nic in workers]
    total_bytes = sum(costs.param_bytes)
    group = _ProcessGroup()
    total = options.warmup_iterations + iterations
    starts: list[int] = []
    prev: list[int | None] = [None] * options.replicas
    no_gates: list[list[int]] = [[] for _ in costs.forward_s]
    for it in range(total):
        ready = []
        # Every rank's forward waits for rank 0's buffers, sent once rank 0 has stepped.
        gates = _buffer_broadcast(
            graph, buffer_bytes, nics, link, world_size, [*prev], it, computes, options,
            buffer_broadcasts, group,
        )  # fmt: skip
        gates += no_gates[len(gates) :]
        for w, (compute, _, _) in enumerate(workers):
            # Under no_sync, DDP broadcasts the buffers before the first micro-batch only.
            first, after = add_accumulation(
                graph, costs, stream=compute, worker=w, iteration=it, after=prev[w],
                gates=gates, passes=options.grad_accum - 1,
            )  # fmt: skip
            done = add_compute_iteration(
                graph,
                costs,
                stream=compute,
                worker=w,
                iteration=it,
                after=after,
                gates=gates if first is None else no_gates,
                steps=steps,
                shares=points.shares,
            )
            prev[w] = done.last
            ready.append(done.ready)
            if w == 0:
                starts.append(done.forward[0] if first is None else first)
        launched: int | None = None
        flows = []
        for k, bucket in enumerate(buckets):
            needs = sorted({(blocks[p.index], points.point[p.index]) for p in bucket})
            grads = [ready[w][b][j] for w in range(options.replicas) for b, j in needs]
            launched = graph.add(f"launch b{k}", "marker", iteration=it, deps=[launched, *grads])
            nbytes = sum(p.nbytes for p in bucket)
            queued = group.after([launched])
            flows.append(
                group.issued(_flow(graph, f"ar b{k}", nbytes, nics, link, world_size, queued, it))
            )
            cpu = _comm_cpu(
                graph, f"b{k}", nbytes, computes, [[launched]] * len(computes), it, options
            )
            flows += [t for t in cpu if t is not None]
        for w, (compute, _, _) in enumerate(workers):
            if options.clip:  # after backward, with every bucket reduced, as the step
                prev[w] = graph.add_work(
                    "clip", "update", compute, options.clip_s(total_bytes),
                    deps=[prev[w], *flows], worker=w, iteration=it,
                )  # fmt: skip
            prev[w] = graph.add_work(
                "step",
                "update",
                compute,
                options.update_s_per_byte * total_bytes,
                deps=[prev[w], *flows],
                worker=w,
                iteration=it,
                mem_end=-total_bytes,
            )
    taken = add_input(graph, costs, stream=workers[0][0], worker=0, iteration=total, after=prev[0])
    gates = _buffer_broadcast(
        graph, buffer_bytes, nics, link, world_size, [*prev], total, computes, options,
        buffer_broadcasts, group,
    )  # fmt: skip
    starts.append(_marker(graph, workers[0][0], taken, gates[0] if gates else [], total))
    return Built(graph, tuple(starts), options.warmup_iterations, "ddp", world_size)
