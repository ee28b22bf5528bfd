"""Task graph of one pipeline step, built from the same `Schedule` the executor runs.

What the graph follows (`cadence/pipeline/executor.py`, our runtime):

- stage s runs its action list in order on one compute stream; an action on a group of K
  micro-batches is K forward (or backward) tasks, one per micro-batch, so memory rises and
  falls micro-batch by micro-batch;
- after a forward group, the group's activations go to stage s + 1 as ONE message (one
  latency, K x the bytes); after a backward group, its input gradients go back to s - 1 the
  same way. Sends are asynchronous: the sender computes on while the message moves;
- a forward on s > 0 (a backward on s < S - 1) waits for its group's message
  (`validation.message_source`, the dependency the validator replays);
- a message moves only once its receiver has posted the receive (gloo): our runtime posts
  every receive at the step's start; torch's runtime, which runs the schedules it supports by
  default, posts each after some earlier action of the receiver (`receives`, from
  `cadence.pipeline.receives.receive_points`), so a message can wait for its receiver;
- a posted receive reaches the sender as a notice written on the pair's one connection behind
  whatever the receiver has queued there: a receive posted mid-step after the receiver
  queued a message the other way lets the sender send only once that message has crossed
  (`_notice_after`; with every receive posted at the start, the notices leave on idle links);
- a message is a flow over the sender's transmit link and the receiver's receive link (both
  directions of a cable are separate, as on full-duplex Ethernet), shared fairly with any
  other stage pair's message in flight there, then the link's latency; messages from one
  stage to another cross one at a time, in the order they were sent (gloo writes a pair's
  messages in order on its one connection), their latencies overlapping;
- before its first action, each stage takes the step's batch to its device (every rank of a
  pipeline reads the whole batch: the first stage its inputs, the last its targets), for the
  profile's `input_s` scaled to the step's batch;
- after its last action, each stage steps its optimizer (`update_s_per_byte` x its parameter
  bytes); the step ends when every stage has finished (pipelines flush every step).

Memory per stage: parameters + gradients + optimizer state from the start, plus each
micro-batch's saved activations from the end of its forward to the end of its backward (with
recomputation: its input only, plus the full activations of the one micro-batch being
recomputed), plus during each backward after the stage's first one block's new weight gradients
(accumulated into the others), plus kernel workspace while a forward or backward runs, plus
every message the stage sent, from its send to the end of the step (the executor waits on its
sends only then), plus the receive buffer of every message it will get, from the step's start
until the action using it ends -- the accounting of `pipeline/memory.py`, over simulated time.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.pipeline.memory import backward_extra, forward_extra, received_bytes, sent_bytes
from cadence.pipeline.schedule import FORWARD, Action, Schedule
from cadence.pipeline.stages import StagePlan
from cadence.pipeline.validation import message_source, validate
from cadence.profile import Profile
from cadence.sim.engine import Schedule as Timed
from cadence.sim.engine import run
from cadence.sim.graph import LINK, STREAM, TaskGraph
from cadence.sim.metrics import (
    SimResult,
    _intersection,
    _length,
    _union,
    memory_timeline,
    moving_interval,
)

MESSAGE_KINDS = ("activation", "gradient")
LATENCY = "latency"
"""Kind of a message's latency, after its bytes have crossed."""


@dataclass(frozen=True)
class Affine:
    """Seconds of some work on n samples: `fixed_s + per_sample_s * n`."""

    fixed_s: float
    """Cost paid whatever the size (per-operator overhead; large for small CPU batches)."""
    per_sample_s: float
    """Cost of each sample."""

    def __call__(self, samples: int) -> float:
        return max(0.0, self.fixed_s + self.per_sample_s * samples)


@dataclass(frozen=True)
class Piecewise:
    """Seconds of some work on n samples, measured at a few sizes: linear between neighbouring
    sizes, the end segments extended beyond them. At a measured size it is the measurement."""

    sizes: tuple[int, ...]
    """Measured sizes, increasing, at least two."""
    seconds: tuple[float, ...]
    """Measured seconds at each size."""

    def __post_init__(self) -> None:
        if len(self.sizes) < 2 or len(self.sizes) != len(self.seconds):
            raise ValueError("Piecewise needs at least two sizes and one time per size")
        if any(a >= b for a, b in zip(self.sizes, self.sizes[1:], strict=False)):
            raise ValueError(f"Piecewise sizes must increase, got {self.sizes}")

    def __call__(self, samples: int) -> float:
        i = bisect.bisect_left(self.sizes, samples, 1, len(self.sizes) - 1)
        x0, x1 = self.sizes[i - 1], self.sizes[i]
        y0, y1 = self.seconds[i - 1], self.seconds[i]
        return max(0.0, y0 + (y1 - y0) * (samples - x0) / (x1 - x0))


Cost = Affine | Piecewise
"""Seconds of a stage's forward or backward as a function of the micro-batch size."""


@dataclass(frozen=True)
class StageCosts:
    """Compute cost of each stage as a function of the micro-batch size."""

    forward: tuple[Cost, ...]
    """Forward of one micro-batch on each stage (the last stage's includes the loss)."""
    backward: tuple[Cost, ...]
    """Backward of one micro-batch on each stage (input and weight gradients)."""


def _calibration(profile: Profile) -> float:
    # As `sim.compute.block_costs`: block timings count work shared by both gradients twice;
    # scale them so that they add up to the measured whole iteration.
    if profile.block_sum_s > 0 and profile.iteration_s > profile.loss_s:
        return (profile.iteration_s - profile.loss_s) / profile.block_sum_s
    return 1.0


def _stage_seconds(
    profile: Profile, ranges: Sequence[tuple[int, int]]
) -> list[tuple[float, float]]:
    scale = _calibration(profile)
    out = []
    for s, (a, b) in enumerate(ranges):
        fwd = sum(x.forward_s for x in profile.blocks[a:b]) * scale
        bwd = sum(x.backward_s for x in profile.blocks[a:b]) * scale
        if s == len(ranges) - 1:
            fwd += profile.loss_s
        out.append((fwd, bwd))
    return out


def stage_costs(
    profiles: Profile | Sequence[Profile], ranges: Sequence[tuple[int, int]]
) -> StageCosts:
    """Per-stage costs from one profile (proportional to the batch) or from profiles at two or
    more batch sizes: each stage's measured time at each size (the mean where a size was
    profiled twice), linear in between (`Piecewise`). Profiling every micro-batch size the
    planner tries makes each candidate's compute a measurement rather than a fit: one line
    through a few sizes misjudged small micro-batches, whose cost on a CPU is not linear in
    the size (per-operator overhead, cache effects)."""
    items = [profiles] if isinstance(profiles, Profile) else list(profiles)
    if not items:
        raise UserError("simulate_pipeline needs at least one profile")
    names = {p.model for p in items}
    if len(names) > 1:
        raise UserError(f"profiles of different models: {sorted(names)}")
    by_size: dict[int, list[list[tuple[float, float]]]] = {}
    for p in items:
        by_size.setdefault(p.batch_size, []).append(_stage_seconds(p, ranges))
    sizes = tuple(sorted(by_size))

    def cost(stage: int, part: int) -> Cost:
        means = [statistics.fmean(per[stage][part] for per in by_size[b]) for b in sizes]
        return _measured_cost(sizes, means)

    stages = range(len(ranges))
    return StageCosts(
        forward=tuple(cost(s, 0) for s in stages),
        backward=tuple(cost(s, 1) for s in stages),
    )


def _measured_cost(sizes: tuple[int, ...], seconds: Sequence[float]) -> Cost:
    """Seconds measured at increasing `sizes`: linear between them, or proportional to the
    size when only one was measured."""
    if len(sizes) == 1:
        return Affine(0.0, seconds[0] / sizes[0])
    return Piecewise(sizes, tuple(seconds))


def measured_stage_costs(times: Sequence[Mapping[int, tuple[float, float]]]) -> StageCosts:
    """Per-stage costs from each stage's (forward, backward) seconds measured at some
    micro-batch sizes (`pipeline.stage_probe`): linear between the sizes (`Piecewise`);
    proportional to the size when only one was measured."""
    if not times or any(not t for t in times):
        raise UserError("measured stage costs need at least one size for every stage")

    def cost(measured: Mapping[int, tuple[float, float]], part: int) -> Cost:
        sizes = tuple(sorted(measured))
        return _measured_cost(sizes, [measured[n][part] for n in sizes])

    return StageCosts(
        forward=tuple(cost(t, 0) for t in times), backward=tuple(cost(t, 1) for t in times)
    )


@dataclass(frozen=True)
class PipelineBuilt:
    """A pipeline step's graph plus what the figures are read from."""

    graph: TaskGraph
    """The tasks."""
    static_bytes: tuple[int, ...]
    """Parameters + gradients + optimizer state of each stage."""
    messages: int
    """Messages sent in one step (all stages)."""


def build_pipeline(
    plan: StagePlan,
    costs: StageCosts,
    schedule: Schedule,
    microbatch_size: int,
    link: AlphaBeta,
    *,
    optimizer_factor: float = 2.0,
    update_s_per_byte: float = 0.0,
    input_s: float = 0.0,
    link_bucket_bytes: float = 0.0,
    receives: Mapping[Action, Action | None] | None = None,
) -> PipelineBuilt:
    """Graph of one step of `schedule` over `plan`'s stages, micro-batches of
    `microbatch_size` samples, every neighbour pair joined by `link`; each stage first spends
    `input_s` taking the step's batch to its device. `link_bucket_bytes`: each link
    direction's token bucket (`Resource.bucket_bytes`; 0 for none): a message that starts on
    a link idle long enough passes that many bytes at once, as through the emulated
    cluster's tbf. `receives`: per consuming action, the action of its stage after which its
    receive is posted (`receive_points`); None, or an action missing: at the step's start."""
    validate(schedule)
    S = schedule.num_stages
    if plan.num_stages != S:
        raise UserError(f"stage plan has {plan.num_stages} stages, schedule {S}")
    graph = TaskGraph()
    rate = 1.0 / link.beta_s_per_byte if link.beta_s_per_byte > 0 else 1e18
    compute = [graph.resource(f"w{s}.compute", STREAM, worker=s) for s in range(S)]
    bucket = link_bucket_bytes
    tx = [graph.resource(f"w{s}.tx", LINK, bytes_per_s=rate, worker=s, bucket_bytes=bucket)
          for s in range(S)]  # fmt: skip
    rx = [graph.resource(f"w{s}.rx", LINK, bytes_per_s=rate, worker=s, bucket_bytes=bucket)
          for s in range(S)]  # fmt: skip
    static = tuple(int(p * (2 + optimizer_factor)) for p in plan.param_bytes)

    # Visit actions in an order where every message's sender comes first: the validator's
    # replay order (tasks may only depend on tasks already added).
    order = _replay_order(schedule)
    last_task: list[int | None] = [None] * S
    if input_s > 0:
        last_task = [
            graph.add("input", "input", resources=(compute[s],), duration_s=input_s, worker=s)
            for s in range(S)
        ]
    backwarded = [False] * S  # has the stage run a backward yet (its gradients exist)
    done: dict[Action, int] = {}  # action -> its last compute task
    sent: dict[Action, int] = {}  # action -> its outgoing message (flow task)
    pair_last: dict[tuple[int, int], int] = {}  # (sender, receiver) -> its last message
    held_sent = [0] * S  # bytes of the messages each stage has sent (freed at the step's end)
    posted = [  # receive buffers, all posted at the step's start
        sum(received_bytes(plan, schedule, a, microbatch_size) for a in schedule.actions[s])
        for s in range(S)
    ]
    messages = 0
    points = receives or {}
    alpha = link.alpha_for("p2p")
    position = {a: i for acts in schedule.actions for i, a in enumerate(acts)}
    inbound_of: dict[Action, int] = {}  # consumer -> the task its message arrives with
    # Each pair's messages not yet built, in the order they are sent: they cross in turn.
    unbuilt: dict[tuple[int, int], deque[Action]] = {}
    source_of: dict[Action, Action] = {}  # consumer -> the action whose message it needs
    for sender in schedule.actions:
        for sending in sender:
            to = _sends_to(sending)
            if 0 <= to < S:
                consumer = Action(to, sending.kind, sending.microbatches)
                source_of[consumer] = sending
                unbuilt.setdefault((sending.stage, to), deque()).append(consumer)

    def build(consumer: Action, force: bool) -> bool:
        """Add `consumer`'s message once it is sent and its receive posted, and the message
        its receive's notice may queue behind is built (`_notice_after`); `force`: without
        that one."""
        source, after = source_of[consumer], points.get(consumer)
        if source not in done or (after is not None and after not in done):
            return False
        ahead = None if after is None else _queued_behind(schedule, position, after, source.stage)
        if ahead is not None and ahead not in sent and not force:
            return False
        notice = None
        if after is not None and ahead is not None and ahead in sent:
            back = Action(source.stage, ahead.kind, ahead.microbatches)  # `ahead`'s consumer
            notice = _notice_after(
                graph, position, done, sent[ahead], ahead, points.get(back), done[after], source
            )
        pair = (source.stage, consumer.stage)
        nbytes = sent_bytes(plan, schedule, source, microbatch_size)
        flow = pair_last[pair] = graph.add(
            f"{source}>{consumer.stage}",
            "activation" if source.kind == FORWARD else "gradient",
            resources=(tx[source.stage], rx[consumer.stage]),
            nbytes=nbytes,
            deps=[
                done[source],
                None if after is None else done[after],
                pair_last.get(pair),
                notice,
            ],
            worker=source.stage,
            mem_start=nbytes,  # the sender keeps the tensor until the step ends
        )
        sent[source] = flow
        # Its latency runs after its bytes, so that a pair's next message need not wait
        # for it: back-to-back messages on one connection overlap their latencies.
        inbound_of[consumer] = flow
        if alpha > 0:
            inbound_of[consumer] = graph.add(
                f"{source}>{consumer.stage} latency", LATENCY, duration_s=alpha, deps=[flow],
                worker=source.stage,
            )  # fmt: skip
        return True

    def build_ready() -> None:
        """Build every message whose dependencies exist, each pair's in sending order."""
        for queue in unbuilt.values():
            while queue and build(queue[0], False):
                queue.popleft()

    for action in order:
        s = action.stage
        inbound = None
        source = message_source(schedule, action)
        if source is not None:  # the message leaves once sent and its receive is posted
            queue = unbuilt[(source.stage, s)]  # built as soon as it could be, else now
            while action not in inbound_of:  # its pair's earlier messages first, as sent
                built = build(queue[0], True)
                assert built, f"{queue[0]}'s message is not sent or its receive not posted"
                queue.popleft()
            inbound = inbound_of[action]
        forward = action.kind == FORWARD
        deps: list[int | None] = [last_task[s], inbound]
        received = received_bytes(plan, schedule, action, microbatch_size)
        for i, m in enumerate(action.microbatches):
            first = i == 0 and action == schedule.actions[s][0]  # allocates static memory
            extra, kept = backward_extra(plan, schedule, s, microbatch_size, not backwarded[s])
            if forward:  # workspace while it runs, then what it keeps
                ws = forward_extra(plan, s)
                seconds, mem_start, mem_end = costs.forward[s](microbatch_size), kept + ws, -ws
            else:
                seconds = costs.backward[s](microbatch_size)
                if schedule.recompute:  # re-run the forward, holding its full activations
                    seconds += costs.forward[s](microbatch_size)
                mem_start, mem_end = extra, -(extra + kept)
                backwarded[s] = True
            last_task[s] = graph.add(
                f"{s}{action.kind}{m}",
                "forward" if forward else "backward",
                resources=(compute[s],),
                duration_s=seconds,
                deps=deps,
                worker=s,
                mem_start=mem_start + (static[s] + posted[s] if first else 0),
                # the message's receive buffer is freed once the action is done with it
                mem_end=mem_end - (received if i == len(action.microbatches) - 1 else 0),
            )
            deps = [last_task[s]]
        computed = last_task[s]
        assert computed is not None  # every action has at least one micro-batch
        done[action] = computed
        build_ready()
        peer = s + 1 if forward else s - 1
        if 0 <= peer < S:  # its message is added with its consumer, above
            held_sent[s] += sent_bytes(plan, schedule, action, microbatch_size)
            messages += 1
    for s in range(S):
        graph.add(
            "update",
            "update",
            resources=(compute[s],),
            duration_s=update_s_per_byte * plan.param_bytes[s],
            deps=[last_task[s], *(t for a, t in sent.items() if a.stage == s)],
            worker=s,
            mem_end=-held_sent[s],
        )
    return PipelineBuilt(graph, static, messages)


def _sends_to(action: Action) -> int:
    """The stage `action`'s output goes to: the next one after a forward, the previous one
    after a backward (out of range at the ends: no message)."""
    return action.stage + 1 if action.kind == FORWARD else action.stage - 1


def _queued_behind(
    schedule: Schedule, position: Mapping[Action, int], after: Action, peer: int
) -> Action | None:
    """The last action of `after`'s stage, up to `after`, that sends a message to `peer`
    (`position`: each action's place in its stage's list).

    Over gloo a posted receive tells the sender it may send (a notice), and that notice joins
    the receiver's queue of writes to the sender on their one connection: behind any message
    the receiver is sending back. Where every receive is posted at the step's start the notice
    leaves on an idle link; where one is posted mid-step (torch's runtime posts each after an
    earlier action), the message waits for the receiver's latest message the other way to
    cross first, instead of crossing beside it in the link's other direction."""
    actions = schedule.actions[after.stage]
    for i in range(position[after], -1, -1):
        action = actions[i]
        if _sends_to(action) == peer:
            return action
    return None


def _notice_after(
    graph: TaskGraph,
    position: Mapping[Action, int],
    done: Mapping[Action, int],
    back_flow: int,
    back_source: Action,
    back_after: Action | None,
    posted: int,
    source: Action,
) -> int | None:
    """A task that ends when a message from `source` may leave, as far as its receive's notice
    goes (posted when task `posted` ends): at once if the receiver's message the other way
    (`back_flow`, from `back_source`, its receive posted after `back_after`) was not yet
    queued by then, else once that message has crossed (`_queued_behind`).

    That message is queued once it is sent and its receive is posted. It is sent before the
    notice (`back_source` runs no later than the notice is posted, its send right after it),
    so it is queued first if its receive was posted at the step's start, or before the
    notice. Where that receive is posted no later than `source` runs on their common stage,
    a notice that leaves first ends by the time `source` has run, so waiting for the
    receive to be posted costs nothing; otherwise the notice is taken to leave first
    (None)."""
    if back_after is None:
        return back_flow
    if position[back_after] > position[source]:  # both on the sending stage
        return None
    queued = graph.add(f"{back_source} queued", "marker", deps=[done[back_after]])
    first = graph.add(f"{back_source} after notice", "marker", deps=[queued], work_if_ended=posted)
    return graph.add(f"{back_source} crossed", "marker", deps=[back_flow], ends_with=first)


def batch_input_s(profile: Profile, batch_size: int) -> float:
    """Seconds each pipeline rank spends taking a step's whole batch of `batch_size` samples
    to its device: the profile's `input_s`, scaled from the profile's batch."""
    return (profile.input_s or 0.0) * batch_size / profile.batch_size


def _replay_order(schedule: Schedule) -> list[Action]:
    """Every action once, each after the action whose message it needs."""
    S = schedule.num_stages
    pos = [0] * S
    done: set[Action] = set()
    out: list[Action] = []
    while len(out) < sum(len(a) for a in schedule.actions):
        for s in range(S):
            acts = schedule.actions[s]
            while pos[s] < len(acts):
                source = message_source(schedule, acts[pos[s]])
                if source is not None and source not in done:
                    break
                done.add(acts[pos[s]])
                out.append(acts[pos[s]])
                pos[s] += 1
    return out


def stage_peaks(result: SimResult) -> tuple[int, ...]:
    """Peak simulated memory of each stage (bytes), parameters and optimizer state included."""
    return _peaks(result.schedule, result.world_size)


def _peaks(timed: Timed, stages: int) -> tuple[int, ...]:
    return tuple(max(level for _, level in memory_timeline(timed, 0, s)) for s in range(stages))


def analyse_pipeline(built: PipelineBuilt, name: str) -> SimResult:
    """Figures of one simulated pipeline step (the step is the iteration: pipelines flush)."""
    timed = run(built.graph)
    graph = timed.graph
    S = len(built.static_bytes)
    span = timed.makespan_s
    unions = {r: _union(_intervals(timed, r)) for r in range(len(graph.resources))}
    busy = {res.name: _length(unions[r]) for r, res in enumerate(graph.resources)}
    flows = [t for t in graph.tasks if t.kind in MESSAGE_KINDS]
    work = [0.0] * S  # input + forward + backward seconds of each stage
    update = [0.0] * S
    for t in graph.tasks:
        if t.kind == "update":
            update[t.worker] += t.duration_s
        elif t.kind in ("input", "forward", "backward"):
            work[t.worker] += t.duration_s
    link_bytes: dict[int, float] = {}
    for t in flows:
        for r in t.resources:
            link_bytes[r] = link_bytes.get(r, 0.0) + t.nbytes
    wire_s = max((b / graph.resources[r].bytes_per_s for r, b in link_bytes.items()), default=0.0)
    serial = sum(work) + sum(update)
    serial += sum(t.nbytes / graph.resources[t.resources[0]].bytes_per_s for t in flows)
    serial += sum(t.duration_s for t in graph.tasks if t.kind == LATENCY)
    bound = max([wire_s, *(w + u for w, u in zip(work, update, strict=True))])
    eff = (serial - span) / (serial - bound) if serial - bound > 1e-12 * serial else 1.0
    tx0, compute0 = S, 0  # resources are added as S computes, then S tx links, S rx links
    overlap = _intersection(unions[tx0], unions[compute0]) / busy["w0.tx"] if busy["w0.tx"] else 0.0
    return SimResult(
        strategy=f"pipeline:{name}",
        world_size=S,
        iteration_s=span,
        compute_s=max(work),
        update_s=max(update),
        wire_s=wire_s,
        serial_s=serial,
        bound_s=bound,
        overlap_ratio=overlap,
        efficiency=eff,
        busy_s=busy,
        peak_memory_bytes=max(_peaks(timed, S)),
        wire_bytes=max(link_bytes.values(), default=0.0),
        iterations=1,
        schedule=timed,
        window=(0.0, span),
        base_memory_bytes=0,
    )


def _intervals(timed: Timed, r: int) -> list[tuple[float, float]]:
    graph = timed.graph
    if graph.resources[r].kind == LINK:
        return [moving_interval(timed, t.id) for t in graph.tasks if r in t.resources]
    return [(timed.start_s[t.id], timed.end_s[t.id]) for t in graph.tasks if r in t.resources]


def simulate_pipeline(
    profile: Profile | Sequence[Profile],
    *,
    stages: int,
    microbatches: int,
    schedule: str | Schedule = "1f1b",
    link: AlphaBeta | float,
    batch_size: int | None = None,
    recompute: bool = False,
    ranges: tuple[tuple[int, int], ...] | None = None,
    optimizer: str = "adam",
    update_s_per_byte: float = 0.0,
    link_bucket_bytes: float = 0.0,
    runtime: str = "cadence",
) -> SimResult:
    """Predict one step of pipeline-parallel training.

    `profile`: a `Profile` (times scale with the micro-batch size), or profiles of the same
    model at several batch sizes (each stage's measured cost, linear between the sizes).
    `stages` S, `microbatches` M, `schedule` a name ("gpipe", "1f1b", "kfkb:K") or a built
    `Schedule`, `link` an `AlphaBeta` or bytes/s between neighbouring stages. `batch_size` B
    is the samples per step (default: the first profile's), cut into M micro-batches of
    B / M. `ranges`: block range of each stage (default: balanced on the profile). The
    result's `iteration_s` is the step time, `peak_memory_bytes` the largest stage's peak
    (`stage_peaks(result)` gives every stage's),
    `wire_bytes` the busiest link direction's bytes. `link_bucket_bytes`: each link
    direction's token bucket (an emulated link's tbf; 0, a real link: none). `runtime`: the
    executor's backend that runs the step, "cadence" or "torch" (`receive_points`: where it
    posts its receives).
    """
    from cadence.pipeline.memory import optimizer_state_factor
    from cadence.pipeline.receives import receive_points
    from cadence.pipeline.schedule import build_schedule
    from cadence.pipeline.stages import plan_stages
    from cadence.sim.compute import link_model

    first = profile if isinstance(profile, Profile) else list(profile)[0]
    batch = batch_size if batch_size is not None else first.batch_size
    if microbatches < 1 or batch % microbatches:
        raise UserError(
            f"{microbatches} micro-batches do not divide the batch of {batch}: use one of "
            f"{[m for m in range(1, batch + 1) if batch % m == 0]}"
        )
    plan = plan_stages(first, stages, ranges)
    if isinstance(schedule, str):
        schedule = build_schedule(schedule, stages, microbatches, recompute)
    if (schedule.num_stages, schedule.num_microbatches) != (stages, microbatches):
        raise UserError(
            f"schedule {schedule.name} is for {schedule.num_stages} stages and "
            f"{schedule.num_microbatches} micro-batches, not {stages} and {microbatches}"
        )
    built = build_pipeline(
        plan,
        stage_costs(profile, plan.ranges),
        schedule,
        batch // microbatches,
        link_model(link),
        optimizer_factor=optimizer_state_factor(optimizer),
        update_s_per_byte=update_s_per_byte,
        input_s=batch_input_s(first, batch),
        link_bucket_bytes=link_bucket_bytes,
        receives=receive_points(schedule, runtime),
    )
    return analyse_pipeline(built, schedule.name)
