"""The discrete-event engine: runs a `TaskGraph` and returns every task's start and end.

Events are kept in one heap. Streams dispatch after all events of an instant are handled, so
tasks that become ready at the same moment compete by priority, not by arrival order. Links
are processor-sharing: when a flow joins or leaves, the flows on the links it touches are
brought up to date and their finish events re-issued (older events are recognised as stale
by a version number), so the cost of a change is proportional to the flows it affects.
A link with a token bucket (`Resource.bucket_bytes`) fills it while idle, and a flow that
starts on it while it is idle moves the bucket's bytes at once (its links' smallest bucket).
A link slowed by another resource (`Resource.slowed_by`) runs at its reduced share while that
resource is in use, as seen at the end of each instant: when that changes, its flows are
brought up to date and re-priced.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from cadence.sim.graph import STREAM, TaskGraph

_END, _JOIN, _FLOW = 0, 1, 2


@dataclass(frozen=True)
class Schedule:
    """When every task of a graph ran."""

    graph: TaskGraph
    """The graph that was run."""
    start_s: tuple[float, ...]
    """Start of each task (for a flow: when it became ready, latency included)."""
    end_s: tuple[float, ...]
    """End of each task."""
    worked: tuple[bool, ...] = ()
    """Whether each task did its work (False: a conditional task that ended at once, see
    `Task.work_if_ended` and `Task.ends_with`); empty: every task did."""

    def did_work(self, tid: int) -> bool:
        return not self.worked or self.worked[tid]

    @property
    def makespan_s(self) -> float:
        return max(self.end_s, default=0.0)


def run(graph: TaskGraph) -> Schedule:
    """Simulate `graph`; raises ValueError if some task can never run (impossible by
    construction, since tasks only depend on earlier ones, but checked anyway)."""
    tasks, resources = graph.tasks, graph.resources
    n = len(tasks)
    waiting = [len(t.deps) for t in tasks]
    succs: list[list[int]] = [[] for _ in range(n)]
    for t in tasks:
        for d in t.deps:
            succs[d].append(t.id)
    start = [math.nan] * n
    end = [math.nan] * n
    events: list[tuple[float, int, int, int, int]] = []  # (time, seq, kind, task, version)
    seq = 0

    def push(time: float, kind: int, tid: int, version: int = 0) -> None:
        nonlocal seq
        heapq.heappush(events, (time, seq, kind, tid, version))
        seq += 1

    queues: list[list[tuple[float, float, int]]] = [[] for _ in resources]
    busy = [False] * len(resources)
    dirty: set[int] = set()
    active: list[set[int]] = [set() for _ in resources]  # flows on each link
    left: dict[int, float] = {}  # bytes a flow still has to move
    rate: dict[int, float] = {}
    last: dict[int, float] = {}  # when `left` was last brought up to date
    version = [0] * n
    tokens = [0.0] * len(resources)  # bucket bytes each link held when it last went idle
    idle_since = [0.0] * len(resources)
    slowed = [r for r, res in enumerate(resources) if res.slowed_by is not None]
    sources = {s for r in slowed if (s := resources[r].slowed_by) is not None}
    in_use = [False] * len(resources)  # each slowing resource's state at the last instant's end

    def link_rate(r: int) -> float:
        res = resources[r]
        if res.slowed_by is not None and in_use[res.slowed_by]:
            return res.bytes_per_s * res.slowed_share
        return res.bytes_per_s

    def take_tokens(flow: int, now: float) -> float:
        """Bytes of `flow` its links' token buckets pass at once as it starts: as many as the
        emptiest of them holds; a link that is already carrying a flow has none to spare."""
        links = tasks[flow].resources
        if not all(resources[r].bucket_bytes for r in links) or any(active[r] for r in links):
            return 0.0
        held = [
            min(
                resources[r].bucket_bytes,
                tokens[r] + resources[r].bytes_per_s * (now - idle_since[r]),
            )
            for r in links
        ]
        used = min(min(held), tasks[flow].nbytes)
        for r, h in zip(links, held, strict=True):
            tokens[r] = h - used
        return used

    worked = [True] * n
    followers: dict[int, list[int]] = {}  # task -> deferred copies that end with its work
    for t in tasks:
        if t.ends_with is not None:
            followers.setdefault(t.ends_with, []).append(t.id)

    def ready(tid: int, now: float) -> None:
        if not math.isnan(end[tid]):
            return  # a deferred copy that ended with the task it follows
        task = tasks[tid]
        start[tid] = now
        cond = task.work_if_ended
        if cond is not None and not end[cond] <= now:  # (NaN: not ended)
            worked[tid] = False
            push(now, _END, tid)
        elif task.resources and resources[task.resources[0]].kind == STREAM:
            r = task.resources[0]
            heapq.heappush(queues[r], (task.priority, now, tid))
            dirty.add(r)
        elif task.resources and task.nbytes > 0:
            push(now + task.duration_s, _JOIN, tid)
        else:
            push(now + task.duration_s, _END, tid)

    def settle(flows: set[int], now: float) -> None:
        for f in flows:
            left[f] -= rate[f] * (now - last[f])
            last[f] = now

    def reprice(flows: set[int], now: float) -> None:
        for f in flows:
            rate[f] = min(link_rate(r) / len(active[r]) for r in tasks[f].resources)
            version[f] += 1
            push(now + max(left[f], 0.0) / rate[f], _FLOW, f, version[f])

    def neighbours(tid: int) -> set[int]:
        out: set[int] = set()
        for r in tasks[tid].resources:
            out |= active[r]
        return out

    def finish(tid: int, now: float) -> None:
        end[tid] = now
        task = tasks[tid]
        if worked[tid]:
            for f in followers.get(tid, ()):
                if math.isnan(start[f]):
                    start[f], worked[f] = now, False
                    finish(f, now)
        if task.resources and worked[tid]:
            r = task.resources[0]
            if resources[r].kind == STREAM:
                busy[r] = False
                dirty.add(r)
            elif tid in left:
                for link in task.resources:
                    active[link].discard(tid)
                    if not active[link]:
                        idle_since[link] = now
                others = neighbours(tid)
                settle(others, now)
                reprice(others, now)
        for s in succs[tid]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready(s, now)

    for t in tasks:
        if not t.deps:
            ready(t.id, 0.0)
    now = 0.0
    while events or dirty:
        if events:
            now = events[0][0]
        while events and events[0][0] == now:
            _, _, kind, tid, ver = heapq.heappop(events)
            if kind == _END:
                finish(tid, now)
            elif kind == _JOIN:
                others = neighbours(tid)
                settle(others, now)
                burst = take_tokens(tid, now)
                for link in tasks[tid].resources:
                    active[link].add(tid)
                left[tid], last[tid] = tasks[tid].nbytes - burst, now
                reprice(others | {tid}, now)
            elif ver == version[tid]:  # a flow's latest finish estimate: it is done
                left[tid] = 0.0
                finish(tid, now)
        for r in sorted(dirty):
            if not busy[r] and queues[r]:
                _, _, tid = heapq.heappop(queues[r])
                busy[r] = True
                start[tid] = now
                push(now + tasks[tid].duration_s, _END, tid)
        dirty.clear()
        if slowed:
            flipped = {s for s in sources if (busy[s] or bool(active[s])) != in_use[s]}
            if flipped:
                flows = {f for r in slowed if resources[r].slowed_by in flipped for f in active[r]}
                settle(flows, now)
                for s in flipped:
                    in_use[s] = not in_use[s]
                reprice(flows, now)
    if any(math.isnan(e) for e in end):
        stuck = [tasks[i].name for i in range(n) if math.isnan(end[i])][:5]
        raise ValueError(f"tasks never ran (dependency cycle?): {stuck}")
    return Schedule(graph, tuple(start), tuple(end), tuple(worked))
